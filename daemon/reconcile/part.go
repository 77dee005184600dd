package reconcile

import (
	"context"
	"errors"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host"
)

// Part is what every part provides besides its ApplyHost or ApplyDevice:
// the kinds of the actions
// it reports, the settings it keeps, and how to undo one of its changes.
type Part interface {
	// Kinds lists the kinds of the actions the part reports; no two parts
	// of a Reconciler report the same kind.
	Kinds() []Kind
	// Settings lists the settings the part keeps (its records'); no two
	// parts keep the same setting.
	Settings() []*Setting
	// Undo puts back what one of the part's Changed actions changed (a.Old
	// in place of a.New). An action that cannot be undone returns an error
	// wrapping ErrNotUndoable that says why.
	Undo(ctx context.Context, a Action) error
}

// ErrNotUndoable is wrapped by Undo for an action that cannot be undone.
var ErrNotUndoable = errors.New("cannot be undone")

// HostPart is a concern that applies to the host as a whole (modules,
// memlock, netns, soft links).
//
// The two kinds of part apply in two shapes, and their methods say which
// (ApplyHost, ApplyDevice) so that neither passes for the other: a host
// part runs once per pass, alone, and returns a Result, because besides
// its actions and records it establishes facts the rest of the pass reads
// before the device parts run (the modules now loaded, the devices it
// created); the device parts of one device share one DeviceRun, which
// collects what each adds, and many devices run at once.
type HostPart interface {
	Part
	ApplyHost(ctx context.Context, run *HostRun) Result
}

// HostRun is what a host part sees of one pass; it is the pass's
// WriteGuard for the part.
type HostRun struct {
	Policy *config.Policy
	// Devices is every device known after this pass's reads, sorted by
	// name; parts read them and must not change them. Early parts see the
	// devices known before the pass.
	Devices []*host.Device
	// Forced is set on passes asked for explicitly (start, reload,
	// Reconcile): parts retry what they gave up on.
	Forced bool

	guard WriteGuard // nil: every write is allowed
}

// Hold implements WriteGuard.
func (p *HostRun) Hold(s Subject, st *Setting, want Value, src config.Position) (RecordState, error) {
	if p.guard == nil {
		return Differs, nil
	}
	return p.guard.Hold(s, st, want, src)
}

// ReadOnly implements WriteGuard.
func (p *HostRun) ReadOnly() bool { return p.guard != nil && p.guard.ReadOnly() }

// Backoff implements BackoffGuard.
func (p *HostRun) Backoff(s Subject, st *Setting, want Value, src config.Position) (Record, bool) {
	if br, ok := p.guard.(BackoffGuard); ok {
		return br.Backoff(s, st, want, src)
	}
	return Record{}, false
}

// Result is what a host part did and the facts it established.
type Result struct {
	Actions []Action
	// Records are the part's settings as the pass left them.
	Records []Record
	// Modules lists the listed kernel modules now present (the modules
	// part); nil from every other part.
	Modules []string
	// Created names the RDMA devices the part created (the links part);
	// the same pass reads and configures them.
	Created []string
}

// DevicePart is a concern applied to one device at a time (RoCE, VPI,
// QoS). It may run for several devices at once. It reports port-level
// actions and records with PortSubject, adding them to the device's run
// (HostPart says why the shapes differ).
type DevicePart interface {
	Part
	ApplyDevice(ctx context.Context, run *DeviceRun)
}

// DeviceRun is one device's turn in a pass, and the pass's WriteGuard for
// its parts: what the device parts read,
// and where they put what they did. The parts of one device run one after
// the other on it.
type DeviceRun struct {
	Policy *config.Policy
	Device *host.Device
	// Publish is set when the daemon publishes the state: parts also
	// record the kernel's value of the settings no rule declares.
	Publish bool

	guard   WriteGuard
	Actions []Action
	Records []Record
}

// NewDeviceRun is a run of the device parts on dev under pol, writing
// freely (tests, tools); the reconciler makes its own.
func NewDeviceRun(pol *config.Policy, dev *host.Device) *DeviceRun {
	return &DeviceRun{Policy: pol, Device: dev}
}

// RunDevice runs one device part on dev under pol, writing freely, and
// returns its run (tests, tools; the reconciler runs every part on a
// device in one run).
func RunDevice(ctx context.Context, p DevicePart, pol *config.Policy, dev *host.Device) *DeviceRun {
	run := NewDeviceRun(pol, dev)
	p.ApplyDevice(ctx, run)
	return run
}

// Guard makes g decide which writes the run may make (tests, tools);
// the reconciler sets its own.
func (r *DeviceRun) Guard(g WriteGuard) { r.guard = g }

// Hold implements WriteGuard.
func (r *DeviceRun) Hold(s Subject, st *Setting, want Value, src config.Position) (RecordState, error) {
	if r.guard == nil {
		return Differs, nil
	}
	return r.guard.Hold(s, st, want, src)
}

// ReadOnly implements WriteGuard.
func (r *DeviceRun) ReadOnly() bool { return r.guard != nil && r.guard.ReadOnly() }

// Backoff implements BackoffGuard.
func (r *DeviceRun) Backoff(s Subject, st *Setting, want Value, src config.Position) (Record, bool) {
	if br, ok := r.guard.(BackoffGuard); ok {
		return br.Backoff(s, st, want, src)
	}
	return Record{}, false
}

// Add records an action and the record it leaves.
func (r *DeviceRun) Add(a Action, rec Record) {
	r.Actions = append(r.Actions, a)
	r.Records = append(r.Records, rec)
}

// Act records an action that sets no setting (making a directory).
func (r *DeviceRun) Act(a Action) { r.Actions = append(r.Actions, a) }

// Record records a setting's record without an action (a value observed).
func (r *DeviceRun) Record(rec Record) { r.Records = append(r.Records, rec) }

// Preloader is a part that can prepare, before any device needs it, what
// the policy will need (a kernel module): the service calls it in the
// background at start and after a policy change, never within a pass.
// loaded says whether it had anything to do.
type Preloader interface {
	Preload(ctx context.Context, pol *config.Policy) (loaded bool, err error)
}

// DeviceRecreator is a device part whose changes can make the kernel
// unregister and register the device again (an mlx4 port type switch):
// after such a change the reconciler looks whether the device is still
// there rather than publish a device about to vanish.
type DeviceRecreator interface {
	RecreatesDevice(a Action) bool
}
