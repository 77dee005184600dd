package reconcile

import (
	"slices"
	"sort"
	"time"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host"
)

// commit puts a pass's observations, records and results into the state,
// and returns what changed and which devices went.
func (r *Reconciler) commit(res *passResult) (Change, []departure) {
	r.stateMu.Lock()
	defer r.stateMu.Unlock()
	ch := Change{Full: res.full}
	added := false
	var removed []host.Device
	for n := range res.gone {
		if ds, ok := r.devices[n]; ok {
			removed = append(removed, ds.Device)
			delete(r.devices, n)
			ch.Removed = append(ch.Removed, n)
		}
	}
	hostOnPorts := portRecords(res.hostRecs)
	for n, d := range res.working {
		if _, ok := r.devices[n]; !ok {
			added = true
			ch.Added = append(ch.Added, n)
		}
		recs := append(res.recs[n], hostOnPorts[n]...)
		if prev, ok := r.devices[n]; ok && res.recheck[n] {
			recs = mergeRecords(prev, recs)
		}
		ds := BuildDeviceState(*d, res.acts[n], recs)
		r.devices[n] = &ds
		ch.Updated = append(ch.Updated, n)
	}
	for n, err := range res.readErrs {
		ds, ok := r.devices[n]
		if !ok {
			ds = &DeviceState{Device: host.Device{Name: n}}
			r.devices[n] = ds
			added = true
			ch.Added = append(ch.Added, n)
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
	if res.modKnown {
		r.modules = res.modules
	}
	r.hostActs, r.hostRecs = res.hostActs, res.hostRecs
	r.last = res.at
	gone := r.noteDepartures(removed, res, res.at)
	sort.Strings(ch.Updated)
	sort.Strings(ch.Added)
	sort.Strings(ch.Removed)
	return ch, gone
}

// TargetOf returns the identity a selector matches for a device.
func TargetOf(d *host.Device) config.Target {
	return config.Target{Name: d.Name, NodeGUID: d.NodeGUID, PCI: d.PCIAddress, Driver: d.Driver, Netdevs: d.Netdevs}
}

// mergeRecords is a rechecked device's records: the new ones, and the
// stored ones of the settings the recheck did not read (the kernel's values
// of undeclared settings, published from the last full read).
func mergeRecords(prev *DeviceState, recs []Record) []Record {
	type key struct {
		s  Subject
		st *Setting
	}
	fresh := make(map[key]int, len(recs))
	for i, r := range recs {
		fresh[key{r.Subject, r.Setting}] = i
	}
	used := make([]bool, len(recs))
	out := make([]Record, 0, len(recs))
	for _, p := range prev.Ports {
		for _, r := range p.Records {
			if i, ok := fresh[key{r.Subject, r.Setting}]; ok {
				r, used[i] = recs[i], true
			}
			out = append(out, r) // in the order the full read gave them
		}
	}
	for i, r := range recs {
		if !used[i] {
			out = append(out, r)
		}
	}
	return out
}

// portRecords groups the host parts' records about ports by device: a
// record of the host-wide mlx4_en options, judged for each port they
// affect, goes with the port.
func portRecords(hostRecs []Record) map[string][]Record {
	out := map[string][]Record{}
	for _, rec := range hostRecs {
		if rec.Subject.Kind == SubjectPort {
			out[rec.Subject.Device] = append(out[rec.Subject.Device], rec)
		}
	}
	return out
}

// BuildDeviceState is a device as published after a pass over it: its
// observed values, its settings' records and the failures of the pass,
// each placed on the port or the device by its subject.
func BuildDeviceState(d host.Device, acts []Action, recs []Record) DeviceState {
	ds := DeviceState{Device: d, Transports: d.Transports(), Actions: acts}
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
	portRecords := map[int][]Record{}
	for _, rec := range recs {
		if rec.Subject.Kind == SubjectPort && rec.Subject.Device == d.Name {
			portRecords[rec.Subject.Port] = append(portRecords[rec.Subject.Port], rec)
		}
	}
	for i := range d.Ports {
		p := &d.Ports[i]
		ds.Ports = append(ds.Ports, PortState{Port: *p, Transport: d.PortTransport(p), Records: portRecords[p.Number], Failures: portFailures[p.Number]})
	}
	return ds
}

// Snapshot returns a copy of the whole state.
func (r *Reconciler) Snapshot() State {
	r.stateMu.RLock()
	defer r.stateMu.RUnlock()
	st := State{
		Modules:       append([]string(nil), r.modules...),
		LastReconcile: r.last,
		HostActions:   append([]Action(nil), r.hostActs...),
		HostRecords:   append([]Record(nil), r.hostRecs...),
		Devices:       make([]DeviceState, 0, len(r.names)),
	}
	for _, n := range r.names {
		st.Devices = append(st.Devices, cloneDeviceState(r.devices[n]))
	}
	if r.found != nil {
		st.Unrestored = r.found.Unrestored()
		st.FoundError = r.found.Problem()
	}
	st.Departed = r.departedSorted()
	st.Fights = r.Fights()
	st.Holds = r.Holds()
	return st
}

// Summary is the state's Manager-level facts without copying devices.
type Summary struct {
	Devices       []string // sorted
	Modules       []string
	LastReconcile time.Time
	Failures      []Action // every failure still standing
	HostRecords   []Record // the host parts' records
	// Corrected counts the out-of-band changes put back, by setting name.
	Corrected map[string]uint64
	// LastVerify is when every declared setting was last read back (the
	// verify read-back, or a full pass); zero before the first.
	LastVerify time.Time
	// Fought counts the subjects whose setting rdmad keeps correcting
	// now, by setting name (Fights): rdmad_drift_fought.
	Fought map[string]int
	// Holds are the holds on settings in force.
	Holds []Hold
}

// Summary returns the host-level view of the state.
//
// Its cost does not grow with the host: Devices is the state's own sorted
// list (replaced, never changed, when the set of devices changes: callers
// must not modify it), and only the devices with a failure are visited.
func (r *Reconciler) Summary() Summary {
	r.stateMu.RLock()
	defer r.stateMu.RUnlock()
	failing := make([]*DeviceState, 0, len(r.failing))
	for _, n := range sortedNames(r.failing) {
		failing = append(failing, r.devices[n])
	}
	return Summary{
		Devices:       r.names,
		Modules:       append([]string(nil), r.modules...),
		LastReconcile: r.last,
		Failures:      standingFailures(r.hostActs, failing),
		HostRecords:   append([]Record(nil), r.hostRecs...),
		Corrected:     r.Corrected(),
		LastVerify:    r.LastVerify(),
		Fought:        fought(r.Fights()),
		Holds:         r.Holds(),
	}
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

// Devices returns copies of the named devices' observed values (nil: every
// device, sorted); names that are not known are skipped. A reader that
// needs no records takes these: copying every device's whole state
// (Snapshot) at 1,024 devices makes several times the garbage.
func (r *Reconciler) Devices(names []string) []host.Device {
	r.stateMu.RLock()
	defer r.stateMu.RUnlock()
	if names == nil {
		names = r.names
	}
	out := make([]host.Device, 0, len(names))
	for _, n := range names {
		if ds, ok := r.devices[n]; ok {
			out = append(out, ds.Device.Clone())
		}
	}
	return out
}

// Watches returns, for each named device that is known, the directories
// its declared settings ask to be watched (Record.Watch), relative to the
// host root, each once, in the order the records name them: what the
// service watches, without a copy of the devices' state.
func (r *Reconciler) Watches(names []string) map[string][]string {
	r.stateMu.RLock()
	defer r.stateMu.RUnlock()
	out := make(map[string][]string, len(names))
	for _, n := range names {
		ds, ok := r.devices[n]
		if !ok {
			continue
		}
		var dirs []string
		for _, p := range ds.Ports {
			dirs = WatchedDirs(dirs, p.Records)
		}
		out[n] = dirs
	}
	return out
}

// WatchedDirs adds to dirs the directories the declared records of recs
// ask to watch that dirs lacks.
func WatchedDirs(dirs []string, recs []Record) []string {
	for _, rec := range recs {
		if !rec.IsDeclared() {
			continue
		}
		for _, d := range rec.Watch {
			if !slices.Contains(dirs, d) {
				dirs = append(dirs, d)
			}
		}
	}
	return dirs
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
		p.Records = append([]Record(nil), p.Records...)
		c.Ports[i] = p
	}
	return c
}
