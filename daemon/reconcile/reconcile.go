// Package reconcile is rdmad's one level-triggered reconciler: it compares the
// declared policy with what the host shows and runs idempotent actions. Events
// never carry state; they only say what to look at again (one device, or
// everything), and a pass always starts by reading the host afresh.
package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host"
)

// HostPart is a concern that applies to the host as a whole (modules,
// memlock, netns, soft links). It sees every present device.
type HostPart interface {
	Name() string
	Apply(ctx context.Context, pol *config.Policy, devs []host.Device) []Action
}

// DevicePart is a concern applied to one device at a time (RoCE, VPI). Its
// port-level failures carry Target "dev/port" so they land on the port.
type DevicePart interface {
	Name() string
	Apply(ctx context.Context, pol *config.Policy, dev *host.Device) []Action
}

// Reconciler runs passes one at a time and keeps the resulting State.
type Reconciler struct {
	host *host.Host
	log  *slog.Logger

	// Early parts run before devices are read: they may create devices
	// (soft RDMA links), which the same pass then configures.
	early []HostPart
	// HostParts run after devices are read and before device parts:
	// modules first, so configfs rdma_cm exists for the RoCE part.
	hostParts   []HostPart
	deviceParts []DevicePart

	mu     sync.Mutex                    // serialises passes
	policy atomic.Pointer[config.Policy] // read once at the start of each pass

	stateMu   sync.RWMutex
	state     State
	listeners []func(State)
}

// Options configures a Reconciler.
type Options struct {
	Host        *host.Host
	Log         *slog.Logger
	Early       []HostPart
	HostParts   []HostPart
	DeviceParts []DevicePart
}

// New returns a Reconciler with an empty policy.
func New(o Options) *Reconciler {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	r := &Reconciler{
		host:        o.Host,
		log:         o.Log,
		early:       o.Early,
		hostParts:   o.HostParts,
		deviceParts: o.DeviceParts,
	}
	r.policy.Store(&config.Policy{})
	return r
}

// SetPolicy replaces the policy used by the next pass. It never waits for a
// pass in progress (one stuck in modprobe must not block a reload).
func (r *Reconciler) SetPolicy(p *config.Policy) { r.policy.Store(p) }

// Policy returns the policy in force.
func (r *Reconciler) Policy() *config.Policy { return r.policy.Load() }

// OnChange registers fn to be called with the new State after every pass.
// fn runs on the reconciling goroutine and must not call back into passes.
func (r *Reconciler) OnChange(fn func(State)) {
	r.stateMu.Lock()
	r.listeners = append(r.listeners, fn)
	r.stateMu.Unlock()
}

// State returns a copy of the last published state.
func (r *Reconciler) State() State {
	r.stateMu.RLock()
	defer r.stateMu.RUnlock()
	return r.state.clone()
}

// Report is what one pass did.
type Report struct {
	Started  time.Time
	Finished time.Time
	Actions  []Action
}

// Failed reports whether any action failed.
func (rep Report) Failed() bool { return rep.FailedCount() > 0 }

// FailedCount counts failed actions.
func (rep Report) FailedCount() int { return rep.Count(Failed) }

// Count counts actions with status s.
func (rep Report) Count(s Status) int {
	n := 0
	for _, a := range rep.Actions {
		if a.Status == s {
			n++
		}
	}
	return n
}

// Summary is a one-line result for logs, STATUS= and D-Bus.
func (rep Report) Summary() string {
	if f := rep.FailedCount(); f > 0 {
		var first string
		for _, a := range rep.Actions {
			if a.Status == Failed {
				first = fmt.Sprintf("%s %s: %v", a.Target, a.What, a.Err)
				break
			}
		}
		return fmt.Sprintf("%d failed (first: %s)", f, first)
	}
	return "ok"
}

// All reconciles the whole host.
func (r *Reconciler) All(ctx context.Context) Report {
	return r.pass(ctx, nil)
}

// Devices reconciles the named devices (and the host-wide parts, which are
// cheap and depend on the device set). A named device that no longer exists
// is dropped from the state.
func (r *Reconciler) Devices(ctx context.Context, names ...string) Report {
	if len(names) == 0 {
		return r.All(ctx)
	}
	return r.pass(ctx, names)
}

func (r *Reconciler) pass(ctx context.Context, only []string) Report {
	r.mu.Lock()
	defer r.mu.Unlock()
	pol := r.policy.Load()
	rep := Report{Started: time.Now()}

	for _, p := range r.early {
		rep.Actions = append(rep.Actions, p.Apply(ctx, pol, nil)...)
	}

	devs, err := r.host.Devices()
	unreadable := map[string]string{}
	if err != nil {
		// Devices that did read are still configured. One that exists but
		// cannot be read keeps its object, with the error, rather than
		// disappearing from the bus as if unplugged.
		rep.Actions = append(rep.Actions, Action{Target: "host", What: "read devices", Status: Failed, Err: err})
		unreadable = r.unreadable(devs, err)
	}
	for _, p := range r.hostParts {
		acts := p.Apply(ctx, pol, devs)
		rep.Actions = append(rep.Actions, acts...)
		if anyChanged(acts) {
			// Loading modules can create configfs rdma_cm and new devices.
			if fresh, err := r.host.Devices(); err == nil {
				devs = fresh
			}
		}
	}

	selected := devs
	if only != nil {
		want := map[string]bool{}
		for _, n := range only {
			want[n] = true
		}
		selected = nil
		for _, d := range devs {
			if want[d.Name] {
				selected = append(selected, d)
			}
		}
	}
	deviceActions := map[string][]Action{}
	gone := map[string]bool{}
	for i := range selected {
		if ctx.Err() != nil {
			break
		}
		d := &selected[i]
		var acts []Action
		for _, p := range r.deviceParts {
			acts = append(acts, p.Apply(ctx, pol, d)...)
		}
		if anyChanged(acts) {
			if fresh, err := r.host.Device(d.Name); err == nil {
				*d = fresh
			} else if errors.Is(err, host.ErrNoDevice) {
				// Unplugged, or re-registering after a change (an mlx4
				// port type switch does that): not a failure; its add
				// event brings the next pass.
				gone[d.Name] = true
			}
		}
		deviceActions[d.Name] = acts
		rep.Actions = append(rep.Actions, acts...)
	}
	rep.Finished = time.Now()
	if len(gone) > 0 {
		devs, selected = without(devs, gone), without(selected, gone)
	}
	r.publish(pol, devs, selected, only != nil, deviceActions, unreadable, rep)
	r.logReport(rep)
	return rep
}

// unreadable names the devices that exist but did not read.
func (r *Reconciler) unreadable(read []host.Device, err error) map[string]string {
	out := map[string]string{}
	names, lerr := r.host.DeviceNames()
	if lerr != nil {
		return out
	}
	got := map[string]bool{}
	for _, d := range read {
		got[d.Name] = true
	}
	for _, n := range names {
		if !got[n] {
			out[n] = fmt.Sprintf("cannot read the device: %v", err)
		}
	}
	return out
}

func without(devs []host.Device, gone map[string]bool) []host.Device {
	var out []host.Device
	for _, d := range devs {
		if !gone[d.Name] {
			out = append(out, d)
		}
	}
	return out
}

func anyChanged(acts []Action) bool {
	for _, a := range acts {
		if a.Status == Changed {
			return true
		}
	}
	return false
}

// publish builds the new State. For a partial pass, devices not selected
// keep their last results but are refreshed from devs (so a vanished device
// disappears from the state either way).
func (r *Reconciler) publish(pol *config.Policy, all, selected []host.Device, partial bool, acts map[string][]Action, unreadable map[string]string, rep Report) {
	r.stateMu.Lock()
	prev := r.state
	fresh := map[string]host.Device{}
	for _, d := range all {
		fresh[d.Name] = d
	}
	for _, d := range selected {
		fresh[d.Name] = d // post-apply observation wins
	}
	next := State{LastReconcile: rep.Finished, Actions: rep.Actions}
	for _, a := range rep.Actions {
		if a.Target == "modules" && (a.Status == Changed || a.Status == Unchanged) && a.What == "load" {
			next.Modules = append(next.Modules, strings.Fields(a.To)...)
		}
	}
	if len(next.Modules) == 0 && partial {
		next.Modules = prev.Modules
	}
	for n := range unreadable {
		fresh[n] = host.Device{Name: n} // placeholder; replaced below
	}
	names := make([]string, 0, len(fresh))
	for n := range fresh {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		d := fresh[n]
		devActs, reconciled := acts[n]
		if !reconciled {
			if old := prev.Device(n); old != nil {
				next.Devices = append(next.Devices, refresh(*old, d, pol))
				continue
			}
		}
		next.Devices = append(next.Devices, buildDeviceState(d, pol, devActs))
	}
	for n, msg := range unreadable {
		ds := DeviceState{Device: host.Device{Name: n}}
		if old := prev.Device(n); old != nil {
			ds = *old
		}
		ds.Error = msg
		next.replace(n, ds)
	}
	next.LastResult = summarize(next, rep)
	r.state = next
	listeners := append([]func(State){}, r.listeners...)
	snapshot := next.clone()
	r.stateMu.Unlock()
	for _, fn := range listeners {
		fn(snapshot)
	}
}

// refresh keeps the errors of an unreconciled device but takes its new
// observed values.
func refresh(old DeviceState, d host.Device, pol *config.Policy) DeviceState {
	ds := buildDeviceState(d, pol, nil)
	ds.Error = old.Error
	for i := range ds.Ports {
		for _, op := range old.Ports {
			if op.Number == ds.Ports[i].Number {
				ds.Ports[i].Error = op.Error
			}
		}
	}
	return ds
}

// TargetOf returns the identity a selector matches for a device.
func TargetOf(d *host.Device) config.Target {
	return config.Target{Name: d.Name, NodeGUID: d.NodeGUID, PCI: d.PCIAddress, Driver: d.Driver, Netdevs: d.Netdevs}
}

func buildDeviceState(d host.Device, pol *config.Policy, acts []Action) DeviceState {
	ds := DeviceState{Device: d, Transports: d.Transports()}
	t := TargetOf(&d)
	var devErrs []string
	portErrs := map[int][]string{}
	for _, a := range acts {
		if a.Status != Failed {
			continue
		}
		msg := fmt.Sprintf("%s: %v", a.What, a.Err)
		if dev, port, ok := splitPortTarget(a.Target); ok && dev == d.Name {
			portErrs[port] = append(portErrs[port], msg)
		} else {
			devErrs = append(devErrs, msg)
		}
	}
	ds.Error = strings.Join(devErrs, "; ")
	for _, p := range d.Ports {
		ps := PortState{Port: p, Transport: d.PortTransport(&p)}
		if pol != nil {
			ps.Desired = pol.RoCEFor(t, p.Number)
			ps.VPIType, _ = pol.VPIFor(t, p.Number)
		}
		ps.Error = strings.Join(portErrs[p.Number], "; ")
		ds.Ports = append(ds.Ports, ps)
	}
	return ds
}

// PortTarget names a port in actions: "mlx5_0/1".
func PortTarget(dev string, port int) string { return dev + "/" + strconv.Itoa(port) }

func splitPortTarget(s string) (string, int, bool) {
	i := strings.LastIndexByte(s, '/')
	if i < 0 {
		return "", 0, false
	}
	n, err := strconv.Atoi(s[i+1:])
	if err != nil {
		return "", 0, false
	}
	return s[:i], n, true
}

func (r *Reconciler) logReport(rep Report) {
	for _, a := range rep.Actions {
		switch a.Status {
		case Changed:
			r.log.Info("applied", "target", a.Target, "what", a.What, "from", a.From, "to", a.To, "source", a.Source)
		case Failed:
			r.log.Error("failed", "target", a.Target, "what", a.What, "value", a.To, "source", a.Source, "err", a.Err)
		}
	}
	r.log.Debug("reconciled", "changed", rep.Count(Changed), "failed", rep.FailedCount(), "took", rep.Finished.Sub(rep.Started))
}

// replace puts ds in place of the device named n.
func (s *State) replace(n string, ds DeviceState) {
	for i := range s.Devices {
		if s.Devices[i].Name == n {
			s.Devices[i] = ds
			return
		}
	}
}

// summarize is LastResult: every failure still standing, not only this
// pass's, so a pass over one device never hides another device's error.
func summarize(st State, rep Report) string {
	var failures []string
	for _, a := range rep.Actions {
		if a.Status != Failed {
			continue
		}
		if _, _, isPort := splitPortTarget(a.Target); isPort || st.Device(a.Target) != nil {
			continue // counted from the device state below
		}
		failures = append(failures, fmt.Sprintf("%s %s: %v", a.Target, a.What, a.Err))
	}
	for _, d := range st.Devices {
		if d.Error != "" {
			failures = append(failures, d.Name+": "+d.Error)
		}
		for _, p := range d.Ports {
			if p.Error != "" {
				failures = append(failures, PortTarget(d.Name, p.Number)+" "+p.Error)
			}
		}
	}
	if len(failures) == 0 {
		return "ok"
	}
	return fmt.Sprintf("%d failed (first: %s)", len(failures), failures[0])
}

func (s State) clone() State {
	c := s
	c.Modules = append([]string(nil), s.Modules...)
	c.Actions = append([]Action(nil), s.Actions...)
	c.Devices = make([]DeviceState, len(s.Devices))
	for i, d := range s.Devices {
		dc := d
		dc.Ports = append([]PortState(nil), d.Ports...)
		dc.Device.Ports = append([]host.Port(nil), d.Device.Ports...)
		dc.Netdevs = append([]string(nil), d.Netdevs...)
		c.Devices[i] = dc
	}
	return c
}
