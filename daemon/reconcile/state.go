package reconcile

import (
	"fmt"
	"time"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host"
)

// Status is the outcome of one action.
type Status int

const (
	Unchanged     Status = iota // already as declared: nothing written
	Changed                     // written and verified
	Failed                      // the kernel refused or the write did not stick
	NotApplicable               // declared, but does not apply (an InfiniBand port matched by a RoCE rule)
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
	}
	return fmt.Sprintf("status(%d)", int(s))
}

// Action is one thing reconcile looked at: a RoCE mode of a port, the module
// batch, the memlock file...
type Action struct {
	Target string // "mlx5_0/1", "mlx5_0", "modules", "memlock", "link rxe0", "netns"
	What   string // "roce mode", "roce tos", "load", "limits.d", ...
	From   string // observed value before ("" if none)
	To     string // declared value
	Status Status
	Err    error  // set when Status == Failed
	Source string // config file:line that declared it, when known
}

func (a Action) String() string {
	s := fmt.Sprintf("%-9s %s %s", a.Status, a.Target, a.What)
	switch a.Status {
	case Changed:
		s += fmt.Sprintf(": %q -> %q", a.From, a.To)
	case Unchanged:
		s += fmt.Sprintf(": %q", a.To)
	case Failed:
		s += fmt.Sprintf(": %q: %v", a.To, a.Err)
	case NotApplicable:
		if a.Err != nil {
			s += ": " + a.Err.Error()
		}
	}
	return s
}

// PortState is a port as the D-Bus view and rdmactl show it: observed values
// after the last reconcile, what the policy declares, and the last error.
type PortState struct {
	host.Port
	Transport host.Transport
	Desired   config.RoCEDesired
	VPIType   config.VPIType // declared mlx4 port type, "" if none
	Error     string         // last error for this port, "" if none
}

// DeviceState is a device as the D-Bus view and rdmactl show it.
type DeviceState struct {
	host.Device
	Transports []host.Transport
	Ports      []PortState
	Error      string // last device-level error (configfs mkdir, vanished...), "" if none
}

// State is everything the daemon publishes: the last observed host plus the
// results of the last reconcile of each part.
type State struct {
	Devices       []DeviceState // sorted by name
	Modules       []string      // modules loaded (or already loaded) for the present devices
	LastReconcile time.Time
	LastResult    string   // "ok", or a one-line summary of failures
	Actions       []Action // of the last full or per-device pass
}

// Device returns the named device state, or nil.
func (s State) Device(name string) *DeviceState {
	for i := range s.Devices {
		if s.Devices[i].Name == name {
			return &s.Devices[i]
		}
	}
	return nil
}
