package service

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/rdmad/rdmad/daemon/audit"
)

// Work is what the queue hands to a pass: what to look at again, gathered
// from every request since the last pass.
type Work struct {
	Full    bool             // everything
	Forced  bool             // asked for explicitly: parts retry what they gave up on
	Devices map[string][]int // by name; nil ports: the whole device
	Netdevs []string         // RDMA devices on these netdevs
	// StateNetdevs are netdevs whose link state or carrier changed: their
	// RDMA devices are read whole, but not as arrivals (reconcile.Scope.Refresh).
	StateNetdevs []string
	// Recheck are devices whose declared settings are read again from the
	// cached device (reconcile.Scope.Recheck): an event says one may have
	// changed behind rdmad's back.
	Recheck map[string]bool
	// RecheckNetdevs are netdevs whose RDMA devices are rechecked (a DCB
	// notification names the netdev).
	RecheckNetdevs []string
	// RecheckHost: a file rdmad writes may have changed (the host parts
	// run in every pass; this marks the pass a recheck).
	RecheckHost bool
	Verify      bool // the periodic read-back
	// Cause is who asked for the work (a reload by signal), named on the
	// log lines of its pass; nil: events asked. The first cause stays.
	Cause *audit.Caller
}

// Empty reports whether w asks only for the host-wide parts.
func (w Work) Empty() bool {
	return !w.Full && len(w.Devices) == 0 && len(w.Netdevs) == 0 && len(w.StateNetdevs) == 0 && len(w.Recheck) == 0 && len(w.RecheckNetdevs) == 0
}

// Queue coalesces requests: while a pass runs, any number of requests
// collapse into one pending Work, so a burst of 500 uevents costs one or
// two passes. It is level-triggered: a request only says what to re-read,
// never what the state is. A short settle time after the first request
// lets the events of one change (a uevent and its RDMA netlink monitor
// message, the two ends of a veth pair) arrive before the pass starts.
type Queue struct {
	run    func(ctx context.Context, w Work)
	settle time.Duration
	// after is the settle timer: time.After, a fake clock in tests (since
	// Go 1.23 an unfired time.After timer is collected with its channel).
	after func(time.Duration) <-chan time.Time

	mu      sync.Mutex
	pending Work
	queued  bool // pending holds a request (possibly the host-only one)
	busy    bool
	wake    chan struct{}
	idle    *sync.Cond
	// probes are answered by the work loop itself, between two works or
	// while it waits for one: the watchdog's proof that the loop turns.
	probes chan chan struct{}
}

// NewQueue returns a queue that hands coalesced work to run.
func NewQueue(settle time.Duration, run func(ctx context.Context, w Work)) *Queue {
	q := &Queue{run: run, settle: settle, after: time.After, wake: make(chan struct{}, 1), probes: make(chan chan struct{})}
	q.idle = sync.NewCond(&q.mu)
	return q
}

func (q *Queue) add(edit func(w *Work)) {
	q.mu.Lock()
	edit(&q.pending)
	q.queued = true
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// All asks for a full pass; forced for one asked for explicitly.
func (q *Queue) All(forced bool) { q.AllFor(forced, nil) }

// AllFor is All asked by cause (nil: by an event).
func (q *Queue) AllFor(forced bool, cause *audit.Caller) {
	q.add(func(w *Work) {
		w.Full = true
		w.Forced = w.Forced || forced
		if w.Cause == nil {
			w.Cause = cause
		}
	})
}

// Device asks for one device to be read again.
func (q *Queue) Device(name string) {
	q.add(func(w *Work) {
		if w.Devices == nil {
			w.Devices = map[string][]int{}
		}
		w.Devices[name] = nil
	})
}

// Netdev asks for the RDMA devices on a netdev to be read again (and the
// host-wide parts, which create soft links on it, to run).
func (q *Queue) Netdev(name string) {
	q.add(func(w *Work) {
		// A flapping netdev sends many events before a pass takes them:
		// they ask for the same thing once.
		if !slices.Contains(w.Netdevs, name) {
			w.Netdevs = append(w.Netdevs, name)
		}
	})
}

// NetdevState asks for the RDMA devices on a netdev to be read again after
// a change of its link state or carrier (not an arrival).
func (q *Queue) NetdevState(name string) {
	q.add(func(w *Work) {
		if !slices.Contains(w.StateNetdevs, name) {
			w.StateNetdevs = append(w.StateNetdevs, name)
		}
	})
}

// Recheck asks for the declared settings of devices to be read again.
// verify marks the periodic read-back.
func (q *Queue) Recheck(names []string, verify bool) {
	q.add(func(w *Work) {
		if w.Recheck == nil {
			w.Recheck = map[string]bool{}
		}
		for _, n := range names {
			w.Recheck[n] = true
		}
		w.Verify = w.Verify || verify
	})
}

// RecheckNetdev asks for the declared settings of the RDMA devices on a
// netdev to be read again.
func (q *Queue) RecheckNetdev(name string) {
	q.add(func(w *Work) {
		if !slices.Contains(w.RecheckNetdevs, name) {
			w.RecheckNetdevs = append(w.RecheckNetdevs, name)
		}
	})
}

// RecheckHost asks for the host-wide settings to be read again.
func (q *Queue) RecheckHost() { q.add(func(w *Work) { w.RecheckHost = true }) }

// Host asks for the host-wide parts only (a background module load ended).
func (q *Queue) Host() { q.add(func(*Work) {}) }

// Run takes pending work until ctx ends.
func (q *Queue) Run(ctx context.Context) {
	defer func() {
		q.mu.Lock()
		q.busy = false
		q.idle.Broadcast()
		q.mu.Unlock()
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case reply := <-q.probes:
			close(reply)
			continue
		case <-q.wake:
		}
		q.mu.Lock()
		q.busy = true
		q.mu.Unlock()
		if q.settle > 0 && !q.wait(ctx) {
			return
		}
		// Requests made during the settle are taken below: their wake-up
		// must not start another, empty, settle afterwards.
		select {
		case <-q.wake:
		default:
		}
		for {
			w, ok := q.take()
			if !ok {
				break
			}
			q.run(ctx, w)
			q.answerProbe()
		}
	}
}

// answerProbe answers a probe waiting now, if any, without waiting for one.
func (q *Queue) answerProbe() {
	select {
	case reply := <-q.probes:
		close(reply)
	default:
	}
}

// Turning reports whether the work loop answers within d: it does while it
// waits for work and between two works, not while a work runs or when it
// is wedged (a deadlock in the queue, a part that never returns).
func (q *Queue) Turning(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	reply := make(chan struct{})
	select {
	case q.probes <- reply:
	case <-t.C:
		return false
	case <-ctx.Done():
		return false
	}
	<-reply // closed by the loop as it takes the probe
	return true
}

func (q *Queue) wait(ctx context.Context) bool {
	select {
	case <-ctx.Done():
		return false
	case <-q.after(q.settle):
		return true
	}
}

// take removes everything pending; a full pass subsumes device passes.
func (q *Queue) take() (Work, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.queued {
		q.busy = false
		q.idle.Broadcast()
		return Work{}, false
	}
	w := q.pending
	q.pending, q.queued = Work{}, false
	if w.Full {
		w.Devices, w.Netdevs, w.StateNetdevs = nil, nil, nil
		// A full pass reads every device: a verify is done with it.
		w.Recheck, w.RecheckNetdevs = nil, nil
	}
	return w, true
}

// Idle blocks until nothing is pending or running, or ctx ends.
func (q *Queue) Idle(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() {
		q.mu.Lock()
		q.idle.Broadcast()
		q.mu.Unlock()
	})
	defer stop()
	q.mu.Lock()
	defer q.mu.Unlock()
	for q.busy || q.queued {
		if err := ctx.Err(); err != nil {
			return err
		}
		q.idle.Wait()
	}
	return nil
}
