package main

import (
	"context"
	"log/slog"
	"time"
)

// passWatch says since when the oldest pass under way has run
// (*service.Service).
type passWatch interface {
	OldestPass() (since time.Time, running bool)
}

// watchdog sends WATCHDOG=1 (systemd's WatchdogSec=) on every tick of the
// idle work loop and after every pass, unless a pass has run longer than
// half the interval: then it stays silent, so a wedged pass (a kernel call
// that never returns, a deadlock) makes systemd restart rdmad rather than
// leave it answering the bus while it reconciles nothing.
type watchdog struct {
	interval time.Duration
	passes   passWatch
	now      func() time.Time
	notify   func()
	log      *slog.Logger
	stuck    bool
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

// run checks on every tick and after every pass until ctx ends.
func (w *watchdog) run(ctx context.Context, ticks <-chan time.Time, passDone <-chan struct{}) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticks:
		case <-passDone:
		}
		w.check()
	}
}
