// Package cli is rdmactl: argument parsing, output tables and JSON, and
// exit codes (0 ok, 1 failure, 2 usage).
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/rdmad/rdmad/dbusapi"
	"github.com/rdmad/rdmad/dbusapi/client"
)

// Exit codes.
const (
	ExitOK      = 0
	ExitFailure = 1
	ExitUsage   = 2
)

const usage = `usage: rdmactl [--bus system|session|ADDRESS] [-o text|json] COMMAND

  status                                   devices, ports, last reconcile, problems
  device list                              RDMA devices
  device show DEV                          one device and its ports
  roce show [DEV[/PORT]]                   RoCE mode and TOS, current and declared
  roce set DEV[/PORT] [--mode v1|v2] [--tos N] [--persist]
  link list                                declared soft RDMA links
  link add NAME --type rxe|siw --netdev IF [--persist]
  link del NAME [--persist]
  netns set shared|exclusive [--persist]   RDMA network namespace mode
  reload                                   re-read the configuration and apply it
  reconcile                                apply the configuration again now
  doctor                                   check that RDMA is usable
`

type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{fmt.Sprintf(format, args...)} }

type env struct {
	stdout, stderr io.Writer
	bus            string
	json           bool
	interactive    bool
	connect        func(bus string) (*client.Client, error)
}

// Main runs rdmactl with args (without the program name).
func Main(args []string, stdout, stderr io.Writer) int {
	e := &env{stdout: stdout, stderr: stderr, bus: "system", connect: client.Connect}
	if fi, err := os.Stdin.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
		e.interactive = true // a polkit agent on this terminal may ask
	}
	rest, err := e.globals(args)
	if err == nil {
		err = e.dispatch(rest)
	}
	var ue *usageError
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, errHelp):
		fmt.Fprint(stdout, usage)
		return ExitOK
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "rdmactl: %s\n%s", ue.msg, usage)
		return ExitUsage
	}
	fmt.Fprintf(stderr, "rdmactl: %s\n", describeError(err))
	return ExitFailure
}

var errHelp = errors.New("help")

func describeError(err error) string {
	switch client.ErrorName(err) {
	case dbusapi.ErrAccessDenied:
		return "access denied: " + client.ErrorMessage(err)
	case dbusapi.ErrInvalidArgs:
		return client.ErrorMessage(err)
	case dbusapi.ErrConfig:
		return "configuration error, the last good configuration stays in force:\n" + client.ErrorMessage(err)
	case dbusapi.ErrFailed, dbusapi.ErrNextBoot:
		return client.ErrorMessage(err)
	case dbusapi.ErrBusy:
		return "rdmad is busy answering other report requests; try again in a moment (" + client.ErrorMessage(err) + ")"
	case "":
		return err.Error()
	}
	return client.ErrorName(err) + ": " + client.ErrorMessage(err)
}

// globals takes --bus and -o from anywhere in args.
func (e *env) globals(args []string) ([]string, error) {
	var rest []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, val, hasVal := strings.Cut(a, "=")
		switch name {
		case "-h", "--help":
			return nil, errHelp
		case "help":
			if len(rest) == 0 { // only as the command: "link add help ..." names a link
				return nil, errHelp
			}
			rest = append(rest, a)
		case "--bus", "-o", "--output":
			if !hasVal {
				if i+1 >= len(args) {
					return nil, usagef("%s needs a value", name)
				}
				i++
				val = args[i]
			}
			if name == "--bus" {
				if val == "" {
					return nil, usagef("--bus needs a value")
				}
				e.bus = val
				continue
			}
			switch val {
			case "json":
				e.json = true
			case "text":
				e.json = false
			default:
				return nil, usagef("-o %q: want text or json", val)
			}
		case "--no-ask-password":
			e.interactive = false
		default:
			rest = append(rest, a)
		}
	}
	return rest, nil
}

// opts splits command arguments into positionals and --flags; boolean
// flags are named in bools, the others take a value.
func opts(args []string, valued, bools []string) (pos []string, o map[string]string, err error) {
	o = map[string]string{}
	is := func(list []string, n string) bool {
		for _, x := range list {
			if x == n {
				return true
			}
		}
		return false
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "--") {
			pos = append(pos, a)
			continue
		}
		name, val, hasVal := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		switch {
		case is(bools, name):
			if hasVal {
				return nil, nil, usagef("--%s takes no value", name)
			}
			o[name] = "true"
		case is(valued, name):
			if !hasVal {
				if i+1 >= len(args) {
					return nil, nil, usagef("--%s needs a value", name)
				}
				i++
				val = args[i]
			}
			o[name] = val
		default:
			return nil, nil, usagef("unknown option %s", a)
		}
	}
	return pos, o, nil
}

func (e *env) dispatch(args []string) error {
	if len(args) == 0 {
		return usagef("no command")
	}
	cmd, sub := args[0], ""
	if len(args) > 1 {
		sub = args[1]
	}
	switch cmd {
	case "status":
		return e.withNoArgs(args[1:], e.status)
	case "reload":
		return e.withNoArgs(args[1:], e.reload)
	case "reconcile":
		return e.withNoArgs(args[1:], e.reconcile)
	case "netns":
		if sub == "set" {
			return e.netnsSet(args[2:])
		}
		return usagef("netns: want set")
	case "doctor":
		return e.withNoArgs(args[1:], e.doctor)
	case "device":
		switch sub {
		case "list":
			return e.withNoArgs(args[2:], e.deviceList)
		case "show":
			if len(args) != 3 {
				return usagef("device show takes one device name")
			}
			return e.deviceShow(args[2])
		}
		return usagef("device: want list or show")
	case "roce":
		switch sub {
		case "show":
			if len(args) > 3 {
				return usagef("roce show takes at most one DEV[/PORT]")
			}
			target := ""
			if len(args) == 3 {
				target = args[2]
			}
			return e.roceShow(target)
		case "set":
			return e.roceSet(args[2:])
		}
		return usagef("roce: want show or set")
	case "link":
		switch sub {
		case "list", "show":
			return e.withNoArgs(args[2:], e.linkList)
		case "add":
			return e.linkAdd(args[2:])
		case "del", "delete":
			return e.linkDel(args[2:])
		}
		return usagef("link: want list, add or del")
	}
	return usagef("unknown command %q", cmd)
}

func (e *env) withNoArgs(args []string, fn func() error) error {
	if len(args) > 0 {
		return usagef("unexpected argument %q", args[0])
	}
	return fn()
}

func (e *env) client() (*client.Client, error) {
	c, err := e.connect(e.bus)
	if err != nil {
		return nil, err
	}
	c.Interactive = e.interactive
	return c, nil
}

func ctx() (context.Context, context.CancelFunc) {
	// Long enough for an interactive polkit prompt and a reconcile.
	return context.WithTimeout(context.Background(), 5*time.Minute)
}

// call runs fn with a connected client and a bounded context.
func (e *env) call(fn func(c *client.Client, cx context.Context) error) error {
	c, err := e.client()
	if err != nil {
		return err
	}
	defer c.Close()
	cx, cancel := ctx()
	defer cancel()
	return fn(c, cx)
}

func (e *env) snapshot() (*client.Snapshot, error) {
	var s *client.Snapshot
	err := e.call(func(c *client.Client, cx context.Context) (err error) {
		s, err = c.Snapshot(cx)
		return err
	})
	return s, err
}

func (e *env) printJSON(v any) error {
	enc := json.NewEncoder(e.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// describe reads the Describe document: the raw JSON rdmad returned and
// its decoding.
func (e *env) describe() (string, *dbusapi.Description, error) {
	var raw string
	if err := e.call(func(c *client.Client, cx context.Context) (err error) {
		raw, err = c.Describe(cx)
		return err
	}); err != nil {
		return "", nil, err
	}
	var d dbusapi.Description
	if err := json.Unmarshal([]byte(raw), &d); err != nil {
		return "", nil, fmt.Errorf("rdmad's Describe document does not decode: %w", err)
	}
	return raw, &d, nil
}

// status prints the Describe document: as is with -o json (as hostnamectl
// --json prints hostnamed's), as text otherwise.
func (e *env) status() error {
	raw, d, err := e.describe()
	if err != nil {
		return err
	}
	if e.json {
		_, err := fmt.Fprintln(e.stdout, raw)
		return err
	}
	w := e.stdout
	last := "never"
	if d.LastReconcile != 0 {
		last = time.UnixMicro(int64(d.LastReconcile)).Format(time.RFC3339)
	}
	nports := 0
	for _, dev := range d.Devices {
		nports += len(dev.Ports)
	}
	fmt.Fprintf(w, "rdmad %s: %d devices, %d ports\n", d.Version, len(d.Devices), nports)
	fmt.Fprintf(w, "last reconcile: %s (%s)\n", last, d.LastResult)
	if d.ConfigError != "" {
		fmt.Fprintf(w, "config error (last good configuration in force):\n  %s\n", strings.ReplaceAll(d.ConfigError, "\n", "\n  "))
	}
	if len(d.ConfigFiles) > 0 {
		fmt.Fprintf(w, "config files: %s\n", strings.Join(d.ConfigFiles, " "))
	}
	if len(d.Devices) > 0 {
		fmt.Fprintln(w)
		e.portTable(d.Devices, "")
	}
	var failed []string
	for _, dev := range d.Devices {
		for _, p := range dev.Ports {
			if p.Error != "" {
				failed = append(failed, fmt.Sprintf("%s/%d: %s", dev.Name, p.Number, p.Error))
			}
		}
	}
	if len(failed) > 0 {
		fmt.Fprintf(w, "\nfailed ports:\n  %s\n", strings.Join(failed, "\n  "))
	}
	for _, dev := range d.Devices {
		if dev.Error != "" {
			fmt.Fprintf(w, "device %s: %s\n", dev.Name, dev.Error)
		}
	}
	for _, a := range d.Actions {
		if a.Status == "failed" && a.Subject.Kind != "device" && a.Subject.Kind != "port" {
			fmt.Fprintf(w, "%s %s: %s\n", a.Subject, a.Kind, a.Error)
		}
	}
	return nil
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// portTable prints one line per port, like `rdma link show`.
func (e *env) portTable(devs []dbusapi.Device, only string) {
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	for _, d := range devs {
		for _, p := range d.Ports {
			name := fmt.Sprintf("%s/%d", d.Name, p.Number)
			if only != "" && only != d.Name && only != name {
				continue
			}
			line := fmt.Sprintf("%s\tstate %s\tphysical_state %s\tnetdev %s", name, dash(p.State), dash(p.PhysState), dash(strings.Join(p.Netdevs, ",")))
			if p.Transport == "roce" {
				line += fmt.Sprintf("\troce_mode %q\ttos %s", p.RoCEMode, tosString(p.RoCETOS))
			} else {
				line += fmt.Sprintf("\tlink_layer %s\tsm_lid %s", dash(p.LinkLayer), dash(p.SMLID))
			}
			fmt.Fprintln(tw, line)
		}
	}
	tw.Flush()
}

func tosString(v int32) string {
	if v < 0 {
		return "-"
	}
	return strconv.Itoa(int(v))
}

func (e *env) deviceList() error {
	s, err := e.snapshot()
	if err != nil {
		return err
	}
	if e.json {
		return e.printJSON(nonNil(s.Devices))
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	for _, d := range s.Devices {
		fmt.Fprintf(tw, "%s\ttransport %s\tdriver %s\tnode_guid %s\tports %d\tnetdev %s\n", d.Name,
			dash(strings.Join(d.Transports, ",")), dash(d.Driver), dash(d.NodeGUID), len(d.Ports), dash(strings.Join(d.Netdevs, ",")))
	}
	return tw.Flush()
}

func (e *env) deviceShow(name string) error {
	s, err := e.snapshot()
	if err != nil {
		return err
	}
	d := s.Device(name)
	if d == nil {
		return fmt.Errorf("no RDMA device %q", name)
	}
	if e.json {
		return e.printJSON(d)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	kv := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, dash(v)) }
	kv("name", d.Name)
	kv("transport", strings.Join(d.Transports, ","))
	kv("node_type", d.NodeType)
	kv("node_guid", d.NodeGUID)
	kv("sys_image_guid", d.SysImageGUID)
	kv("fw_ver", d.FirmwareVersion)
	kv("hca_type", d.HCAType)
	kv("board_id", d.BoardID)
	kv("driver", d.Driver)
	kv("pci_address", d.PCIAddress)
	kv("parent", d.Parent)
	kv("netdevs", strings.Join(d.Netdevs, ","))
	kv("error", d.Error)
	tw.Flush()
	for _, p := range d.Ports {
		fmt.Fprintf(e.stdout, "\nport %d\n", p.Number)
		tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		kv := func(k, v string) { fmt.Fprintf(tw, "  %s\t%s\n", k, dash(v)) }
		kv("transport", p.Transport)
		kv("state", p.State)
		kv("physical_state", p.PhysState)
		kv("rate", p.Rate)
		kv("link_layer", p.LinkLayer)
		kv("lid", p.LID)
		kv("sm_lid", p.SMLID)
		kv("gid_types", strings.Join(p.GIDTypes, ","))
		kv("netdevs", strings.Join(p.Netdevs, ","))
		kv("roce_mode", p.RoCEMode)
		kv("roce_tos", tosString(p.RoCETOS))
		kv("desired_roce_mode", p.DesiredRoCEMode)
		kv("desired_roce_tos", tosString(p.DesiredRoCETOS))
		kv("desired_roce_source", p.DesiredRoCESource)
		kv("vpi_type", p.VPIType)
		kv("error", p.Error)
		tw.Flush()
	}
	return nil
}

// RoCEJSON is one line of `rdmactl -o json roce show`.
type RoCEJSON struct {
	Port        string `json:"port"`
	Mode        string `json:"mode"`
	TOS         int32  `json:"tos"`
	DesiredMode string `json:"desired_mode"`
	DesiredTOS  int32  `json:"desired_tos"`
	Source      string `json:"source"`
	Error       string `json:"error"`
}

func (e *env) roceShow(target string) error {
	s, err := e.snapshot()
	if err != nil {
		return err
	}
	dev, port, err := splitTarget(target)
	if err != nil {
		return err
	}
	if dev != "" && s.Device(dev) == nil {
		return fmt.Errorf("no RDMA device %q", dev)
	}
	rows := []RoCEJSON{}
	for _, d := range s.Devices {
		if dev != "" && d.Name != dev {
			continue
		}
		for _, p := range d.Ports {
			if (port != 0 && int(p.Number) != port) || p.Transport != "roce" {
				continue
			}
			rows = append(rows, RoCEJSON{Port: fmt.Sprintf("%s/%d", d.Name, p.Number), Mode: p.RoCEMode, TOS: p.RoCETOS,
				DesiredMode: p.DesiredRoCEMode, DesiredTOS: p.DesiredRoCETOS, Source: p.DesiredRoCESource, Error: p.Error})
		}
	}
	if e.json {
		return e.printJSON(rows)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	for _, r := range rows {
		line := fmt.Sprintf("%s\troce_mode %q\ttos %s\tdesired %s/%s", r.Port, r.Mode, tosString(r.TOS), dash(r.DesiredMode), tosString(r.DesiredTOS))
		if r.Source != "" {
			line += "\t(" + r.Source + ")"
		}
		if r.Error != "" {
			line += "\terror: " + r.Error
		}
		fmt.Fprintln(tw, line)
	}
	return tw.Flush()
}

// splitTarget parses DEV[/PORT]; port 0 means every port.
func splitTarget(t string) (string, int, error) {
	dev, ps, has := strings.Cut(t, "/")
	if !has {
		return dev, 0, nil
	}
	n, err := strconv.ParseUint(ps, 10, 32)
	if err != nil || n == 0 || n > dbusapi.MaxPort {
		return "", 0, usagef("%q: port must be a number from 1 to %d", t, dbusapi.MaxPort)
	}
	return dev, int(n), nil
}

func (e *env) roceSet(args []string) error {
	pos, o, err := opts(args, []string{"mode", "tos"}, []string{"persist"})
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("roce set takes one DEV[/PORT]")
	}
	dev, port, err := splitTarget(pos[0])
	if err != nil {
		return err
	}
	mode, hasMode := o["mode"]
	if hasMode && mode != "v1" && mode != "v2" {
		return usagef("--mode %q: want v1 or v2", mode)
	}
	tos := int64(-1)
	if v, ok := o["tos"]; ok {
		tos, err = strconv.ParseInt(v, 10, 32)
		if err != nil || tos < 0 || tos > 255 {
			return usagef("--tos %q: want a number 0..255", v)
		}
	}
	if !hasMode && tos < 0 {
		return usagef("roce set needs --mode, --tos or both")
	}
	return e.call(func(c *client.Client, cx context.Context) error {
		return c.SetRoCE(cx, dev, uint32(port), mode, int32(tos), o["persist"] == "true")
	})
}

func (e *env) linkList() error {
	s, err := e.snapshot()
	if err != nil {
		return err
	}
	if e.json {
		return e.printJSON(nonNil(s.Manager.Links))
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	for _, l := range s.Manager.Links {
		state := "absent"
		if d := s.Device(l.Name); d != nil {
			state = "present"
			for _, p := range d.Ports {
				state = p.State
			}
		}
		fmt.Fprintf(tw, "link %s\ttype %s\tnetdev %s\tstate %s\t(%s)\n", l.Name, l.Type, l.Netdev, state, l.Source)
	}
	return tw.Flush()
}

func (e *env) linkAdd(args []string) error {
	pos, o, err := opts(args, []string{"type", "netdev"}, []string{"persist"})
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("link add takes one NAME")
	}
	if o["type"] == "" || o["netdev"] == "" {
		return usagef("link add needs --type rxe|siw and --netdev IF")
	}
	return e.call(func(c *client.Client, cx context.Context) error {
		return c.AddLink(cx, pos[0], o["type"], o["netdev"], o["persist"] == "true")
	})
}

func (e *env) linkDel(args []string) error {
	pos, o, err := opts(args, nil, []string{"persist"})
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("link del takes one NAME")
	}
	return e.call(func(c *client.Client, cx context.Context) error {
		return c.DeleteLink(cx, pos[0], o["persist"] == "true")
	})
}

// reload exits 1 when the configuration loads but the pass that applies it
// fails: the operator asked for the files to take effect, and they did not.
func (e *env) reload() error {
	var summary string
	if err := e.call(func(c *client.Client, cx context.Context) (err error) {
		summary, err = c.Reload(cx)
		return err
	}); err != nil {
		return err
	}
	if e.json {
		if err := e.printJSON(map[string]string{"summary": summary}); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(e.stdout, "reloaded: %s\n", summary)
	}
	if summary != "ok" {
		return fmt.Errorf("reload: the configuration loaded, but applying it failed: %s", summary)
	}
	return nil
}

// reconcile runs a full pass and exits 1 when something failed.
func (e *env) reconcile() error {
	var r client.ReconcileResult
	if err := e.call(func(c *client.Client, cx context.Context) (err error) {
		r, err = c.Reconcile(cx)
		return err
	}); err != nil {
		return err
	}
	if e.json {
		if err := e.printJSON(r); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(e.stdout, "reconciled: %d changed, %d failed: %s\n", r.Changed, r.Failed, r.Summary)
	}
	if r.Failed > 0 {
		return fmt.Errorf("reconcile: %s", r.Summary)
	}
	return nil
}

func (e *env) netnsSet(args []string) error {
	pos, o, err := opts(args, nil, []string{"persist"})
	if err != nil {
		return err
	}
	if len(pos) != 1 || (pos[0] != "shared" && pos[0] != "exclusive") {
		return usagef("netns set takes shared or exclusive")
	}
	return e.call(func(c *client.Client, cx context.Context) error {
		return c.SetNetnsMode(cx, pos[0], o["persist"] == "true")
	})
}
