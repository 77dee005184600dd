package main

import (
	"context"
	"log/slog"
	"time"
)

// passWatch says since when the oldest pass under way has run, and whether
// the work loop turns (*service.Service).
type passWatch interface {
	OldestPass() (since time.Time, running bool)
	WorkLoopTurning(ctx context.Context, within time.Duration) bool
}

// watchdog sends WATCHDOG=1 (systemd's WatchdogSec=) on every tick that the
// work loop itself answers (idle, or between two works) and after every
// pass, unless a pass has run longer than half the interval: then it stays
// silent, so a wedged pass (a kernel call that never returns) or a wedged
// loop (a deadlock outside any pass) makes systemd restart rdmad rather
// than leave it answering the bus while it reconciles nothing.
type watchdog struct {
	interval time.Duration
	passes   passWatch
	now      func() time.Time
	notify   func()
	log      *slog.Logger
	stuck    bool
	silent   bool // the work loop did not answer the last tick
}

// check pings unless a pass is stuck; it reports whether it pinged.
func (w *watchdog) check() bool {
	since, running := w.passes.OldestPass()
	if running && w.now().Sub(since) > w.interval/2 {
		if !w.stuck {
			w.log.Error("a pass has run longer than half the watchdog interval; no longer telling systemd rdmad is alive",
				"running", w.now().Sub(since).Round(time.Second), "watchdog", w.interval)
			w.stuck = true
		}
		return false
	}
	if w.stuck {
		w.log.Warn("the pass that ran too long has ended; telling systemd rdmad is alive again")
		w.stuck = false
	}
	w.notify()
	return true
}

// run checks after every pass, and on every tick once the work loop has
// answered (within a quarter interval), until ctx ends.
func (w *watchdog) run(ctx context.Context, ticks <-chan time.Time, passDone <-chan struct{}) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticks:
			if !w.passes.WorkLoopTurning(ctx, w.interval/4) {
				if !w.silent && ctx.Err() == nil {
					w.log.Warn("the work loop does not answer; not telling systemd rdmad is alive until it does", "watchdog", w.interval)
				}
				w.silent = true
				continue
			}
			w.silent = false
		case <-passDone:
		}
		w.check()
	}
}
