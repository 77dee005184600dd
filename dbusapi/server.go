package dbusapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/godbus/dbus/v5/introspect"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/netns"
	"github.com/rdmad/rdmad/daemon/reconcile"
	"github.com/rdmad/rdmad/daemon/service"
	"github.com/rdmad/rdmad/daemon/version"
)

const (
	propsIface      = "org.freedesktop.DBus.Properties"
	introIface      = "org.freedesktop.DBus.Introspectable"
	objMgrIface     = "org.freedesktop.DBus.ObjectManager"
	peerIface       = "org.freedesktop.DBus.Peer"
	errUnknownIface = "org.freedesktop.DBus.Error.UnknownInterface"
	errUnknownProp  = "org.freedesktop.DBus.Error.UnknownProperty"
	errReadOnly     = "org.freedesktop.DBus.Error.PropertyReadOnly"
)

// Polkit action ids, one per kind of change (units/org.rdmad1.policy).
const (
	ActionReconcile   = "org.rdmad1.reconcile"
	ActionReload      = "org.rdmad1.reload"
	ActionSetRoCE     = "org.rdmad1.set-roce"
	ActionManageLinks = "org.rdmad1.manage-links"
	ActionSetNetns    = "org.rdmad1.set-netns"
)

// Server exports the service on a bus connection.
type Server struct {
	conn *dbus.Conn
	svc  *service.Service
	auth Authorizer
	log  *slog.Logger

	mu      sync.Mutex
	objects map[dbus.ObjectPath]map[string]map[string]dbus.Variant // path -> iface -> props
	closed  bool
	synced  time.Time // LastReconcile of the newest state published
}

// NewServer exports the root object and every device and port of the
// current state on conn and follows the service from then on. It does not
// request the bus name: call RequestName when the objects are in place.
func NewServer(conn *dbus.Conn, svc *service.Service, auth Authorizer, log *slog.Logger) (*Server, error) {
	if log == nil {
		log = slog.Default()
	}
	s := &Server{conn: conn, svc: svc, auth: auth, log: log, objects: map[dbus.ObjectPath]map[string]map[string]dbus.Variant{}}
	m := &manager{s: s}
	if err := conn.ExportMethodTable(m.methods(), RootPath, ManagerIface); err != nil {
		return nil, fmt.Errorf("dbusapi: export manager: %w", err)
	}
	if err := conn.ExportMethodTable(map[string]any{"GetManagedObjects": s.getManagedObjects}, RootPath, objMgrIface); err != nil {
		return nil, fmt.Errorf("dbusapi: export object manager: %w", err)
	}
	s.resync()
	svc.Reconciler().OnChange(func(st reconcile.State) { s.sync(st) })
	// A config change (reload, runtime change) republishes the last state
	// with the new declarations. The state is read under s.mu: read
	// before it, a pass finishing in between would be overwritten by the
	// older state.
	svc.OnConfigChange(s.resync)
	return s, nil
}

// RequestName takes the well-known name; it fails when another process owns
// it (a second rdmad on the same bus).
func (s *Server) RequestName(name string) error {
	reply, err := s.conn.RequestName(name, dbus.NameFlagDoNotQueue)
	if err != nil {
		return fmt.Errorf("dbusapi: request name %s: %w", name, err)
	}
	if reply != dbus.RequestNameReplyPrimaryOwner && reply != dbus.RequestNameReplyAlreadyOwner {
		return fmt.Errorf("dbusapi: name %s is already owned on this bus (another rdmad?)", name)
	}
	return nil
}

// Close stops publishing; later state changes are ignored.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
}

// managerProps builds the Manager properties from the service.
func (s *Server) managerProps(st reconcile.State) Manager {
	pol := s.svc.PolicyInForce()
	m := Manager{Version: version.Version, LastResult: st.LastResult, Modules: st.Modules}
	if pol != nil {
		m.ConfigFiles = pol.Files
		m.NetnsMode = string(netns.InForce(pol.Netns))
		for _, l := range pol.Links {
			m.Links = append(m.Links, Link{Name: l.Name, Type: string(l.Type), Netdev: l.Netdev, Source: l.Source.String()})
		}
	}
	if err := s.svc.ConfigError(); err != nil {
		m.ConfigError = err.Error()
	}
	if !st.LastReconcile.IsZero() {
		m.LastReconcile = uint64(st.LastReconcile.UnixMicro())
	}
	for _, d := range st.Devices {
		m.Devices = append(m.Devices, DevicePath(d.Name))
	}
	return m
}

// DeviceModel converts a reconciled device to the published model.
func DeviceModel(d reconcile.DeviceState) Device {
	dev := Device{
		Name: d.Name, NodeType: d.NodeType, NodeGUID: d.NodeGUID, SysImageGUID: d.SysImageGUID,
		FirmwareVersion: d.FWVersion, HCAType: d.HCAType, BoardID: d.BoardID, Driver: d.Driver,
		PCIAddress: d.PCIAddress, Parent: d.Parent, Netdevs: d.Netdevs, RoCEConfigfs: d.RoCEConfig, Error: d.Error,
	}
	for _, t := range d.Transports {
		dev.Transports = append(dev.Transports, string(t))
	}
	for _, p := range d.Ports {
		dev.PortPaths = append(dev.PortPaths, PortPath(d.Name, p.Number))
		dev.Ports = append(dev.Ports, PortModel(d.Name, p))
	}
	return dev
}

// PortModel converts a reconciled port to the published model.
func PortModel(dev string, p reconcile.PortState) Port {
	pm := Port{
		Device: dev, Number: uint32(p.Number), Transport: string(p.Transport), State: p.State,
		PhysState: p.PhysState, Rate: p.Rate, LinkLayer: p.LinkLayer, LID: p.LID, SMLID: p.SMLID,
		GIDTypes: p.GIDTypes, Netdevs: p.Netdevs, RoCEMode: p.RoCEMode, RoCETOS: int32(p.RoCETOS),
		DesiredRoCEMode: string(p.Desired.Mode), DesiredRoCETOS: -1, VPIType: string(p.VPIType), Error: p.Error,
	}
	var src []string
	if p.Desired.Mode != "" {
		src = append(src, p.Desired.ModeSource.String())
	}
	if p.Desired.TOS != nil {
		pm.DesiredRoCETOS = int32(*p.Desired.TOS)
		if s := p.Desired.TOSSource.String(); len(src) == 0 || src[0] != s {
			src = append(src, s)
		}
	}
	pm.DesiredRoCESource = strings.Join(src, ", ")
	return pm
}

// sync publishes st: new objects with InterfacesAdded (parents first), gone
// ones with InterfacesRemoved (children first), and one PropertiesChanged
// per object and interface for what differs.
//
// A state older than the last one published (by LastReconcile) is ignored,
// so snapshots delivered out of order never bring back old values or removed
// devices.
func (s *Server) sync(st reconcile.State) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.syncLocked(st)
}

// resync publishes the reconciler's current state, read under s.mu.
func (s *Server) resync() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.syncLocked(s.svc.Reconciler().State())
}

func (s *Server) syncLocked(st reconcile.State) {
	if s.closed || st.LastReconcile.Before(s.synced) {
		return
	}
	s.synced = st.LastReconcile
	want := map[dbus.ObjectPath]map[string]map[string]dbus.Variant{
		RootPath: {ManagerIface: ToProps(s.managerProps(st))},
	}
	for _, d := range st.Devices {
		want[DevicePath(d.Name)] = map[string]map[string]dbus.Variant{DeviceIface: ToProps(DeviceModel(d))}
		for _, p := range d.Ports {
			want[PortPath(d.Name, p.Number)] = map[string]map[string]dbus.Variant{PortIface: ToProps(PortModel(d.Name, p))}
		}
	}
	var gone, added, kept []dbus.ObjectPath
	for p := range s.objects {
		if _, ok := want[p]; !ok {
			gone = append(gone, p)
		}
	}
	for p := range want {
		if _, ok := s.objects[p]; ok {
			kept = append(kept, p)
		} else {
			added = append(added, p)
		}
	}
	sort.Slice(gone, func(i, j int) bool { return gone[i] > gone[j] })
	sort.Slice(added, func(i, j int) bool { return added[i] < added[j] })
	sort.Slice(kept, func(i, j int) bool { return kept[i] < kept[j] })

	for _, p := range gone {
		ifaces := sortedKeys(s.objects[p])
		s.unexport(p, ifaces)
		delete(s.objects, p)
		s.emit(RootPath, objMgrIface+".InterfacesRemoved", p, ifaces)
	}
	for _, p := range added {
		s.objects[p] = want[p]
		if err := s.export(p); err != nil {
			s.log.Error("cannot export object", "path", p, "err", err)
			continue
		}
		if p != RootPath {
			s.emit(RootPath, objMgrIface+".InterfacesAdded", p, want[p])
		}
	}
	for _, p := range kept {
		old := s.objects[p]
		for _, iface := range sortedKeys(want[p]) {
			changed := map[string]dbus.Variant{}
			for name, v := range want[p][iface] {
				if ov, ok := old[iface][name]; !ok || !reflect.DeepEqual(ov.Value(), v.Value()) {
					changed[name] = v
				}
			}
			if len(changed) > 0 {
				s.emit(p, propsIface+".PropertiesChanged", iface, changed, []string{})
			}
		}
		s.objects[p] = want[p]
	}
}

func (s *Server) emit(path dbus.ObjectPath, name string, args ...any) {
	if err := s.conn.Emit(path, name, args...); err != nil {
		s.log.Warn("cannot emit signal", "path", path, "signal", name, "err", err)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// export registers the Properties and Introspectable handlers of a path.
func (s *Server) export(p dbus.ObjectPath) error {
	props := map[string]any{
		"Get": func(iface, name string) (dbus.Variant, *dbus.Error) { return s.get(p, iface, name) },
		"GetAll": func(iface string) (map[string]dbus.Variant, *dbus.Error) {
			return s.getAll(p, iface)
		},
		"Set": func(iface, name string, _ dbus.Variant) *dbus.Error {
			if _, err := s.get(p, iface, name); err != nil {
				return err
			}
			return dbus.NewError(errReadOnly, []any{fmt.Sprintf("property %s.%s is read-only", iface, name)})
		},
	}
	if err := s.conn.ExportMethodTable(props, p, propsIface); err != nil {
		return err
	}
	intro := map[string]any{
		"Introspect": func() (string, *dbus.Error) { return s.introspect(p), nil },
	}
	return s.conn.ExportMethodTable(intro, p, introIface)
}

func (s *Server) unexport(p dbus.ObjectPath, _ []string) {
	_ = s.conn.ExportMethodTable(nil, p, propsIface)
	_ = s.conn.ExportMethodTable(nil, p, introIface)
}

func (s *Server) get(p dbus.ObjectPath, iface, name string) (dbus.Variant, *dbus.Error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	props, ok := s.objects[p][iface]
	if !ok {
		return dbus.Variant{}, dbus.NewError(errUnknownIface, []any{fmt.Sprintf("%s has no interface %s", p, iface)})
	}
	v, ok := props[name]
	if !ok {
		return dbus.Variant{}, dbus.NewError(errUnknownProp, []any{fmt.Sprintf("%s has no property %s", iface, name)})
	}
	return v, nil
}

func (s *Server) getAll(p dbus.ObjectPath, iface string) (map[string]dbus.Variant, *dbus.Error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]dbus.Variant{}
	obj := s.objects[p]
	if iface == "" { // the spec allows an empty name: every interface
		for _, props := range obj {
			for k, v := range props {
				out[k] = v
			}
		}
		return out, nil
	}
	props, ok := obj[iface]
	if !ok {
		if iface == objMgrIface || iface == introIface || iface == propsIface || iface == peerIface {
			return out, nil // standard interfaces without properties
		}
		return nil, dbus.NewError(errUnknownIface, []any{fmt.Sprintf("%s has no interface %s", p, iface)})
	}
	for k, v := range props {
		out[k] = v
	}
	return out, nil
}

func (s *Server) getManagedObjects() (map[dbus.ObjectPath]map[string]map[string]dbus.Variant, *dbus.Error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[dbus.ObjectPath]map[string]map[string]dbus.Variant{}
	for p, ifaces := range s.objects {
		if p == RootPath {
			continue // ObjectManager reports the objects below it
		}
		out[p] = ifaces
	}
	return out, nil
}

// introspect describes what is actually served at p: the methods of the
// manager's method table (by reflection) and the properties held now, with
// argument names taken from the contract. The contract test compares this
// with org.rdmad1.xml.
func (s *Server) introspect(p dbus.ObjectPath) string {
	s.mu.Lock()
	ifaces := s.objects[p]
	var children []string
	prefix := string(p) + "/"
	seen := map[string]bool{}
	for o := range s.objects {
		if rest, ok := strings.CutPrefix(string(o), prefix); ok {
			c, _, _ := strings.Cut(rest, "/")
			if !seen[c] {
				seen[c] = true
				children = append(children, c)
			}
		}
	}
	// Intermediate nodes (/org/rdmad1/devices/X/ports) have no object of
	// their own but must be walkable by busctl tree.
	if len(ifaces) == 0 {
		s.mu.Unlock()
		return nodeXML(nil, children)
	}
	node := []introspect.Interface{introspect.IntrospectData, propertiesData, peerData}
	for _, name := range sortedKeys(ifaces) {
		iface := introspect.Interface{Name: name}
		for _, pn := range sortedKeys(ifaces[name]) {
			iface.Properties = append(iface.Properties, introspect.Property{
				Name: pn, Type: ifaces[name][pn].Signature().String(), Access: "read",
				Annotations: []introspect.Annotation{{Name: "org.freedesktop.DBus.Property.EmitsChangedSignal", Value: "true"}},
			})
		}
		if name == ManagerIface {
			iface.Methods = servedMethods(ManagerIface, (&manager{}).methods())
		}
		node = append(node, iface)
	}
	s.mu.Unlock()
	if p == RootPath {
		node = append(node, objectManagerData)
	}
	sort.Strings(children)
	return nodeXML(node, children)
}

func nodeXML(ifaces []introspect.Interface, children []string) string {
	n := introspect.Node{Interfaces: ifaces}
	for _, c := range children {
		n.Children = append(n.Children, introspect.Node{Name: c})
	}
	b, err := xmlMarshal(n)
	if err != nil {
		return "<node/>"
	}
	return b
}

var (
	senderType  = reflect.TypeOf(dbus.Sender(""))
	messageType = reflect.TypeOf(dbus.Message{})
	errType     = reflect.TypeOf((*dbus.Error)(nil))
)

// servedMethods derives introspection data from a method table; argument
// names come from the contract when its method has the same shape.
func servedMethods(ifaceName string, table map[string]any) []introspect.Method {
	var out []introspect.Method
	ci := contract.Interface(ifaceName)
	for _, name := range sortedKeys(table) {
		ft := reflect.TypeOf(table[name])
		var args []introspect.Arg
		for i := 0; i < ft.NumIn(); i++ {
			if t := ft.In(i); t != senderType && t != messageType {
				args = append(args, introspect.Arg{Type: dbus.SignatureOfType(t).String(), Direction: "in"})
			}
		}
		for i := 0; i < ft.NumOut(); i++ {
			if t := ft.Out(i); t != errType {
				args = append(args, introspect.Arg{Type: dbus.SignatureOfType(t).String(), Direction: "out"})
			}
		}
		var cm *Member
		if ci != nil {
			cm = ci.Member("method", name)
		}
		for i := range args {
			args[i].Name = fmt.Sprintf("arg%d", i)
			if cm != nil && len(cm.Args) == len(args) {
				args[i].Name = cm.Args[i].Name
			}
		}
		out = append(out, introspect.Method{Name: name, Args: args})
	}
	return out
}

var propertiesData = introspect.Interface{
	Name: propsIface,
	Methods: []introspect.Method{
		{Name: "Get", Args: []introspect.Arg{{Name: "interface_name", Type: "s", Direction: "in"}, {Name: "property_name", Type: "s", Direction: "in"}, {Name: "value", Type: "v", Direction: "out"}}},
		{Name: "GetAll", Args: []introspect.Arg{{Name: "interface_name", Type: "s", Direction: "in"}, {Name: "props", Type: "a{sv}", Direction: "out"}}},
		{Name: "Set", Args: []introspect.Arg{{Name: "interface_name", Type: "s", Direction: "in"}, {Name: "property_name", Type: "s", Direction: "in"}, {Name: "value", Type: "v", Direction: "in"}}},
	},
	Signals: []introspect.Signal{{Name: "PropertiesChanged", Args: []introspect.Arg{{Name: "interface_name", Type: "s"}, {Name: "changed_properties", Type: "a{sv}"}, {Name: "invalidated_properties", Type: "as"}}}},
}

var peerData = introspect.Interface{
	Name: peerIface,
	Methods: []introspect.Method{
		{Name: "Ping"},
		{Name: "GetMachineId", Args: []introspect.Arg{{Name: "machine_uuid", Type: "s", Direction: "out"}}},
	},
}

var objectManagerData = introspect.Interface{
	Name:    objMgrIface,
	Methods: []introspect.Method{{Name: "GetManagedObjects", Args: []introspect.Arg{{Name: "objects", Type: "a{oa{sa{sv}}}", Direction: "out"}}}},
	Signals: []introspect.Signal{
		{Name: "InterfacesAdded", Args: []introspect.Arg{{Name: "object_path", Type: "o"}, {Name: "interfaces_and_properties", Type: "a{sa{sv}}"}}},
		{Name: "InterfacesRemoved", Args: []introspect.Arg{{Name: "object_path", Type: "o"}, {Name: "interfaces", Type: "as"}}},
	},
}

// manager implements the org.rdmad1.Manager methods.
type manager struct{ s *Server }

func (m *manager) methods() map[string]any {
	return map[string]any{
		"Reconcile":    m.Reconcile,
		"Reload":       m.Reload,
		"SetRoCE":      m.SetRoCE,
		"AddLink":      m.AddLink,
		"DeleteLink":   m.DeleteLink,
		"SetNetnsMode": m.SetNetnsMode,
		"Describe":     m.Describe,
	}
}

// authorize checks the caller of msg for action.
func (m *manager) authorize(msg dbus.Message, action string) *dbus.Error {
	sender, _ := msg.Headers[dbus.FieldSender].Value().(string)
	interactive := msg.Flags&dbus.FlagAllowInteractiveAuthorization != 0
	if err := m.s.auth.Authorize(context.Background(), sender, action, interactive); err != nil {
		m.s.log.Info("call refused", "sender", sender, "action", action, "err", err)
		return dbus.NewError(ErrAccessDenied, []any{err.Error()})
	}
	return nil
}

// busError maps service errors to D-Bus errors.
func busError(err error) *dbus.Error {
	if err == nil {
		return nil
	}
	var arg *service.ArgError
	var cfg *service.ConfigError
	switch {
	case errors.As(err, &arg):
		return dbus.NewError(ErrInvalidArgs, []any{err.Error()})
	case errors.As(err, &cfg):
		return dbus.NewError(ErrConfig, []any{cfg.Error()})
	}
	return dbus.NewError(ErrFailed, []any{err.Error()})
}

func (m *manager) Reconcile(msg dbus.Message) (uint32, uint32, string, *dbus.Error) {
	if e := m.authorize(msg, ActionReconcile); e != nil {
		return 0, 0, "", e
	}
	rep := m.s.svc.ReconcileNow(context.Background())
	return uint32(rep.Count(reconcile.Changed)), uint32(rep.FailedCount()), rep.Summary(), nil
}

func (m *manager) Reload(msg dbus.Message) (string, *dbus.Error) {
	if e := m.authorize(msg, ActionReload); e != nil {
		return "", e
	}
	rep, err := m.s.svc.ReloadNow(context.Background())
	if err != nil {
		return "", busError(err)
	}
	return rep.Summary(), nil
}

func (m *manager) SetRoCE(msg dbus.Message, device string, port uint32, mode string, tos int32, persist bool) *dbus.Error {
	if e := m.authorize(msg, ActionSetRoCE); e != nil {
		return e
	}
	if port > 1<<16 {
		return busError(&service.ArgError{Arg: "port", Msg: fmt.Sprintf("%d is not a port number", port)})
	}
	return busError(m.s.svc.SetRoCE(context.Background(), service.RoCEChange{
		Device: device, Port: int(port), Mode: config.RoCEMode(mode), TOS: int(tos), Persist: persist,
	}))
}

func (m *manager) AddLink(msg dbus.Message, name, typ, netdev string, persist bool) *dbus.Error {
	if e := m.authorize(msg, ActionManageLinks); e != nil {
		return e
	}
	return busError(m.s.svc.AddLink(context.Background(), config.Link{Name: name, Type: config.LinkType(typ), Netdev: netdev}, persist))
}

func (m *manager) DeleteLink(msg dbus.Message, name string, persist bool) *dbus.Error {
	if e := m.authorize(msg, ActionManageLinks); e != nil {
		return e
	}
	return busError(m.s.svc.DeleteLink(context.Background(), name, persist))
}

func (m *manager) SetNetnsMode(msg dbus.Message, mode string, persist bool) *dbus.Error {
	if e := m.authorize(msg, ActionSetNetns); e != nil {
		return e
	}
	return busError(m.s.svc.SetNetnsMode(context.Background(), config.NetnsMode(mode), persist))
}

// Description is the Describe document and the JSON of `rdmactl status`.
type Description struct {
	Manager
	Devices []Device      `json:"devices"`
	Runtime *RuntimeState `json:"runtime,omitempty"`
	Actions []ActionJSON  `json:"actions,omitempty"`
}

// RuntimeState is the runtime overlay in Describe.
type RuntimeState struct {
	RoCE         []RuntimeRoCE `json:"roce"`
	Links        []Link        `json:"links"`
	DeletedLinks []string      `json:"deleted_links"`
	NetnsMode    string        `json:"netns_mode"`
}

// RuntimeRoCE is one runtime RoCE setting.
type RuntimeRoCE struct {
	Device string `json:"device"`
	Port   int    `json:"port"`
	Mode   string `json:"mode"`
	TOS    int    `json:"tos"`
}

// ActionJSON is one action of the last pass.
type ActionJSON struct {
	Target string `json:"target"`
	What   string `json:"what"`
	From   string `json:"from"`
	To     string `json:"to"`
	Status string `json:"status"`
	Error  string `json:"error,omitempty"`
	Source string `json:"source,omitempty"`
}

func (m *manager) Describe() (string, *dbus.Error) {
	st := m.s.svc.Reconciler().State()
	d := Description{Manager: m.s.managerProps(st), Devices: []Device{}}
	for _, ds := range st.Devices {
		d.Devices = append(d.Devices, DeviceModel(ds))
	}
	ov := m.s.svc.RuntimeOverlay()
	rt := &RuntimeState{NetnsMode: string(ov.Netns), RoCE: []RuntimeRoCE{}, Links: []Link{}, DeletedLinks: append([]string{}, ov.DeletedLinks...)}
	for _, r := range ov.RoCE {
		tos := -1
		if r.TOS != nil {
			tos = *r.TOS
		}
		rt.RoCE = append(rt.RoCE, RuntimeRoCE{Device: strings.ReplaceAll(r.Device, `\`, ""), Port: r.Port, Mode: string(r.Mode), TOS: tos})
	}
	for _, l := range ov.Links {
		rt.Links = append(rt.Links, Link{Name: l.Name, Type: string(l.Type), Netdev: l.Netdev, Source: service.RuntimeSource})
	}
	d.Runtime = rt
	for _, a := range st.Actions {
		aj := ActionJSON{Target: a.Target, What: a.What, From: a.From, To: a.To, Status: a.Status.String(), Source: a.Source}
		if a.Err != nil {
			aj.Error = a.Err.Error()
		}
		d.Actions = append(d.Actions, aj)
	}
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return "", dbus.NewError(ErrFailed, []any{err.Error()})
	}
	return string(b), nil
}
