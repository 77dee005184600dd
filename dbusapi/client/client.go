// Package client is the bus side of rdmactl: it reads rdmad's objects and
// calls its methods on org.rdmad1.
package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/rdmad/rdmad/dbusapi"
)

// ErrNotRunning says nobody owns org.rdmad1 on the bus.
var ErrNotRunning = errors.New("rdmad is not running")

// Client is a connection to rdmad.
type Client struct {
	conn        *dbus.Conn
	Interactive bool // allow polkit to ask the user (ALLOW_INTERACTIVE_AUTHORIZATION)
}

// Target says which rdmad to talk to: the one on Bus ("system",
// "session" or an address), on this host or, with Host ("[USER@]HOST[:PORT]"),
// on another host reached over ssh.
type Target struct {
	Bus  string
	Host string
	// Timeout bounds connecting: dial (or ssh), authentication, Hello and
	// the question whether rdmad runs (0: DefaultConnectTimeout).
	Timeout time.Duration
	// Stderr gets what ssh writes to its stderr, escaped (nil: os.Stderr).
	Stderr io.Writer
}

// BusError says the bus could not be reached, and what to do.
type BusError struct {
	Bus    string // "system", "session" or an address
	Reason string // why, in words ("" when nothing more is known)
	Err    error
}

func (e *BusError) Error() string {
	var hint string
	switch e.Bus {
	case "system":
		hint = "is dbus running? (systemctl status dbus)"
	case "session":
		hint = "rdmad runs on the system bus: leave out --bus session"
	default:
		hint = "check the address given to --bus"
	}
	msg := "cannot reach " + dbusapi.DescribeBus(e.Bus)
	if e.Reason != "" {
		msg += " (" + e.Reason + ")"
	}
	return msg + ": " + hint
}

func (e *BusError) Unwrap() error { return e.Err }

// reason says in words why a connection failed, for the errors a user can
// act on; "" for the others.
func reason(err error) string {
	switch {
	case errors.Is(err, syscall.ENOENT):
		return "no such socket"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
		return "permission denied"
	}
	return ""
}

// Connect dials bus ("system", "session" or an address) and checks that
// rdmad owns its name, so callers get one clear error instead of a timeout.
func Connect(bus string) (*Client, error) { return ConnectTarget(Target{Bus: bus}) }

// ConnectTarget connects to the rdmad t names. Everything up to the answer
// whether rdmad runs happens within t.Timeout: a bus that accepts and then
// says nothing, or an ssh remote that never answers, is given up.
func ConnectTarget(t Target) (*Client, error) {
	if t.Bus == "" {
		t.Bus = "system"
	}
	if t.Timeout <= 0 {
		t.Timeout = DefaultConnectTimeout
	}
	deadline := time.Now().Add(t.Timeout)
	var conn *dbus.Conn
	var err error
	if t.Host != "" {
		conn, err = dialSSH(t, deadline)
	} else {
		conn, err = dial(t.Bus, deadline)
	}
	if err != nil {
		return nil, err
	}
	c := &Client{conn: conn}
	var has bool
	cx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	if err := conn.BusObject().CallWithContext(cx, "org.freedesktop.DBus.NameHasOwner", 0, dbusapi.BusName).Store(&has); err != nil {
		conn.Close()
		if t.Host != "" {
			argv, _ := SSHCommand(t.Host, t.Bus)
			return nil, &SSHError{Host: t.Host, Argv: argv, Err: err}
		}
		return nil, &BusError{Bus: t.Bus, Reason: "it does not answer", Err: err}
	}
	if !has {
		conn.Close()
		where := "the " + t.Bus + " bus"
		if t.Bus != "system" && t.Bus != "session" {
			where = "the bus at " + t.Bus
		}
		if t.Host != "" {
			where += " of " + t.Host
		}
		return nil, fmt.Errorf("%w on %s (%s has no owner): see systemctl status rdmad", ErrNotRunning, where, dbusapi.BusName)
	}
	return c, nil
}

// systemBusSocket is where the system bus listens (the D-Bus
// specification's default address).
const systemBusSocket = "/run/dbus/system_bus_socket"

// dial connects to a local bus by its address, authenticates and says
// Hello, all before deadline (openBus).
func dial(bus string, deadline time.Time) (*dbus.Conn, error) {
	addr, err := busAddress(bus)
	if err != nil {
		return nil, err
	}
	stream, err := dialAddress(addr, deadline)
	if err != nil {
		why := reason(err)
		if bus == "system" && os.Getenv("DBUS_SYSTEM_BUS_ADDRESS") == "" {
			if _, serr := os.Stat(systemBusSocket); serr != nil {
				why = reason(serr) + " at " + systemBusSocket
			}
		}
		if why == "" && errors.Is(err, os.ErrDeadlineExceeded) {
			why = "it does not answer"
		}
		return nil, &BusError{Bus: bus, Reason: why, Err: err}
	}
	conn, err := openBus(stream, nil, deadline)
	switch {
	case errors.Is(err, errConnectTimeout):
		return nil, &BusError{Bus: bus, Reason: "it does not answer", Err: err}
	case errors.Is(err, errAuthLine):
		return nil, &BusError{Bus: bus, Reason: "it is not a D-Bus bus: " + errAuthLine.Error(), Err: err}
	case err != nil:
		return nil, &BusError{Bus: bus, Reason: "authentication failed", Err: err}
	}
	return conn, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// Conn exposes the connection (tests subscribe to signals on it).
func (c *Client) Conn() *dbus.Conn { return c.conn }

func (c *Client) root() dbus.BusObject { return c.conn.Object(dbusapi.BusName, dbusapi.RootPath) }

func (c *Client) call(ctx context.Context, method string, args ...any) *dbus.Call {
	var flags dbus.Flags
	if c.Interactive {
		flags |= dbus.FlagAllowInteractiveAuthorization
	}
	call := GoWithFlags(ctx, c.conn, dbusapi.BusName, dbusapi.RootPath, dbusapi.ManagerIface+"."+method, flags, make(chan *dbus.Call, 1), args...)
	<-call.Done // also when ctx ends
	return call
}

// GoWithFlags sends a method call with exactly the flags given and returns
// at once; call.Done is signalled with the reply. godbus's Object.Call
// and Go keep only NO_AUTO_START and NO_REPLY_EXPECTED and drop
// ALLOW_INTERACTIVE_AUTHORIZATION, without which polkit never asks the
// user for a password.
func GoWithFlags(ctx context.Context, conn *dbus.Conn, dest string, path dbus.ObjectPath, method string, flags dbus.Flags, ch chan *dbus.Call, args ...any) *dbus.Call {
	iface, member := "", method
	if i := strings.LastIndexByte(method, '.'); i >= 0 {
		iface, member = method[:i], method[i+1:]
	}
	msg := &dbus.Message{Type: dbus.TypeMethodCall, Flags: flags, Body: args, Headers: map[dbus.HeaderField]dbus.Variant{
		dbus.FieldDestination: dbus.MakeVariant(dest),
		dbus.FieldPath:        dbus.MakeVariant(path),
		dbus.FieldMember:      dbus.MakeVariant(member),
	}}
	if iface != "" {
		msg.Headers[dbus.FieldInterface] = dbus.MakeVariant(iface)
	}
	if len(args) > 0 {
		msg.Headers[dbus.FieldSignature] = dbus.MakeVariant(dbus.SignatureOf(args...))
	}
	return conn.SendWithContext(ctx, msg, ch)
}

// Snapshot is everything rdmad publishes, read in one GetManagedObjects.
type Snapshot struct {
	Manager dbusapi.Manager
	Devices []dbusapi.Device // sorted by name, each with its ports by number
}

// Snapshot reads the manager and every device and port.
func (c *Client) Snapshot(ctx context.Context) (*Snapshot, error) {
	var mprops map[string]dbus.Variant
	if err := c.root().CallWithContext(ctx, "org.freedesktop.DBus.Properties.GetAll", 0, dbusapi.ManagerIface).Store(&mprops); err != nil {
		return nil, fmt.Errorf("read the Manager's properties (GetAll on %s): %w", dbusapi.RootPath, err)
	}
	s := &Snapshot{}
	if err := dbusapi.FromProps(mprops, &s.Manager); err != nil {
		return nil, err
	}
	var objs map[dbus.ObjectPath]map[string]map[string]dbus.Variant
	if err := c.root().CallWithContext(ctx, "org.freedesktop.DBus.ObjectManager.GetManagedObjects", 0).Store(&objs); err != nil {
		return nil, fmt.Errorf("list the devices and ports (GetManagedObjects on %s): %w", dbusapi.RootPath, err)
	}
	devs := map[string]*dbusapi.Device{}
	var ports []dbusapi.Port
	for path, ifaces := range objs {
		if p, ok := ifaces[dbusapi.DeviceIface]; ok {
			var d dbusapi.Device
			if err := dbusapi.FromProps(p, &d); err != nil {
				return nil, fmt.Errorf("read the device at %s: %w", path, err)
			}
			devs[d.Name] = &d
		}
		if p, ok := ifaces[dbusapi.PortIface]; ok {
			var pt dbusapi.Port
			if err := dbusapi.FromProps(p, &pt); err != nil {
				return nil, fmt.Errorf("read the port at %s: %w", path, err)
			}
			ports = append(ports, pt)
		}
	}
	sort.Slice(ports, func(i, j int) bool { return ports[i].Number < ports[j].Number })
	for _, p := range ports {
		if d := devs[p.Device]; d != nil {
			d.Ports = append(d.Ports, p)
		}
	}
	for _, d := range devs {
		if d.Ports == nil {
			d.Ports = []dbusapi.Port{}
		}
		s.Devices = append(s.Devices, *d)
	}
	sort.Slice(s.Devices, func(i, j int) bool { return s.Devices[i].Name < s.Devices[j].Name })
	return s, nil
}

// Device returns one device of the snapshot, or nil.
func (s *Snapshot) Device(name string) *dbusapi.Device {
	for i := range s.Devices {
		if s.Devices[i].Name == name {
			return &s.Devices[i]
		}
	}
	return nil
}

// ReconcileResult is the answer of Reconcile.
type ReconcileResult struct {
	Changed uint32 `json:"changed"`
	Failed  uint32 `json:"failed"`
	Summary string `json:"summary"`
}

// Reconcile runs a full pass.
func (c *Client) Reconcile(ctx context.Context) (ReconcileResult, error) {
	var r ReconcileResult
	err := c.call(ctx, "Reconcile").Store(&r.Changed, &r.Failed, &r.Summary)
	return r, err
}

// Reload re-reads the configuration.
func (c *Client) Reload(ctx context.Context) (string, error) {
	var summary string
	err := c.call(ctx, "Reload").Store(&summary)
	return summary, err
}

// SetQoSSettings declares [[qos]] settings on a port (0: all Ethernet
// ports of the device): keys as rdmad.toml writes them, values in the D-Bus
// types of the contract.
func (c *Client) SetQoSSettings(ctx context.Context, device string, port uint32, settings map[string]dbus.Variant, persist bool) error {
	return c.call(ctx, "SetQoSSettings", device, port, settings, persist).Err
}

// SetQoS sets trust ("" keeps) and the PFC priorities on a port (0: all
// Ethernet ports); keepPFC leaves PFC as declared, pfc empty turns it off.
func (c *Client) SetQoS(ctx context.Context, device string, port uint32, trust string, pfc []uint8, keepPFC bool, persist bool) error {
	arg := append([]byte{}, pfc...)
	if keepPFC {
		arg = []byte{dbusapi.QoSKeepPFC}
	}
	return c.call(ctx, "SetQoS", device, port, trust, arg, persist).Err
}

// SetRoCE sets mode ("" keeps) and tos (-1 keeps) on a port (0: all).
func (c *Client) SetRoCE(ctx context.Context, device string, port uint32, mode string, tos int32, persist bool) error {
	return c.call(ctx, "SetRoCE", device, port, mode, tos, persist).Err
}

// AddLink declares a soft RDMA link.
func (c *Client) AddLink(ctx context.Context, name, typ, netdev string, persist bool) error {
	return c.call(ctx, "AddLink", name, typ, netdev, persist).Err
}

// DeleteLink removes a soft RDMA link.
func (c *Client) DeleteLink(ctx context.Context, name string, persist bool) error {
	return c.call(ctx, "DeleteLink", name, persist).Err
}

// SetNetnsMode sets the RDMA netns mode.
func (c *Client) SetNetnsMode(ctx context.Context, mode string, persist bool) error {
	return c.call(ctx, "SetNetnsMode", mode, persist).Err
}

// Withdraw removes a declaration of kind ("roce", "qos", "link",
// "netns") made over D-Bus, so the files decide again: at runtime, or with
// persist also in rdmad's drop-in.
func (c *Client) Withdraw(ctx context.Context, kind, device string, port uint32, persist bool) error {
	return c.call(ctx, "Withdraw", kind, device, port, persist).Err
}

// HoldCorrections asks rdmad not to write the named settings of a port
// while this client is connected (or until ReleaseCorrections): closing
// the client ends the hold too.
func (c *Client) HoldCorrections(ctx context.Context, device string, port uint32, settings []string) error {
	return c.call(ctx, "HoldCorrections", device, port, settings).Err
}

// ReleaseCorrections ends this client's hold on a port.
func (c *Client) ReleaseCorrections(ctx context.Context, device string, port uint32) error {
	return c.call(ctx, "ReleaseCorrections", device, port).Err
}

// Describe returns rdmad's JSON description.
func (c *Client) Describe(ctx context.Context) (string, error) {
	var s string
	err := c.call(ctx, "Describe").Store(&s)
	return s, err
}

// Diagnose returns the findings of rdmad's checks (org.rdmad1.Manager.Diagnose)
// as the JSON document rdmad sent; dbusapi.DecodeFindings reads it.
func (c *Client) Diagnose(ctx context.Context) (string, error) {
	var s string
	err := c.call(ctx, "Diagnose").Store(&s)
	return s, err
}

// ErrorName returns the D-Bus error name of err, "" if it is not one.
func ErrorName(err error) string {
	var de dbus.Error
	if errors.As(err, &de) {
		return de.Name
	}
	var dep *dbus.Error
	if errors.As(err, &dep) {
		return dep.Name
	}
	return ""
}

// ErrorMessage returns the message of a D-Bus error without its name
// ("" for no error).
func ErrorMessage(err error) string {
	if err == nil {
		return ""
	}
	var de dbus.Error
	if errors.As(err, &de) && len(de.Body) > 0 {
		if s, ok := de.Body[0].(string); ok {
			return s
		}
	}
	return err.Error()
}

// Plan asks rdmad what the configuration files in force, plus candidate as
// the drop-in rdmad.d/as, would change (org.rdmad1.Manager.Plan); as ""
// plans the files as they are. It returns the JSON document rdmad sent;
// dbusapi.DecodePlan reads it.
func (c *Client) Plan(ctx context.Context, candidate []byte, as string) (string, error) {
	if candidate == nil {
		candidate = []byte{}
	}
	var s string
	err := c.call(ctx, "Plan", candidate, as).Store(&s)
	return s, err
}

// ReadPorts asks rdmad to read the settings of device's ports (every
// device's for "") or of its port port (0: every port) from the kernel now
// (org.rdmad1.Manager.ReadPorts). It returns them by device and number,
// each as its org.rdmad1.Port properties would be, and when they were read.
func (c *Client) ReadPorts(ctx context.Context, device string, port uint32) (time.Time, []dbusapi.Port, error) {
	var usec uint64
	var objs map[dbus.ObjectPath]map[string]dbus.Variant
	if err := c.call(ctx, "ReadPorts", device, port).Store(&usec, &objs); err != nil {
		return time.Time{}, nil, err
	}
	out := make([]dbusapi.Port, 0, len(objs))
	for path, props := range objs {
		var p dbusapi.Port
		if err := dbusapi.FromProps(props, &p); err != nil {
			return time.Time{}, nil, fmt.Errorf("read the port at %s: %w", path, err)
		}
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Device != out[j].Device {
			return out[i].Device < out[j].Device
		}
		return out[i].Number < out[j].Number
	})
	return time.UnixMicro(int64(usec)), out, nil
}

// Update puts ports, read after the snapshot (ReadPorts), in place of the
// snapshot's ports of the same device and number.
func (s *Snapshot) Update(ports []dbusapi.Port) {
	for _, p := range ports {
		if d := s.Device(p.Device); d != nil {
			for i := range d.Ports {
				if d.Ports[i].Number == p.Number {
					d.Ports[i] = p
				}
			}
		}
	}
}

// Watch subscribes to rdmad's signals: every signal org.rdmad1 sends
// (PropertiesChanged, InterfacesAdded and InterfacesRemoved, the
// Manager's SettingCorrected and SettingContested), and the bus's
// NameOwnerChanged for org.rdmad1 (rdmad starting and stopping). The
// channel is closed when the connection is.
func (c *Client) Watch() (<-chan *dbus.Signal, error) {
	if err := c.conn.AddMatchSignal(dbus.WithMatchSender(dbusapi.BusName)); err != nil {
		return nil, fmt.Errorf("subscribe to rdmad's signals: %w", err)
	}
	if err := c.conn.AddMatchSignal(dbus.WithMatchSender("org.freedesktop.DBus"), dbus.WithMatchMember("NameOwnerChanged"),
		dbus.WithMatchArg(0, dbusapi.BusName)); err != nil {
		return nil, fmt.Errorf("subscribe to rdmad's arrival on the bus: %w", err)
	}
	ch := make(chan *dbus.Signal, 64)
	c.conn.Signal(ch)
	return ch, nil
}

// Objects reads every object's properties as rdmad publishes them, by
// path: the Manager's, each device's and each port's.
func (c *Client) Objects(ctx context.Context) (map[dbus.ObjectPath]map[string]dbus.Variant, error) {
	var mprops map[string]dbus.Variant
	if err := c.root().CallWithContext(ctx, "org.freedesktop.DBus.Properties.GetAll", 0, dbusapi.ManagerIface).Store(&mprops); err != nil {
		return nil, err
	}
	var objs map[dbus.ObjectPath]map[string]map[string]dbus.Variant
	if err := c.root().CallWithContext(ctx, "org.freedesktop.DBus.ObjectManager.GetManagedObjects", 0).Store(&objs); err != nil {
		return nil, err
	}
	out := map[dbus.ObjectPath]map[string]dbus.Variant{dbusapi.RootPath: mprops}
	for p, ifaces := range objs {
		for _, props := range ifaces {
			out[p] = props
		}
	}
	return out, nil
}
