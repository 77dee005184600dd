package reconcile

import (
	"fmt"
	"strconv"
	"time"

	"github.com/rdmad/rdmad/daemon/host"
)

// Status is the outcome of one action.
type Status int

const (
	Unchanged     Status = iota // already as declared: nothing written
	Changed                     // written and verified
	Failed                      // the kernel refused or the write did not stick
	NotApplicable               // declared, but does not apply (an InfiniBand port matched by a RoCE rule)
	Pending                     // started and still running (modules loading in the background)
	Held                        // not as declared and not written: Err says why (reported drift, another owner, contested)
)

func (s Status) String() string {
	switch s {
	case Unchanged:
		return "unchanged"
	case Changed:
		return "changed"
	case Failed:
		return "failed"
	case NotApplicable:
		return "not-applicable"
	case Pending:
		return "pending"
	case Held:
		return "held"
	}
	return fmt.Sprintf("status(%d)", int(s))
}

// SubjectKind says what an action is about.
type SubjectKind uint8

const (
	SubjectHost   SubjectKind = iota // the host as a whole (modules, memlock, netns)
	SubjectDevice                    // one RDMA device
	SubjectPort                      // one port of one device
	SubjectLink                      // one declared soft RDMA link
	SubjectNetdev                    // one network interface (the netdev of a RoCE port)
)

// Subject identifies what an action is about. Parts build subjects with
// the constructors below; callers compare them as values, never by text.
type Subject struct {
	Kind   SubjectKind
	Device string // SubjectDevice, SubjectPort
	Port   int    // SubjectPort
	Link   string // SubjectLink
	Netdev string // SubjectNetdev
}

// HostSubject is the host as a whole.
func HostSubject() Subject { return Subject{Kind: SubjectHost} }

// DeviceSubject is one RDMA device.
func DeviceSubject(dev string) Subject { return Subject{Kind: SubjectDevice, Device: dev} }

// PortSubject is one port of one device.
func PortSubject(dev string, port int) Subject {
	return Subject{Kind: SubjectPort, Device: dev, Port: port}
}

// LinkSubject is a declared soft RDMA link.
func LinkSubject(name string) Subject { return Subject{Kind: SubjectLink, Link: name} }

// NetdevSubject is a network interface.
func NetdevSubject(name string) Subject { return Subject{Kind: SubjectNetdev, Netdev: name} }

// String is the subject as reports and logs show it: "host", "mlx5_0",
// "mlx5_0/1", "link rxe0".
func (s Subject) String() string {
	switch s.Kind {
	case SubjectDevice:
		return s.Device
	case SubjectPort:
		return s.Device + "/" + strconv.Itoa(s.Port)
	case SubjectLink:
		return "link " + s.Link
	case SubjectNetdev:
		return "netdev " + s.Netdev
	}
	return "host"
}

// Kind is what an action does to its subject. Each part exports its kinds
// (roce.Mode, modules.Load, links.Create, ...); the text is what reports
// and logs show.
type Kind string

// Action is one thing a pass looked at: the RoCE mode of a port, the module
// batch, the memlock file...
type Action struct {
	Subject Subject
	Kind    Kind
	// Setting is the setting the action keeps (nil for an action that
	// keeps none: making a directory, loading modules).
	Setting *Setting
	From    string // observed value before ("" if none), as reports show it
	To      string // declared value, as reports show it
	// Old and New are the same two values in the part's own types, nil
	// where the part has none; the setting's Handle reads them (Undo puts
	// Old back).
	Old, New Value
	Status   Status
	Err      error  // set when Status is Failed; the reason when NotApplicable or Held
	Source   string // config file:line that declared it, when known
	// Cost is how many corrections the write counts for when rdmad
	// judges whether a setting is contested (0 counts 1).
	Cost int

	restore bool // a value found put back (found.go): not itself a value found
}

func (a Action) String() string {
	s := fmt.Sprintf("%-9s %s %s", a.Status, a.Subject, a.Kind)
	switch a.Status {
	case Changed:
		s += fmt.Sprintf(": %q -> %q", a.From, a.To)
	case Unchanged, Pending:
		s += fmt.Sprintf(": %q", a.To)
	case Failed, Held:
		s += fmt.Sprintf(": %q: %v", a.To, a.Err)
	case NotApplicable:
		if a.Err != nil {
			s += ": " + a.Err.Error()
		}
	}
	return s
}

// PortState is a port as the D-Bus view and rdmactl show it: observed values
// after the last reconcile, its settings' records, and the last errors.
type PortState struct {
	host.Port
	Transport host.Transport
	// Records are the port's settings as the last read left them, in the
	// order the parts run.
	Records  []Record
	Failures []Action // failed actions of the last pass over this port
}

// DeviceState is a device as the D-Bus view and rdmactl show it.
type DeviceState struct {
	host.Device
	Transports []host.Transport
	Ports      []PortState
	Failures   []Action // failed device-level actions of the last pass over it
	ReadError  error    // the device exists but did not read; its values are the last good ones
	Actions    []Action // every action of the last pass over this device
}

// Drift says whether one declared setting of a port holds.
type Drift struct {
	Setting string // the setting's Name
	Drifted bool
}

// PortDrift lists the settings the policy declares for port p of ds and
// whether each one drifted, as its part recorded it: the kernel value is
// not the declared one, or it could not be read or written. A declared
// setting that does not apply to the port (RoCE settings on an
// InfiniBand port, QoS on a virtual function) is not listed. The values
// of a device that did not read are the last good ones: every declared
// setting of it counts as drifted.
func (ds *DeviceState) PortDrift(p *PortState) []Drift {
	var out []Drift
	for _, r := range p.Records {
		if r.Applies() {
			out = append(out, Drift{r.Setting.Name, r.Drifted() || ds.ReadError != nil})
		}
	}
	return out
}

// State is everything the daemon publishes: the last observed host plus the
// results of the last reconcile of each part.
type State struct {
	Devices       []DeviceState // sorted by name
	Modules       []string      // listed modules present for the present devices
	LastReconcile time.Time
	HostActions   []Action // the host-wide and link actions of the last pass
	// HostRecords are the records of the host parts (files, links, the
	// netns mode), whatever their subject.
	HostRecords []Record
	// Unrestored are the values found before rdmad changed a setting that
	// could not be put back when its declaration went (found.go).
	Unrestored []FoundEntry
	// FoundError is why found.json cannot be kept (a file without rdmad's
	// header at its path, a failed save); nil when nothing stands in the
	// way. A removed declaration then puts back only what this rdmad
	// found since it started.
	FoundError error
	// Departed are the devices rdmad saw since it started that are gone,
	// oldest first.
	Departed []Departed
	// Fights are the settings rdmad keeps correcting (fought.go).
	Fights []Fight
	// Holds are the holds on settings in force (holds.go).
	Holds []Hold
}

// Device returns the named device state, or nil.
func (s *State) Device(name string) *DeviceState {
	for i := range s.Devices {
		if s.Devices[i].Name == name {
			return &s.Devices[i]
		}
	}
	return nil
}

// Failures lists every failure still standing: the last pass's host-wide
// ones and each device's and port's from the last pass over it, so a pass
// over one device never hides another device's error.
func (s *State) Failures() []Action {
	devs := make([]*DeviceState, len(s.Devices))
	for i := range s.Devices {
		devs[i] = &s.Devices[i]
	}
	return standingFailures(s.HostActions, devs)
}

// standingFailures is the one account of the failures still standing:
// the host-wide actions that failed, then each device's read error and
// its device and port failures. A device without a failure adds nothing,
// so the reconciler's Summary passes only the devices it knows to fail.
func standingFailures(hostActs []Action, devs []*DeviceState) []Action {
	var out []Action
	for _, a := range hostActs {
		if a.Status == Failed {
			out = append(out, a)
		}
	}
	for _, d := range devs {
		if d.ReadError != nil {
			out = append(out, Action{Subject: DeviceSubject(d.Name), Kind: KindRead, Status: Failed, Err: d.ReadError})
		}
		out = append(out, d.Failures...)
		for _, p := range d.Ports {
			out = append(out, p.Failures...)
		}
	}
	return out
}

// Records lists every record of the state: the host parts', then each
// device's ports', in device order.
func (s *State) Records() []Record {
	out := append([]Record(nil), s.HostRecords...)
	for i := range s.Devices {
		for _, p := range s.Devices[i].Ports {
			out = append(out, p.Records...)
		}
	}
	return out
}

// KindRead is the reconciler's own action: reading the host.
const KindRead Kind = "read"

// Summarize is "ok" or a one-line account of failures for logs, STATUS=
// and D-Bus.
func Summarize(failures []Action) string {
	if len(failures) == 0 {
		return "ok"
	}
	a := failures[0]
	return fmt.Sprintf("%d failed (first: %s %s: %v)", len(failures), a.Subject, a.Kind, a.Err)
}

// Actions returns every action of the state: host-wide ones, then each
// device's, in device order.
func (s *State) Actions() []Action {
	out := append([]Action(nil), s.HostActions...)
	for i := range s.Devices {
		out = append(out, s.Devices[i].Actions...)
	}
	return out
}
