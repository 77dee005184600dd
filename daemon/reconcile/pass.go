package reconcile

import (
	"context"
	"errors"
	"path"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdmad/rdmad/daemon/audit"
	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host"
)

// Scope says what a pass reads again.
type Scope struct {
	// Full lists and reads every device again: at start, after lost
	// events, on a policy change and on an explicit Reconcile.
	Full bool
	// Devices are read again by name. A nil port list reads the whole
	// device; a list reads only those ports of a device already known.
	Devices map[string][]int
	// Refresh are devices of Devices read whole because their netdev's
	// link state or carrier changed: not arrivals (the driver kept what
	// it holds), so [drift] action decides about their settings as for a
	// recheck. A mlx5 PFC change toggles the link: were a link change an
	// arrival, a fight with another DCB manager would never be contested
	// and "report" would write.
	Refresh map[string]bool
	// Forced marks a pass asked for explicitly (see Pass.Forced): the
	// policy is applied whatever [drift] action says.
	Forced bool
	// Recheck are known devices whose declared settings are read again
	// from the cached device, without reading the device itself: an event
	// says one may have changed behind rdmad's back (a configfs or DCB
	// notification), or the verify read-back is due. A device also named
	// in Devices is read whole.
	Recheck map[string]bool
	// RecheckHost says a host-wide setting may have changed behind
	// rdmad's back (an event in the directory of a file rdmad writes).
	// The host parts run in every pass; this only marks the pass as a
	// recheck.
	RecheckHost bool
	// Verify marks the periodic read-back ([drift] verify_interval).
	Verify bool
}

// recheckOnly reports whether the pass only reads settings again: no
// device is read whole.
func (s Scope) recheckOnly() bool {
	return !s.Full && len(s.Devices) == 0 && (len(s.Recheck) > 0 || s.RecheckHost)
}

// Change tells listeners what a pass changed in the State.
type Change struct {
	Full    bool     // every device was looked at
	Updated []string // devices added or updated, sorted
	Added   []string // of Updated, the devices new to the state, sorted
	Removed []string // devices gone, sorted
	// Corrected are the out-of-band changes the pass put back, in the
	// order of its actions; Contested the settings it stopped correcting
	// (news.go).
	Corrected []Correction
	Contested []ContestStart
}

// passResult is what a pass hands to the store.
type passResult struct {
	pol      *config.Policy
	working  map[string]*host.Device // devices read in this pass
	acts     map[string][]Action     // their actions
	recs     map[string][]Record     // their device parts' records
	readErrs map[string]error
	gone     map[string]bool
	// unregistered are the identities of devices a change of this pass
	// made the kernel unregister (DeviceRecreator): what they held before
	// is still recorded in found.json.
	unregistered map[string]string
	recheck      map[string]bool // devices of working only rechecked: their records merge with the stored ones
	hostActs     []Action
	hostRecs     []Record
	modules      []string
	modKnown     bool // modules is the modules part's answer
	full         bool
	at           time.Time
}

// Pass reconciles what scope names under pol.
func (r *Reconciler) Pass(ctx context.Context, pol *config.Policy, scope Scope) Report {
	r.mu.Lock()
	defer r.mu.Unlock()
	if pol == nil {
		pol = &config.Policy{}
	}
	g := r.guard(pol, scope)
	rep, res := r.pass(ctx, pol, scope, g)
	corrected, logged := r.noteCorrections(g, rep.Actions)
	contested := r.contestsStarted(g, rep.Actions)
	r.tally.add(corrected)
	r.tally.mark(res)
	if scope.Verify {
		r.drift.mu.Lock()
		r.drift.lastVerify = rep.Finished
		r.drift.mu.Unlock()
	}
	if r.found != nil {
		r.found.save()
	}
	if scope.recheckOnly() && r.asBefore(rep, res) {
		// Nothing changed (most often the echo of rdmad's own write):
		// the state, its listeners and the bus stay as they are.
		r.log.Debug("rechecked: as before", "devices", len(res.working), "took", rep.Finished.Sub(rep.Started))
		return rep
	}
	change, gone := r.commit(res)
	change.Corrected, change.Contested = corrected, contested
	r.logDepartures(gone)
	r.logReport(ctx, rep, logged)
	r.notify(change)
	return rep
}

// asBefore reports whether a recheck found everything as stored: nothing
// written, and every record the same (a change reported again is as
// before).
func (r *Reconciler) asBefore(rep Report, res *passResult) bool {
	if rep.Count(Changed) > 0 {
		return false
	}
	if len(res.gone) > 0 || len(res.readErrs) > 0 || len(res.working) != len(res.recheck) {
		return false
	}
	r.stateMu.RLock()
	defer r.stateMu.RUnlock()
	if !sameRecords(r.hostRecs, res.hostRecs) {
		return false
	}
	for n := range res.recheck {
		prev, ok := r.devices[n]
		if !ok {
			return false
		}
		// A device has a few records a port: a scan beats a map.
		for _, rec := range res.recs[n] {
			if old, ok := storedRecord(prev.Ports, rec.Subject, rec.Setting); !ok || !sameRecord(old, rec) {
				return false
			}
		}
	}
	return true
}

// storedRecord is the record of setting st on s among ports'.
func storedRecord(ports []PortState, s Subject, st *Setting) (Record, bool) {
	for _, p := range ports {
		for _, rec := range p.Records {
			if rec.Setting == st && rec.Subject == s {
				return rec, true
			}
		}
	}
	return Record{}, false
}

func sameRecords(a, b []Record) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Subject != b[i].Subject || a[i].Setting != b[i].Setting || !sameRecord(a[i], b[i]) {
			return false
		}
	}
	return true
}

// sameRecord compares what a record says (values by their text, errors
// by theirs).
func sameRecord(a, b Record) bool {
	return a.State == b.State && a.Source == b.Source && Text(a.Declared) == Text(b.Declared) &&
		Text(a.Observed) == Text(b.Observed) && sameWhy(a.Why, b.Why)
}

// pass runs one pass under the guard g (nil: every write allowed) and
// returns what it did, for the caller to store (Pass) or not (Observe).
func (r *Reconciler) pass(ctx context.Context, pol *config.Policy, scope Scope, g WriteGuard) (Report, *passResult) {
	if pol == nil {
		pol = &config.Policy{}
	}
	rep := Report{Started: time.Now(), Scope: scope}
	known := r.knownDevices()
	res := passResult{pol: pol, gone: map[string]bool{}, readErrs: map[string]error{}, working: map[string]*host.Device{}, recheck: map[string]bool{}, full: scope.Full}

	toRead := map[string][]int{}
	for n, ports := range scope.Devices {
		toRead[n] = ports
	}
	stepTo(g, "judge the host-wide settings made before the devices are read")
	for _, p := range r.early {
		out := p.ApplyHost(ctx, &HostRun{Policy: pol, Devices: known, Forced: scope.Forced, guard: g})
		res.hostActs = append(res.hostActs, out.Actions...)
		res.hostRecs = append(res.hostRecs, out.Records...)
		for _, n := range out.Created {
			toRead[n] = nil
		}
	}

	// Read what the scope names; everything else comes from the cache.
	var names []string
	if scope.Full {
		stepTo(g, "list the RDMA devices")
		listed, err := r.host.DeviceNames()
		if err != nil {
			res.hostActs = append(res.hostActs, Action{Subject: HostSubject(), Kind: KindRead, Status: Failed, Err: err})
			for _, d := range known {
				names = append(names, d.Name) // keep what we had
			}
		} else {
			names = listed
			for _, d := range known {
				res.gone[d.Name] = true
			}
			for _, n := range listed {
				delete(res.gone, n)
			}
		}
	} else {
		for n := range toRead {
			names = append(names, n)
		}
		sort.Strings(names)
	}
	stepTo(g, "read the RDMA devices (%d)", len(names))
	reads := r.read(ctx, r.workersFor(g), names, toRead, scope.Full, r.detailFor(pol))
	rep.Read = len(reads)
	for _, rd := range reads {
		switch {
		case rd.err == nil:
			d := rd.dev
			res.working[d.Name] = &d
		case errors.Is(rd.err, host.ErrNoDevice):
			res.gone[rd.name] = true
		default:
			res.readErrs[rd.name] = rd.err
		}
	}

	if !scope.Full {
		for n := range scope.Recheck {
			if _, read := res.working[n]; read || res.gone[n] {
				continue
			}
			if d, ok := r.cachedDevice(n); ok {
				res.working[n], res.recheck[n] = &d, true
			}
		}
	}

	all := r.mergeKnown(known, res.working, res.gone)
	hostPass := &HostRun{Policy: pol, Devices: all, Forced: scope.Forced, guard: g}
	stepTo(g, "judge the host-wide settings")
	for _, p := range r.hostParts {
		out := p.ApplyHost(ctx, hostPass)
		res.hostActs = append(res.hostActs, out.Actions...)
		res.hostRecs = append(res.hostRecs, out.Records...)
		if out.Modules != nil {
			res.modules, res.modKnown = out.Modules, true
		}
	}

	stepTo(g, "judge the settings of the devices (%d)", len(res.working))
	res.acts, res.recs = r.applyDevices(ctx, pol, res.working, res.recheck, g)
	for name, acts := range res.acts {
		if r.mayHaveVanished(acts) && !r.host.Exists(path.Join(host.ClassInfiniband, name)) {
			// Unplugged, or re-registering after a change (an mlx4 port
			// type switch does that): not a failure; its add event
			// brings the next pass.
			if res.unregistered == nil {
				res.unregistered = map[string]string{}
			}
			res.unregistered[name] = DeviceIdentity(res.working[name])
			res.gone[name] = true
			delete(res.working, name)
		}
	}
	if r.found != nil && !g.ReadOnly() {
		r.keepFound(ctx, pol, &res)
	}
	// Sized once: at 1,024 devices growing them is a tenth of a verify
	// read-back.
	sorted := sortedNames(res.working)
	nActs, nRecs := len(res.hostActs), len(res.hostRecs)
	for _, n := range sorted {
		nActs, nRecs = nActs+len(res.acts[n]), nRecs+len(res.recs[n])
	}
	rep.Actions = slices.Grow(rep.Actions, nActs)
	rep.Records = slices.Grow(rep.Records, nRecs)
	rep.Actions = append(rep.Actions, res.hostActs...)
	rep.Records = append(rep.Records, res.hostRecs...)
	for _, n := range sorted {
		rep.Actions = append(rep.Actions, res.acts[n]...)
		rep.Records = append(rep.Records, res.recs[n]...)
	}
	rep.Finished = time.Now()
	res.at = rep.Finished
	return rep, &res
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
func (r *Reconciler) read(ctx context.Context, workers int, names []string, ports map[string][]int, full bool, detail host.Detail) []readResult {
	out := make([]readResult, len(names))
	forEach(ctx, workers, len(names), func(i int) {
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
func (r *Reconciler) applyDevices(ctx context.Context, pol *config.Policy, working map[string]*host.Device, recheck map[string]bool, g WriteGuard) (map[string][]Action, map[string][]Record) {
	names := sortedNames(working)
	runs := make([]*DeviceRun, len(names))
	publish := r.detail&host.ReadPublished != 0
	forEach(ctx, r.workersFor(g), len(names), func(i int) {
		// A recheck reads only what the policy declares.
		dev := working[names[i]]
		run := &DeviceRun{Policy: pol, Device: dev, Publish: publish && !recheck[names[i]], guard: g}
		// Sized for the two RoCE settings of each port a verify read-back
		// checks: growing these slices of large structs from empty was a
		// tenth of its cost.
		run.Actions = make([]Action, 0, 2*len(dev.Ports))
		run.Records = make([]Record, 0, 2*len(dev.Ports))
		for _, p := range r.deviceParts {
			p.ApplyDevice(ctx, run)
		}
		runs[i] = run
	})
	acts := make(map[string][]Action, len(names))
	recs := make(map[string][]Record, len(names))
	for i, n := range names {
		if runs[i] == nil { // ctx ended before this device's turn
			continue
		}
		acts[n], recs[n] = runs[i].Actions, runs[i].Records
	}
	return acts, recs
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
			if rr, ok := p.(DeviceRecreator); ok && rr.RecreatesDevice(a) {
				return true
			}
		}
	}
	return false
}

// workersFor is how many devices a pass under g reads and judges at once.
func (r *Reconciler) workersFor(g WriteGuard) int {
	if ro, ok := g.(readOnly); ok && ro.serial {
		return 1
	}
	return r.workers
}

// forEach calls fn(0..n-1) on up to workers goroutines, which take
// indexes from a shared counter; it stops handing out work when ctx ends.
func forEach(ctx context.Context, workers, n int, fn func(i int)) {
	workers = min(workers, n)
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

// logReport logs what the pass changed and what failed, but for the
// corrections (the indexes in rep.Actions noteCorrections logged
// already: one line each); a pass a call ran names the call's caller on
// each line (audit.Attrs).
func (r *Reconciler) logReport(ctx context.Context, rep Report, logged map[int]bool) {
	caller := audit.Attrs(ctx)
	for i, a := range rep.Actions {
		switch a.Status {
		case Changed:
			if logged[i] {
				continue
			}
			r.log.Info("applied", append([]any{"subject", a.Subject.String(), "what", string(a.Kind), "from", a.From, "to", a.To, "source", a.Source}, caller...)...)
		case Failed:
			r.logFailure(a, caller)
		}
	}
	r.log.Debug("reconciled", "full", rep.Scope.Full, "read", rep.Read, "changed", rep.Count(Changed),
		"failed", rep.Count(Failed), "took", rep.Finished.Sub(rep.Started))
}
