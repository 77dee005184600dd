// Package reconcile is rdmad's one level-triggered reconciler: it compares
// the declared policy with what the host shows and runs idempotent actions.
// Events never carry state; they only say what to look at again. The
// observed state is kept per device, so a pass re-reads only what its
// scope names: the cost of one event does not grow with the host.
//
// The files: reconcile.go builds the reconciler and hands an action back
// to its part (Undo); part.go is the contract with the parts; setting.go
// the settings and their records; pass.go runs a pass; store.go keeps the
// observed state and answers queries on it; refresh.go re-reads port
// states; report.go is what a pass did and what a call learns from it.
package reconcile

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"time"

	"github.com/rdmad/rdmad/daemon/host"
)

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
	// Now is the clock of the contest rule (nil: time.Now; tests).
	Now func() time.Time
	// Found keeps the values rdmad found before its first change to each
	// setting, and puts them back when the setting is no longer declared
	// (found.go); nil: neither (rdmad --once, tests).
	Found *Found
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
	hostRecs  []Record
	last      time.Time
	drift     *drift
	failures  *failureWindows // the failed lines of each subject and kind (failures.go)
	tally     tally           // corrections by setting and subject
	found     *Found
	listeners []func(Change)
	// departed are the devices gone since rdmad started, by identity
	// (DeviceIdentity); under stateMu.
	departed map[string]Departed

	holdMu sync.Mutex
	holds  map[holdKey]Hold // holds.go
}

// New returns a Reconciler that knows no device yet. It panics when two
// parts report the same kind or keep the same setting: a wiring mistake.
func New(o Options) *Reconciler {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Workers <= 0 {
		o.Workers = min(16, max(2, 2*runtime.GOMAXPROCS(0)))
	}
	r := &Reconciler{
		host: o.Host, log: o.Log,
		early: o.Early, hostParts: o.HostParts, deviceParts: o.DeviceParts,
		detail: o.Detail, workers: o.Workers, owners: map[Kind]Part{},
		devices: map[string]*DeviceState{}, failing: map[string]bool{}, drift: newDrift(), found: o.Found, failures: newFailureWindows(),
	}
	if o.Now != nil {
		r.drift.now = o.Now
	}
	settings := map[string]Part{}
	for _, p := range r.parts() {
		for _, k := range p.Kinds() {
			if other, dup := r.owners[k]; dup && other != p {
				panic(fmt.Sprintf("reconcile: two parts (%T, %T) report kind %q", other, p, k))
			}
			r.owners[k] = p
		}
		for _, s := range p.Settings() {
			if other, dup := settings[s.Name]; dup && other != p {
				panic(fmt.Sprintf("reconcile: two parts (%T, %T) keep setting %q", other, p, s.Name))
			}
			settings[s.Name] = p
		}
	}
	return r
}

// parts lists every part in the order a pass runs them.
func (r *Reconciler) parts() []Part {
	var out []Part
	for _, p := range r.early {
		out = append(out, p)
	}
	for _, p := range r.hostParts {
		out = append(out, p)
	}
	for _, p := range r.deviceParts {
		out = append(out, p)
	}
	return out
}

// Settings lists the settings every part keeps, in part order.
func (r *Reconciler) Settings() []*Setting {
	var out []*Setting
	for _, p := range r.parts() {
		out = append(out, p.Settings()...)
	}
	return out
}

// Preloaders are the parts that implement Preloader.
func (r *Reconciler) Preloaders() []Preloader {
	var out []Preloader
	for _, p := range r.parts() {
		if pl, ok := p.(Preloader); ok {
			out = append(out, pl)
		}
	}
	return out
}

// Undo asks the part that reported a to put back what a changed. Only a
// Changed action can be undone; it runs between passes, never during one.
// Its error names the action (`put back mlx5_0/1 qos pfc "[0]": ...`).
// The observed state is not updated: the caller runs a pass afterwards
// (the service's rollback does), which reads what the undo left.
func (r *Reconciler) Undo(ctx context.Context, a Action) error {
	if a.Status != Changed {
		return fmt.Errorf("put back %s %s: only a changed action can be undone, this one is %s", a.Subject, a.Kind, a.Status)
	}
	p, ok := r.owners[a.Kind]
	if !ok {
		return fmt.Errorf("put back %s %s: no part reports this kind", a.Subject, a.Kind)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := p.Undo(ctx, a); err != nil {
		return fmt.Errorf("put back %s %s %q: %w", a.Subject, a.Kind, a.From, err)
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

func (r *Reconciler) notify(ch Change) {
	r.stateMu.RLock()
	ls := append([]func(Change){}, r.listeners...)
	r.stateMu.RUnlock()
	for _, fn := range ls {
		fn(ch)
	}
}
