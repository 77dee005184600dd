package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/spf13/cobra"

	"github.com/rdmad/rdmad/dbusapi"
	"github.com/rdmad/rdmad/dbusapi/client"
)

func init() { register("", monitorCommand) }

func monitorCommand(e *env) *cobra.Command {
	var count int
	c := &cobra.Command{
		Use:   "monitor [-n COUNT]",
		Short: "Print rdmad's signals as they come, one line each",
		Long: `Print what rdmad says on the bus as it happens, one line each, as busctl
monitor org.rdmad1 would, but readable: the time, the object (a port
mlx5_0/1, a device mlx5_0, or rdmad for the Manager) and what happened:
"corrected" (rdmad put back a setting another process changed: the value
found and the one restored), "contested" (another manager keeps changing a
setting and rdmad stopped correcting it for a while), "changed" (each
property that changed, from its value before to its value now, and each
setting of Settings whose value or state changed), "added" and "removed"
(devices and ports), "started" and "stopped" (rdmad on the bus). With -o
json (or -j) each line is a JSON object: "time", "signal", "object" (the
D-Bus path), "subject", and the signal's fields. It runs until interrupted,
or until COUNT lines are printed.`,
		Example: `  rdmactl monitor
  rdmactl -j monitor -n 1     # wait for the next signal`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if count < 0 {
				return usagef(cmd, "-n %d: want a count of lines, 0 for no end", count)
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return e.monitor(ctx, count)
		},
	}
	c.Flags().IntVarP(&count, "count", "n", 0, "exit after printing COUNT lines (0: run until interrupted)")
	return c
}

// monitor prints rdmad's signals until ctx ends, the connection closes,
// or count lines are printed.
func (e *env) monitor(ctx context.Context, count int) error {
	c, err := e.client()
	if err != nil {
		return err
	}
	defer c.Close()
	sigs, err := c.Watch()
	if err != nil {
		return err
	}
	m := &monitorView{e: e, props: map[dbus.ObjectPath]map[string]dbus.Variant{}}
	if err := m.baseline(ctx, c); err != nil {
		return err
	}
	printed := 0
	for {
		select {
		case <-ctx.Done():
			return nil
		case sig, ok := <-sigs:
			if !ok {
				return failf("the connection to the bus closed")
			}
			for _, l := range m.lines(sig) {
				fmt.Fprintln(e.stdout, l)
				if printed++; count > 0 && printed >= count {
					return nil
				}
			}
			if sig.Name == "org.freedesktop.DBus.NameOwnerChanged" && len(sig.Body) == 3 && sig.Body[2] != "" {
				// rdmad started again: what it publishes starts over.
				if err := m.baseline(ctx, c); err != nil {
					return err
				}
			}
		}
	}
}

// monitorView keeps the properties rdmad last published, so a change is
// printed with its value before.
type monitorView struct {
	e     *env
	props map[dbus.ObjectPath]map[string]dbus.Variant
}

// baseline reads every object's properties (none when rdmad is not
// running: it starts with its objects).
func (m *monitorView) baseline(ctx context.Context, c *client.Client) error {
	objs, err := c.Objects(ctx)
	if err != nil && !isGone(err) {
		return err
	}
	clear(m.props)
	for p, props := range objs {
		m.props[p] = props
	}
	return nil
}

// isGone reports whether err says rdmad is not on the bus.
func isGone(err error) bool {
	switch client.ErrorName(err) {
	case "org.freedesktop.DBus.Error.ServiceUnknown", "org.freedesktop.DBus.Error.NameHasNoOwner":
		return true
	}
	return false
}

// event is one line of monitor's output.
type event struct {
	Time    string `json:"time"`
	Signal  string `json:"signal"`
	Object  string `json:"object"`
	Subject string `json:"subject"`
	// SettingCorrected, SettingContested.
	Setting  string `json:"setting,omitempty"`
	Found    string `json:"found,omitempty"`
	Restored string `json:"restored,omitempty"`
	Count    uint32 `json:"count,omitempty"`
	// PropertiesChanged, InterfacesAdded, InterfacesRemoved.
	Interface string         `json:"interface,omitempty"`
	Changed   map[string]any `json:"changed,omitempty"`

	text string // what the text line says after the subject
}

// lines are what sig prints: one line, none for a signal that is not
// rdmad's.
func (m *monitorView) lines(sig *dbus.Signal) []string {
	ev, ok := m.event(sig)
	if !ok {
		return nil
	}
	if m.e.jsonMode() != "" {
		b, err := json.Marshal(ev)
		if err != nil {
			return nil
		}
		return []string{string(escapeJSON(b))}
	}
	return []string{fmt.Sprintf("%s  %s  %s", ev.Time, escapeText(ev.Subject), ev.text)}
}

func (m *monitorView) event(sig *dbus.Signal) (event, bool) {
	now := m.e.now().In(m.e.loc)
	ev := event{Time: now.Format("15:04:05.000"), Signal: sig.Name[strings.LastIndexByte(sig.Name, '.')+1:], Object: string(sig.Path)}
	if m.e.jsonMode() != "" {
		ev.Time = now.Format(time.RFC3339Nano)
	}
	obj := sig.Path
	b := sig.Body
	switch sig.Name {
	case dbusapi.ManagerIface + ".SettingCorrected":
		if dbus.Store(b, &obj, &ev.Setting, &ev.Found, &ev.Restored) != nil {
			return ev, false
		}
		ev.text = fmt.Sprintf("corrected  %s: found %s, restored %s", escapeText(ev.Setting), quoted(ev.Found), quoted(ev.Restored))
	case dbusapi.ManagerIface + ".SettingContested":
		if dbus.Store(b, &obj, &ev.Setting, &ev.Count) != nil {
			return ev, false
		}
		ev.text = fmt.Sprintf("contested  %s: corrected %d times within %s; rdmad stops correcting it for a while", escapeText(ev.Setting), ev.Count,
			durationWords(dbusapi.ContestWindow))
	case "org.freedesktop.DBus.Properties.PropertiesChanged":
		changed := map[string]dbus.Variant{}
		if dbus.Store(b[:min(len(b), 2)], &ev.Interface, &changed) != nil {
			return ev, false
		}
		ev.text = "changed  " + m.changes(obj, changed)
		ev.Changed = map[string]any{}
		for n, v := range changed {
			ev.Changed[n] = jsonValue(n, v)
		}
		if m.props[obj] == nil {
			m.props[obj] = map[string]dbus.Variant{}
		}
		for n, v := range changed {
			m.props[obj][n] = v
		}
	case "org.freedesktop.DBus.ObjectManager.InterfacesAdded":
		var ifaces map[string]map[string]dbus.Variant
		if dbus.Store(b, &obj, &ifaces) != nil {
			return ev, false
		}
		m.props[obj] = map[string]dbus.Variant{}
		for name, props := range ifaces {
			ev.Interface = name
			for n, v := range props {
				m.props[obj][n] = v
			}
		}
		ev.text = "added  " + kindOf(ev.Interface)
	case "org.freedesktop.DBus.ObjectManager.InterfacesRemoved":
		var ifaces []string
		if dbus.Store(b, &obj, &ifaces) != nil || len(ifaces) == 0 {
			return ev, false
		}
		delete(m.props, obj)
		ev.Interface = ifaces[0]
		ev.text = "removed  " + kindOf(ev.Interface)
	case "org.freedesktop.DBus.NameOwnerChanged":
		var name, old, owner string
		if dbus.Store(b, &name, &old, &owner) != nil || name != dbusapi.BusName {
			return ev, false
		}
		obj = dbusapi.RootPath
		ev.Signal, ev.text = "started", "started  (on the bus as "+escapeText(owner)+")"
		if owner == "" {
			ev.Signal, ev.text = "stopped", "stopped  (left the bus)"
			clear(m.props)
		}
	default:
		return ev, false
	}
	ev.Object, ev.Subject = string(obj), subjectOf(obj)
	return ev, true
}

// changes says what changed in one PropertiesChanged, property by
// property in name order, from the value before to the value now.
func (m *monitorView) changes(obj dbus.ObjectPath, changed map[string]dbus.Variant) string {
	names := make([]string, 0, len(changed))
	for n := range changed {
		names = append(names, n)
	}
	slices.Sort(names)
	var parts []string
	for _, n := range names {
		old, had := m.props[obj][n]
		if n == "Settings" {
			if s := settingChanges(old, changed[n]); s != "" {
				parts = append(parts, s)
			}
			continue
		}
		now := m.valueText(n, changed[n])
		if had {
			parts = append(parts, fmt.Sprintf("%s %s -> %s", escapeText(n), m.valueText(n, old), now))
		} else {
			parts = append(parts, escapeText(n)+" "+now)
		}
	}
	return strings.Join(parts, ", ")
}

// settingChanges names each setting whose value or state changed between
// two Settings properties: "roce_tos 106 (holds) -> 0 (differs)".
func settingChanges(old, now dbus.Variant) string {
	before := map[string]dbusapi.Setting{}
	var was, is []dbusapi.Setting
	if old.Signature().String() != "" {
		_ = dbus.Store([]any{old.Value()}, &was)
	}
	if err := dbus.Store([]any{now.Value()}, &is); err != nil {
		return "Settings " + escapeText(now.String())
	}
	for _, s := range was {
		before[s.Name] = s
	}
	var parts []string
	for _, s := range is {
		b, ok := before[s.Name]
		switch {
		case !ok:
			parts = append(parts, fmt.Sprintf("%s %s (%s)", escapeText(s.Name), quoted(s.Observed), escapeText(s.State)))
		case b.Observed != s.Observed || b.State != s.State:
			parts = append(parts, fmt.Sprintf("%s %s (%s) -> %s (%s)", escapeText(s.Name), quoted(b.Observed), escapeText(b.State), quoted(s.Observed), escapeText(s.State)))
		}
		delete(before, s.Name)
	}
	for _, s := range was {
		if _, gone := before[s.Name]; gone {
			parts = append(parts, escapeText(s.Name)+" gone")
		}
	}
	return strings.Join(parts, ", ")
}

// valueText is a property's value in a line: times as rdmactl shows them,
// strings quoted, lists and maps as JSON.
func (m *monitorView) valueText(name string, v dbus.Variant) string {
	switch x := v.Value().(type) {
	case string:
		return quoted(x)
	case uint64:
		if name == "LastReconcile" || name == "PolicySaved" {
			return m.e.timestamp(x)
		}
		return strconv.FormatUint(x, 10)
	case []byte:
		return prioJSON(x)
	case bool, int32, uint32:
		return fmt.Sprint(x)
	}
	b, err := json.Marshal(jsonValue(name, v))
	if err != nil {
		return escapeText(v.String())
	}
	return escapeText(string(b))
}

// jsonValue is a property's value as monitor's JSON gives it: Settings
// with their field names, priorities as numbers, the rest as decoded.
func jsonValue(name string, v dbus.Variant) any {
	if name == "Settings" {
		var s []dbusapi.Setting
		if dbus.Store([]any{v.Value()}, &s) == nil {
			return s
		}
	}
	if b, ok := v.Value().([]byte); ok {
		return dbusapi.Priorities(b)
	}
	return v.Value()
}

func prioJSON(p []byte) string {
	s := make([]string, len(p))
	for i, v := range p {
		s[i] = strconv.Itoa(int(v))
	}
	return "[" + strings.Join(s, ",") + "]"
}

// quoted is a value from rdmad quoted for a line (control characters and
// bytes that are not UTF-8 escaped).
func quoted(s string) string { return escapeText(strconv.Quote(s)) }

// kindOf names an interface of rdmad's objects for a line.
func kindOf(iface string) string {
	switch iface {
	case dbusapi.DeviceIface:
		return "device"
	case dbusapi.PortIface:
		return "port"
	}
	return escapeText(iface)
}

// subjectOf is an object path as rdmactl names its object: "mlx5_0/1",
// "mlx5_0", "rdmad" for the Manager; the path itself for anything else.
func subjectOf(p dbus.ObjectPath) string {
	if p == dbusapi.RootPath {
		return "rdmad"
	}
	rest, ok := strings.CutPrefix(string(p), dbusapi.DevicesPath+"/")
	if !ok {
		return string(p)
	}
	elem, port, hasPort := strings.Cut(rest, "/ports/")
	name, err := dbusapi.UnescapePathElement(elem)
	if err != nil {
		return string(p)
	}
	if hasPort {
		return name + "/" + port
	}
	return name
}

// durationWords is d in words, in its largest whole unit: "a minute",
// "10 seconds", "2 hours"; what is not a whole second as Go writes it.
func durationWords(d time.Duration) string {
	for _, u := range []struct {
		d          time.Duration
		one, units string
	}{{time.Hour, "an hour", "hours"}, {time.Minute, "a minute", "minutes"}, {time.Second, "a second", "seconds"}} {
		switch {
		case d == u.d:
			return u.one
		case d > 0 && d%u.d == 0:
			return fmt.Sprintf("%d %s", d/u.d, u.units)
		}
	}
	return d.String()
}
