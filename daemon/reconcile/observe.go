package reconcile

import (
	"context"
	"errors"
	"fmt"

	"github.com/rdmad/rdmad/daemon/config"
)

// Observe reads every device under pol and has the parts judge every
// setting without writing anything and without changing the stored
// state: what doctor looks at on a host rdmad does not run on, and what a
// plan compares with the kernel. step, when not nil, is told each step of
// the read as it starts (a plan that runs out of time names it).
//
// It does not take the lock that serialises passes: a plan reads as much
// as a full pass (0.2 to 0.5 s at 1,024 devices, and without end when a driver
// does not answer a read), and passes must not wait for it. Nothing it
// shares with a pass is written in place: the cached devices are replaced
// by a commit, never changed (knownDevices, cachedDevice), the parts keep
// no state of a pass (or lock what they keep: a background module load),
// and the guard holds every write back, so neither found.json nor the
// contest rule is touched. A pass's writes may land while it reads: a
// plan says what the kernel held when it read.
func (r *Reconciler) Observe(ctx context.Context, pol *config.Policy, step func(string)) State {
	return r.observe(ctx, pol, readOnly{step: step})
}

// ObserveSerially is Observe one device at a time, on one goroutine: a
// plan (org.rdmad1.Manager.Plan, which any local user may ask for) takes
// at most one CPU, so the passes and calls beside it keep theirs.
func (r *Reconciler) ObserveSerially(ctx context.Context, pol *config.Policy, step func(string)) State {
	return r.observe(ctx, pol, readOnly{step: step, serial: true})
}

func (r *Reconciler) observe(ctx context.Context, pol *config.Policy, g readOnly) State {
	_, res := r.pass(ctx, pol, Scope{Full: true}, g)
	st := State{LastReconcile: res.at, HostActions: res.hostActs, HostRecords: res.hostRecs, Modules: res.modules}
	hostOnPorts := portRecords(res.hostRecs)
	for _, n := range sortedNames(res.working) {
		st.Devices = append(st.Devices, BuildDeviceState(*res.working[n], res.acts[n], append(res.recs[n], hostOnPorts[n]...)))
	}
	return st
}

// readOnly is the guard of Observe: nothing is written. step, when not
// nil, is told the steps of the pass; serial reads and judges one device
// at a time.
type readOnly struct {
	step   func(string)
	serial bool
}

// ErrReadOnly is why a setting was not written in a pass that only reads
// (Observe).
var ErrReadOnly = errors.New("not written: rdmad only reads here")

func (readOnly) Hold(Subject, *Setting, Value, config.Position) (RecordState, error) {
	return Differs, ErrReadOnly
}
func (readOnly) ReadOnly() bool { return true }

// stepTo tells a guard that wants to know (Observe's) which step of the
// pass starts.
func stepTo(g WriteGuard, format string, args ...any) {
	if ro, ok := g.(readOnly); ok && ro.step != nil {
		ro.step(fmt.Sprintf(format, args...))
	}
}
