// Package reconcile is rdmad's one level-triggered reconciler: it compares
// the declared policy with what the host shows and runs idempotent actions.
// Events never carry state; they only say what to look at again. The
// observed state is kept per device, so a pass re-reads only what its
// scope names: the cost of one event does not grow with the host.
package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host"
)

// Pass is what a host part sees of one pass.
type Pass struct {
	Policy *config.Policy
	// Devices is every device known after this pass's reads, sorted by
	// name; parts read them and must not change them. Early parts see the
	// devices known before the pass.
	Devices []*host.Device
	// Forced is set on passes asked for explicitly (start, reload,
	// Reconcile): parts retry what they gave up on.
	Forced bool
}

// Result is what a host part did and the facts it established.
type Result struct {
	Actions []Action
	// Modules lists the listed kernel modules now present (the modules
	// part); nil from every other part.
	Modules []string
	// Created names the RDMA devices the part created (the links part);
	// the same pass reads and configures them.
	Created []string
}

// Part is what every part provides besides Apply: the kinds of the actions
// it reports, and how to undo one of its own changes.
type Part interface {
	// Kinds lists the kinds of the actions the part reports; no two parts
	// of a Reconciler report the same kind.
	Kinds() []Kind
	// Undo puts back what one of the part's Changed actions changed (a.Old
	// in place of a.New). An action that cannot be undone returns an error
	// wrapping ErrNotUndoable that says why.
	Undo(ctx context.Context, a Action) error
}

// ErrNotUndoable is wrapped by Undo for an action that cannot be undone.
var ErrNotUndoable = errors.New("cannot be undone")

// HostPart is a concern that applies to the host as a whole (modules,
// memlock, netns, soft links).
type HostPart interface {
	Part
	Apply(ctx context.Context, p *Pass) Result
}

// DevicePart is a concern applied to one device at a time (RoCE, VPI). It
// may run for several devices at once. It reports port-level results with
// PortSubject, and after a verified change it updates dev's observed
// values, so the device is never read twice in a pass.
type DevicePart interface {
	Part
	Apply(ctx context.Context, pol *config.Policy, dev *host.Device) []Action
}

// Preloader is a part that can prepare, before any device needs it, what
// the policy will need (a kernel module): the service calls it in the
// background at start and after a policy change, never within a pass.
// loaded says whether it had anything to do.
type Preloader interface {
	Preload(ctx context.Context, pol *config.Policy) (loaded bool, err error)
}

// Reregisterer is a device part whose changes can make the kernel
// unregister and register the device again (an mlx4 port type switch):
// after such a change the reconciler looks whether the device is still
// there rather than publish a device about to vanish.
type Reregisterer interface {
	Reregisters(a Action) bool
}

// Scope says what a pass reads again.
type Scope struct {
	// Full lists and reads every device again: at start, after lost
	// events, on a policy change and on an explicit Reconcile.
	Full bool
	// Devices are read again by name. A nil port list reads the whole
	// device; a list reads only those ports of a device already known.
	Devices map[string][]int
	// Forced marks a pass asked for explicitly (see Pass.Forced).
	Forced bool
}

// Change tells listeners what a pass changed in the State.
type Change struct {
	Full    bool     // every device was looked at
	Updated []string // devices added or updated, sorted
	Removed []string // devices gone, sorted
}

// Report is what one pass did.
type Report struct {
	Started  time.Time
	Finished time.Time
	Scope    Scope
	Actions  []Action
	Read     int // devices read
}

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

// Failed reports whether any action failed.
func (rep Report) Failed() bool { return rep.Count(Failed) > 0 }

// Failures returns the failed actions.
func (rep Report) Failures() []Action {
	var out []Action
	for _, a := range rep.Actions {
		if a.Status == Failed {
			out = append(out, a)
		}
	}
	return out
}

// Find returns the action of kind on subject, if the pass has one.
func (rep Report) Find(s Subject, k Kind) (Action, bool) {
	for _, a := range rep.Actions {
		if a.Subject == s && a.Kind == k {
			return a, true
		}
	}
	return Action{}, false
}

// Options configures a Reconciler.
type Options struct {
	Host *host.Host
	Log  *slog.Logger
	// Early parts run before devices are read: they may create devices
	// (soft RDMA links), which the same pass then configures.
	Early []HostPart
	// HostParts run after devices are read and before device parts.
	HostParts   []HostPart
	DeviceParts []DevicePart
	// Detail is how much of each device is read: host.DetailFull when
	// the state is published; otherwise each pass reads what its policy's
	// selectors need (a one-shot run).
	Detail host.Detail
	// Workers bounds the devices read and configured at once (0: a
	// default from the number of CPUs).
	Workers int
}

// Reconciler runs passes one at a time and keeps the observed state.
type Reconciler struct {
	host        *host.Host
	log         *slog.Logger
	early       []HostPart
	hostParts   []HostPart
	deviceParts []DevicePart
	detail      host.Detail
	workers     int
	owners      map[Kind]Part // the part that reports each kind

	mu sync.Mutex // serialises passes and port-state refreshes

	stateMu   sync.RWMutex
	devices   map[string]*DeviceState
	names     []string        // sorted keys of devices; replaced, never changed in place
	failing   map[string]bool // devices whose state holds a failure
	modules   []string
	hostActs  []Action
	last      time.Time
	listeners []func(Change)
}

// New returns a Reconciler that knows no device yet.
func New(o Options) *Reconciler {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Workers <= 0 {
		o.Workers = min(16, max(2, 2*runtime.GOMAXPROCS(0)))
	}
	owners := map[Kind]Part{}
	var parts []Part
	for _, p := range o.Early {
		parts = append(parts, p)
	}
	for _, p := range o.HostParts {
		parts = append(parts, p)
	}
	for _, p := range o.DeviceParts {
		parts = append(parts, p)
	}
	for _, p := range parts {
		for _, k := range p.Kinds() {
			if other, dup := owners[k]; dup && other != p {
				panic(fmt.Sprintf("reconcile: two parts (%T, %T) report kind %q", other, p, k))
			}
			owners[k] = p
		}
	}
	return &Reconciler{
		host: o.Host, log: o.Log,
		early: o.Early, hostParts: o.HostParts, deviceParts: o.DeviceParts,
		detail: o.Detail, workers: o.Workers, owners: owners,
		devices: map[string]*DeviceState{}, failing: map[string]bool{},
	}
}

// Preloaders are the parts that implement Preloader.
func (r *Reconciler) Preloaders() []Preloader {
	var out []Preloader
	for _, p := range r.early {
		if pl, ok := p.(Preloader); ok {
			out = append(out, pl)
		}
	}
	for _, p := range r.hostParts {
		if pl, ok := p.(Preloader); ok {
			out = append(out, pl)
		}
	}
	for _, p := range r.deviceParts {
		if pl, ok := p.(Preloader); ok {
			out = append(out, pl)
		}
	}
	return out
}

// Undo asks the part that reported a to put back what a changed. Only a
// Changed action can be undone; it runs between passes, never during one.
// The observed state is not updated: the caller runs a pass afterwards
// (the service's rollback does), which reads what the undo left.
func (r *Reconciler) Undo(ctx context.Context, a Action) error {
	if a.Status != Changed {
		return fmt.Errorf("reconcile: undo %s %s: only a changed action can be undone, this one is %s", a.Subject, a.Kind, a.Status)
	}
	p, ok := r.owners[a.Kind]
	if !ok {
		return fmt.Errorf("reconcile: undo %s %s: no part reports this kind", a.Subject, a.Kind)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := p.Undo(ctx, a); err != nil {
		return fmt.Errorf("reconcile: undo %s %s: %w", a.Subject, a.Kind, err)
	}
	return nil
}

// OnChange registers fn to be called after every pass that changed the
// state. fn runs on the reconciling goroutine, in pass order, and may read
// the state but not start a pass.
func (r *Reconciler) OnChange(fn func(Change)) {
	r.stateMu.Lock()
	r.listeners = append(r.listeners, fn)
	r.stateMu.Unlock()
}

// Pass reconciles what scope names under pol.
func (r *Reconciler) Pass(ctx context.Context, pol *config.Policy, scope Scope) Report {
	r.mu.Lock()
	defer r.mu.Unlock()
	if pol == nil {
		pol = &config.Policy{}
	}
	rep := Report{Started: time.Now(), Scope: scope}
	known := r.knownDevices()

	var hostActs []Action
	toRead := map[string][]int{}
	for n, ports := range scope.Devices {
		toRead[n] = ports
	}
	for _, p := range r.early {
		res := p.Apply(ctx, &Pass{Policy: pol, Devices: known, Forced: scope.Forced})
		hostActs = append(hostActs, res.Actions...)
		for _, n := range res.Created {
			toRead[n] = nil
		}
	}

	// Read what the scope names; everything else comes from the cache.
	var names []string
	gone := map[string]bool{}
	if scope.Full {
		listed, err := r.host.DeviceNames()
		if err != nil {
			hostActs = append(hostActs, Action{Subject: HostSubject(), Kind: KindRead, Status: Failed, Err: err})
			for _, d := range known {
				names = append(names, d.Name) // keep what we had
			}
		} else {
			names = listed
			for _, d := range known {
				gone[d.Name] = true
			}
			for _, n := range listed {
				delete(gone, n)
			}
		}
	} else {
		for n := range toRead {
			names = append(names, n)
		}
		sort.Strings(names)
	}
	reads := r.read(ctx, names, toRead, scope.Full, r.detailFor(pol))
	rep.Read = len(reads)
	working := map[string]*host.Device{}
	readErrs := map[string]error{}
	for _, rd := range reads {
		switch {
		case rd.err == nil:
			d := rd.dev
			working[d.Name] = &d
		case errors.Is(rd.err, host.ErrNoDevice):
			gone[rd.name] = true
		default:
			readErrs[rd.name] = rd.err
		}
	}

	all := r.mergeKnown(known, working, gone)
	hostPass := &Pass{Policy: pol, Devices: all, Forced: scope.Forced}
	var modules []string
	modulesKnown := false
	for _, p := range r.hostParts {
		res := p.Apply(ctx, hostPass)
		hostActs = append(hostActs, res.Actions...)
		if res.Modules != nil {
			modules, modulesKnown = res.Modules, true
		}
	}

	deviceActs := r.applyDevices(ctx, pol, working)
	for name, acts := range deviceActs {
		if r.mayHaveVanished(acts) && !r.host.Exists(path.Join(host.ClassInfiniband, name)) {
			// Unplugged, or re-registering after a change (an mlx4 port
			// type switch does that): not a failure; its add event
			// brings the next pass.
			gone[name] = true
			delete(working, name)
		}
	}
	rep.Actions = append(rep.Actions, hostActs...)
	for _, n := range sortedNames(working) {
		rep.Actions = append(rep.Actions, deviceActs[n]...)
	}
	rep.Finished = time.Now()
	change := r.commit(pol, working, deviceActs, readErrs, gone, hostActs, modules, modulesKnown, scope.Full, rep.Finished)
	r.logReport(rep)
	r.notify(change)
	return rep
}

// knownDevices returns the cached devices, sorted by name. The pointers
// reach into the published states, which a commit replaces rather than
// changes, so they stay valid and unchanged for the whole pass.
func (r *Reconciler) knownDevices() []*host.Device {
	r.stateMu.RLock()
	defer r.stateMu.RUnlock()
	out := make([]*host.Device, len(r.names))
	for i, n := range r.names {
		out[i] = &r.devices[n].Device
	}
	return out
}

// mergeKnown is the device list host parts see: fresh reads where there
// are some, the cache elsewhere, without the devices that are gone. known
// is sorted by name and so is the result. Its cost is a copy of pointers
// plus a binary search per fresh device, so a one-device pass stays cheap
// on a host with a thousand.
func (r *Reconciler) mergeKnown(known []*host.Device, fresh map[string]*host.Device, gone map[string]bool) []*host.Device {
	out := append(make([]*host.Device, 0, len(known)+len(fresh)), known...)
	added := false
	for name, d := range fresh {
		if i, found := sort.Find(len(known), func(i int) int { return strings.Compare(name, out[i].Name) }); found {
			out[i] = d
		} else {
			out = append(out, d)
			added = true
		}
	}
	if len(gone) > 0 {
		out = slices.DeleteFunc(out, func(d *host.Device) bool { return gone[d.Name] })
	}
	if added {
		sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	}
	return out
}

type readResult struct {
	name string
	dev  host.Device
	err  error
}

// read reads the named devices in parallel. A device with a port list and
// a cached copy has only those ports read again.
func (r *Reconciler) read(ctx context.Context, names []string, ports map[string][]int, full bool, detail host.Detail) []readResult {
	out := make([]readResult, len(names))
	r.forEach(ctx, len(names), func(i int) {
		n := names[i]
		out[i].name = n
		if pl := ports[n]; !full && pl != nil {
			if d, ok := r.cachedDevice(n); ok {
				out[i].dev, out[i].err = r.refreshPorts(d, pl)
				return
			}
		}
		out[i].dev, out[i].err = r.host.ReadDevice(n, detail)
	})
	return out
}

func (r *Reconciler) cachedDevice(name string) (host.Device, bool) {
	r.stateMu.RLock()
	defer r.stateMu.RUnlock()
	ds, ok := r.devices[name]
	if !ok || ds.ReadError != nil {
		return host.Device{}, false
	}
	return ds.Device.Clone(), true
}

// detailFor is what a pass under pol reads of each device: everything
// when the state is published, else what pol's selectors match on.
func (r *Reconciler) detailFor(pol *config.Policy) host.Detail {
	d := r.detail
	if d&host.ReadPublished != 0 {
		return d
	}
	var sels []config.Selector
	for _, rule := range pol.RoCE {
		sels = append(sels, rule.Selector)
	}
	for _, rule := range pol.VPI {
		sels = append(sels, rule.Selector)
	}
	for _, rule := range pol.QoS {
		sels = append(sels, rule.Selector)
	}
	if len(pol.QoS) > 0 {
		d |= host.ReadNetdevs // [[qos]] applies to the port's netdev
	}
	for _, s := range sels {
		if s.GUID != "" {
			d |= host.ReadGUID
		}
		if s.Netdev != "" {
			d |= host.ReadNetdevs
		}
	}
	return d
}

// refreshPorts re-reads some ports of a known device; a port it does not
// know means the device changed shape, so it is read whole.
func (r *Reconciler) refreshPorts(d host.Device, ports []int) (host.Device, error) {
	for _, n := range ports {
		p := d.Port(n)
		if p == nil {
			return r.host.ReadDevice(d.Name, r.detail)
		}
		fresh, err := r.host.ReadPort(d.Name, n, r.detail)
		if err != nil {
			return host.Device{}, err
		}
		fresh.GIDTypes, fresh.Netdevs = p.GIDTypes, p.Netdevs // not re-scanned for a port call
		*p = fresh
	}
	return d, nil
}

// applyDevices runs the device parts on every device read in this pass.
func (r *Reconciler) applyDevices(ctx context.Context, pol *config.Policy, working map[string]*host.Device) map[string][]Action {
	names := sortedNames(working)
	acts := make([][]Action, len(names))
	r.forEach(ctx, len(names), func(i int) {
		d := working[names[i]]
		for _, p := range r.deviceParts {
			acts[i] = append(acts[i], p.Apply(ctx, pol, d)...)
		}
	})
	out := make(map[string][]Action, len(names))
	for i, n := range names {
		out[n] = acts[i]
	}
	return out
}

// mayHaveVanished reports whether a device's actions give a reason to look
// whether it is still there: a failure for lack of the device, or a change
// a part says re-registers it.
func (r *Reconciler) mayHaveVanished(acts []Action) bool {
	for _, a := range acts {
		if a.Status == Failed && host.IsNoDevice(a.Err) {
			return true
		}
		if a.Status != Changed {
			continue
		}
		for _, p := range r.deviceParts {
			if rr, ok := p.(Reregisterer); ok && rr.Reregisters(a) {
				return true
			}
		}
	}
	return false
}

// forEach calls fn(0..n-1) on up to r.workers goroutines, which take
// indexes from a shared counter; it stops handing out work when ctx ends.
func (r *Reconciler) forEach(ctx context.Context, n int, fn func(i int)) {
	workers := min(r.workers, n)
	if workers <= 1 {
		for i := 0; i < n && ctx.Err() == nil; i++ {
			fn(i)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				fn(i)
			}
		}()
	}
	wg.Wait()
}

func sortedNames[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for n := range m {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// commit puts the pass's observations and results into the state.
func (r *Reconciler) commit(pol *config.Policy, working map[string]*host.Device, acts map[string][]Action,
	readErrs map[string]error, gone map[string]bool, hostActs []Action, modules []string, modulesKnown, full bool, at time.Time) Change {
	r.stateMu.Lock()
	defer r.stateMu.Unlock()
	ch := Change{Full: full}
	added := false
	for n := range gone {
		if _, ok := r.devices[n]; ok {
			delete(r.devices, n)
			ch.Removed = append(ch.Removed, n)
		}
	}
	for n, d := range working {
		if _, ok := r.devices[n]; !ok {
			added = true
		}
		ds := BuildDeviceState(*d, pol, acts[n])
		r.devices[n] = &ds
		ch.Updated = append(ch.Updated, n)
	}
	for n, err := range readErrs {
		ds, ok := r.devices[n]
		if !ok {
			ds = &DeviceState{Device: host.Device{Name: n}}
			r.devices[n] = ds
			added = true
		} else {
			c := *ds
			ds = &c
			r.devices[n] = ds
		}
		ds.ReadError = err
		ch.Updated = append(ch.Updated, n)
	}
	if added || len(ch.Removed) > 0 {
		r.names = sortedNames(r.devices)
	}
	for _, n := range ch.Removed {
		delete(r.failing, n)
	}
	for _, n := range ch.Updated {
		if r.devices[n].failed() {
			r.failing[n] = true
		} else {
			delete(r.failing, n)
		}
	}
	if modulesKnown {
		r.modules = modules
	}
	r.hostActs = hostActs
	r.last = at
	sort.Strings(ch.Updated)
	sort.Strings(ch.Removed)
	return ch
}

func (r *Reconciler) notify(ch Change) {
	r.stateMu.RLock()
	ls := append([]func(Change){}, r.listeners...)
	r.stateMu.RUnlock()
	for _, fn := range ls {
		fn(ch)
	}
}

// TargetOf returns the identity a selector matches for a device.
func TargetOf(d *host.Device) config.Target {
	return config.Target{Name: d.Name, NodeGUID: d.NodeGUID, PCI: d.PCIAddress, Driver: d.Driver, Netdevs: d.Netdevs}
}

// BuildDeviceState is a device as published after a pass over it: its
// observed values, what the policy declares for each port, and the
// failures of the pass, placed on the port or the device by their subject.
func BuildDeviceState(d host.Device, pol *config.Policy, acts []Action) DeviceState {
	ds := DeviceState{Device: d, Transports: d.Transports(), Actions: acts}
	t := TargetOf(&d)
	portFailures := map[int][]Action{}
	for _, a := range acts {
		if a.Status != Failed {
			continue
		}
		if a.Subject.Kind == SubjectPort && a.Subject.Device == d.Name {
			portFailures[a.Subject.Port] = append(portFailures[a.Subject.Port], a)
		} else {
			ds.Failures = append(ds.Failures, a)
		}
	}
	for i := range d.Ports {
		p := &d.Ports[i]
		ps := PortState{Port: *p, Transport: d.PortTransport(p), Failures: portFailures[p.Number]}
		if pol != nil {
			ps.Desired = pol.RoCEFor(t, p.Number)
			ps.VPIType, _ = pol.VPIFor(t, p.Number)
			ps.QoS = pol.QoSFor(t, p.Number)
		}
		ds.Ports = append(ds.Ports, ps)
	}
	return ds
}

func (r *Reconciler) logReport(rep Report) {
	for _, a := range rep.Actions {
		switch a.Status {
		case Changed:
			r.log.Info("applied", "subject", a.Subject.String(), "what", string(a.Kind), "from", a.From, "to", a.To, "source", a.Source)
		case Failed:
			r.log.Error("failed", "subject", a.Subject.String(), "what", string(a.Kind), "value", a.To, "source", a.Source, "err", a.Err)
		}
	}
	r.log.Debug("reconciled", "full", rep.Scope.Full, "read", rep.Read, "changed", rep.Count(Changed),
		"failed", rep.Count(Failed), "took", rep.Finished.Sub(rep.Started))
}

// Snapshot returns a copy of the whole state.
func (r *Reconciler) Snapshot() State {
	r.stateMu.RLock()
	defer r.stateMu.RUnlock()
	st := State{
		Modules:       append([]string(nil), r.modules...),
		LastReconcile: r.last,
		HostActions:   append([]Action(nil), r.hostActs...),
		Devices:       make([]DeviceState, 0, len(r.names)),
	}
	for _, n := range r.names {
		st.Devices = append(st.Devices, cloneDeviceState(r.devices[n]))
	}
	return st
}

// Summary is the state's Manager-level facts without copying devices.
type Summary struct {
	Devices       []string // sorted
	Modules       []string
	LastReconcile time.Time
	Failures      []Action // every failure still standing
}

// Summary returns the host-level view of the state.
//
// Its cost does not grow with the host: Devices is the state's own sorted
// list (replaced, never changed, when the set of devices changes: callers
// must not modify it), and only the devices with a failure are visited.
func (r *Reconciler) Summary() Summary {
	r.stateMu.RLock()
	defer r.stateMu.RUnlock()
	s := Summary{
		Devices:       r.names,
		Modules:       append([]string(nil), r.modules...),
		LastReconcile: r.last,
	}
	for _, a := range r.hostActs {
		if a.Status == Failed {
			s.Failures = append(s.Failures, a)
		}
	}
	for _, n := range sortedNames(r.failing) {
		ds := r.devices[n]
		if ds.ReadError != nil {
			s.Failures = append(s.Failures, Action{Subject: DeviceSubject(n), Kind: KindRead, Status: Failed, Err: ds.ReadError})
		}
		s.Failures = append(s.Failures, ds.Failures...)
		for _, p := range ds.Ports {
			s.Failures = append(s.Failures, p.Failures...)
		}
	}
	return s
}

// DeviceStates returns copies of the named devices' states; names that are
// not known are skipped.
func (r *Reconciler) DeviceStates(names []string) []DeviceState {
	r.stateMu.RLock()
	defer r.stateMu.RUnlock()
	out := make([]DeviceState, 0, len(names))
	for _, n := range names {
		if ds, ok := r.devices[n]; ok {
			out = append(out, cloneDeviceState(ds))
		}
	}
	return out
}

// Device returns a copy of one device's observed values.
func (r *Reconciler) Device(name string) (host.Device, bool) {
	r.stateMu.RLock()
	defer r.stateMu.RUnlock()
	ds, ok := r.devices[name]
	if !ok {
		return host.Device{}, false
	}
	return ds.Device.Clone(), true
}

// DevicesOnNetdev names the known devices attached to a netdev.
func (r *Reconciler) DevicesOnNetdev(netdev string) []string {
	r.stateMu.RLock()
	defer r.stateMu.RUnlock()
	var out []string
	for _, n := range r.names {
		for _, nd := range r.devices[n].Netdevs {
			if nd == netdev {
				out = append(out, n)
				break
			}
		}
	}
	return out
}

// failed reports whether the state holds a failure of the device or a port.
func (ds *DeviceState) failed() bool {
	if ds.ReadError != nil || len(ds.Failures) > 0 {
		return true
	}
	for _, p := range ds.Ports {
		if len(p.Failures) > 0 {
			return true
		}
	}
	return false
}

func cloneDeviceState(ds *DeviceState) DeviceState {
	c := *ds
	c.Device = ds.Device.Clone()
	c.Transports = append([]host.Transport(nil), ds.Transports...)
	c.Failures = append([]Action(nil), ds.Failures...)
	c.Actions = append([]Action(nil), ds.Actions...)
	c.Ports = make([]PortState, len(ds.Ports))
	for i, p := range ds.Ports {
		p.GIDTypes = append([]string(nil), p.GIDTypes...)
		p.Netdevs = append([]string(nil), p.Netdevs...)
		p.Failures = append([]Action(nil), p.Failures...)
		c.Ports[i] = p
	}
	return c
}

// RefreshPortStates re-reads the state and physical state of the ports
// keep selects (InfiniBand and OPA ports, whose state changes raise no
// event), and publishes the devices where either changed.
func (r *Reconciler) RefreshPortStates(ctx context.Context, keep func(d *host.Device, p *host.Port) bool) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	known := r.knownDevices()
	changed := make([]bool, len(known))
	fresh := make([]host.Device, len(known))
	r.forEach(ctx, len(known), func(i int) {
		d := known[i].Clone()
		for j := range d.Ports {
			if keep(&d, &d.Ports[j]) && r.host.RefreshPortState(d.Name, &d.Ports[j]) {
				changed[i] = true
			}
		}
		fresh[i] = d
	})
	var ch Change
	r.stateMu.Lock()
	for i, d := range fresh {
		ds, ok := r.devices[d.Name]
		if !changed[i] || !ok {
			continue
		}
		c := cloneDeviceState(ds)
		for j := range c.Ports {
			if p := d.Port(c.Ports[j].Number); p != nil {
				c.Ports[j].State, c.Ports[j].PhysState = p.State, p.PhysState
				if cp := c.Device.Port(p.Number); cp != nil {
					cp.State, cp.PhysState = p.State, p.PhysState
				}
			}
		}
		r.devices[d.Name] = &c
		ch.Updated = append(ch.Updated, d.Name)
	}
	r.stateMu.Unlock()
	if len(ch.Updated) > 0 {
		r.notify(ch)
	}
	return ch.Updated
}
