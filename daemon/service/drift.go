package service

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/rdmad/rdmad/daemon/reconcile"
)

// Out-of-band changes: an event says where a setting may have changed (a
// watched directory, a DCB notification), the service asks for its
// declared settings to be read again (a recheck), and the reconciler
// decides from what it reads ([drift] action: correct or report). What
// the kernel announces nothing about is found by the verify read-back,
// every [drift] verify_interval.

// RecheckNetdev asks for the declared settings of the RDMA devices on a
// netdev to be read again (a DCB notification names it).
func (s *Service) RecheckNetdev(name string) { s.queue.RecheckNetdev(name) }

// DirSetter keeps a set of directories watched (events.DirWatcher): when
// Set returns, the directories it can watch are watched.
type DirSetter interface{ Set(dirs []string) }

// watches is which directories the records ask to watch
// (reconcile.Record.Watch), by device and for the host-wide settings, kept
// up to date off the pass: the reconciler's listener only marks.
type watches struct {
	mu       sync.Mutex
	setter   DirSetter
	dirty    map[string]bool // devices to look at again
	all      bool
	byDevice map[string][]string // absolute directories
	host     []string
	// byDir is byDevice turned round (and hostDir host as a set), rebuilt
	// with the watch set: a directory's change finds its devices at once
	// (at start every new watch reports one, at 1,024 devices 2,048 of them).
	byDir   map[string][]string
	hostDir map[string]bool
	wake    chan struct{}
	syncMu  sync.Mutex // one sync at a time: the loop's or Settle's
}

// WatchDirs has w watch the directories of the declared settings, and
// DirChanged say which changed. Call it before Run.
func (s *Service) WatchDirs(w DirSetter) {
	s.watch = &watches{setter: w, dirty: map[string]bool{}, all: true, byDevice: map[string][]string{}, wake: make(chan struct{}, 1)}
	s.watch.wake <- struct{}{} // the state of the passes run before Run
	s.rec.OnChange(func(ch reconcile.Change) {
		s.watch.mu.Lock()
		if ch.Full {
			s.watch.all = true
		}
		for _, n := range ch.Updated {
			s.watch.dirty[n] = true
		}
		for _, n := range ch.Removed {
			s.watch.dirty[n] = true
		}
		s.watch.mu.Unlock()
		select {
		case s.watch.wake <- struct{}{}:
		default:
		}
	})
}

// syncWatches keeps the watched directories those the records name, until
// ctx ends.
func (s *Service) syncWatches(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.watch.wake:
		}
		s.syncWatchesNow()
	}
}

// syncWatchesNow brings the watched directories up to the marks made so
// far: when it returns, the directories are watched and those watched
// anew have asked for their settings to be read again (events.DirWatcher).
func (s *Service) syncWatchesNow() {
	w := s.watch
	w.syncMu.Lock()
	defer w.syncMu.Unlock()
	w.mu.Lock()
	dirty, all := w.dirty, w.all
	w.dirty, w.all = map[string]bool{}, false
	w.mu.Unlock()
	sum := s.rec.Summary()
	var names []string
	if all {
		names = sum.Devices
	} else {
		for n := range dirty {
			names = append(names, n)
		}
	}
	// The directories alone, not a copy of each device's state: at
	// 1,024 devices that copy was megabytes of garbage right after start.
	next := s.rec.Watches(names)
	host := s.absolute(reconcile.WatchedDirs(nil, sum.HostRecords))
	// What is in a contest's back-off is not watched: the other manager
	// may write thousands of times a second, and every write would be an
	// event to read. The verify loop reads it again every
	// reconcile.ContestReadInterval instead, and the pass that ends the
	// back-off (its record changes) has it watched again.
	backedOff, hostBackedOff := s.rec.BackedOff()
	for _, n := range backedOff {
		if _, ok := next[n]; ok {
			next[n] = nil
		}
	}
	if hostBackedOff {
		host = nil
	}
	w.mu.Lock()
	if all {
		w.byDevice = map[string][]string{}
	}
	for _, n := range names {
		if dirs := next[n]; len(dirs) > 0 {
			w.byDevice[n] = s.absolute(dirs)
		} else {
			delete(w.byDevice, n)
		}
	}
	w.host = host
	for _, n := range backedOff {
		if _, ok := w.byDevice[n]; ok && !slices.Contains(names, n) {
			delete(w.byDevice, n) // not read again in this sync
		}
	}
	union := slices.Clone(host)
	w.byDir, w.hostDir = map[string][]string{}, make(map[string]bool, len(host))
	for _, d := range host {
		w.hostDir[d] = true
	}
	for n, dirs := range w.byDevice {
		union = append(union, dirs...)
		for _, d := range dirs {
			w.byDir[d] = append(w.byDir[d], n)
		}
	}
	w.mu.Unlock()
	w.setter.Set(union)
}

// Settle waits until the work the passes so far started is done, or ctx
// ends: the queue idle, the directories their records name watched, and
// the reads the new watches asked for done (a write between a pass's read
// and the watch is seen by them). The daemon settles before it hands the
// first pass's garbage back and takes its name: at 1,024 devices that
// work made megabytes of garbage, and made after the hand-back it grew the
// heap the runtime then kept.
func (s *Service) Settle(ctx context.Context) error {
	if err := s.Idle(ctx); err != nil {
		return err
	}
	if s.watch == nil {
		return nil
	}
	s.syncWatchesNow()
	return s.Idle(ctx)
}

// absolute turns directories relative to the host root into the paths the
// watcher is given, in place.
func (s *Service) absolute(dirs []string) []string {
	for i, d := range dirs {
		dirs[i] = s.host.Path(d)
	}
	return dirs
}

// DirChanged asks for the settings watched in dir to be read again.
func (s *Service) DirChanged(dir string) {
	if s.watch == nil {
		return
	}
	s.watch.mu.Lock()
	devices := slices.Clone(s.watch.byDir[dir])
	host := s.watch.hostDir[dir]
	s.watch.mu.Unlock()
	if len(devices) > 0 {
		s.queue.Recheck(devices, false)
	}
	if host {
		s.queue.RecheckHost()
	}
}

// verify runs the read-back every [drift] verify_interval of the policy
// in force (0: never), reads what is in a contest's back-off every
// reconcile.ContestReadInterval (its directories are not watched then),
// and reads the contested settings again when their back-off ends, until
// ctx ends. A policy change wakes it to read the interval again (the
// count runs on from the last read-back); a pass while a back-off runs
// wakes it to read NextRetry again (wakeForRetry).
func (s *Service) verify(ctx context.Context) {
	last := s.now()
	var polled time.Time
	// pending is the end of a back-off the loop last read and has not
	// acted on: a wake-up after that end (a pass, a policy change) reads
	// NextRetry again, which no longer lists it, and the setting, whose
	// directories are not watched during its back-off, would wait for the
	// next verify read-back, or forever with verify_interval = "0".
	var pending reconcile.Retry
	for {
		if !pending.At.IsZero() && !s.now().Before(pending.At) {
			if len(pending.Devices) > 0 {
				s.queue.Recheck(pending.Devices, false)
			}
			if pending.Host {
				s.queue.RecheckHost()
			}
			pending = reconcile.Retry{}
		}
		var timer <-chan time.Time
		var wait time.Duration = -1
		iv := s.PolicyInForce().Drift.VerifyInterval
		if iv > 0 {
			wait = last.Add(iv).Sub(s.now())
		}
		if retry := s.rec.NextRetry(); !retry.At.IsZero() {
			// Merged, not replaced: an end read before must not be lost
			// to one read now. A device rechecked early only has its
			// back-off's end read again next time round.
			if pending.At.IsZero() || retry.At.Before(pending.At) {
				pending.At = retry.At
			}
			for _, d := range retry.Devices {
				if !slices.Contains(pending.Devices, d) {
					pending.Devices = append(pending.Devices, d)
				}
			}
			pending.Host = pending.Host || retry.Host
		}
		s.retryAt.Store(unixNano(pending.At))
		if !pending.At.IsZero() && (wait < 0 || pending.At.Sub(s.now()) < wait) {
			wait = pending.At.Sub(s.now())
		}
		backedOff, hostBackedOff := s.rec.BackedOff()
		poll := len(backedOff) > 0 || hostBackedOff
		if poll {
			if w := max(time.Until(polled.Add(reconcile.ContestReadInterval)), 0); wait < 0 || w < wait {
				wait = w
			}
		}
		var t *time.Timer
		if wait >= 0 {
			t = time.NewTimer(max(wait, 0))
			timer = t.C
		}
		select {
		case <-ctx.Done():
			if t != nil {
				t.Stop()
			}
			return
		case <-s.verifyWake:
			if t != nil {
				t.Stop()
			}
			continue
		case <-timer:
		}
		now := s.now()
		if poll && !time.Now().Before(polled.Add(reconcile.ContestReadInterval)) {
			polled = time.Now()
			if len(backedOff) > 0 {
				s.queue.Recheck(backedOff, false)
			}
			if hostBackedOff {
				s.queue.RecheckHost()
			}
		}
		if iv := s.PolicyInForce().Drift.VerifyInterval; iv > 0 && !now.Before(last.Add(iv)) {
			last = now
			s.queue.Recheck(s.rec.Summary().Devices, true)
		}
		// An ended back-off is acted on at the top of the loop.
	}
}

// wakeForRetry wakes the verify loop after a pass while a back-off runs
// or when the pass ended the last one: the loop waits for the end it read
// last, and a pass may have started a contest or moved its end. Passes
// are rare while nothing changes, so the loop's timer is set again rarely.
func (s *Service) wakeForRetry() {
	if unixNano(s.rec.NextRetry().At) == 0 && s.retryAt.Load() == 0 {
		return
	}
	select {
	case s.verifyWake <- struct{}{}:
	default:
	}
}

// unixNano is t in nanoseconds since the epoch, 0 for the zero time.
func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}
