package main

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"
)

type fakePasses struct {
	mu      sync.Mutex
	since   time.Time
	running bool
	wedged  bool // the work loop does not answer
}

func (f *fakePasses) WorkLoopTurning(context.Context, time.Duration) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return !f.wedged
}

func (f *fakePasses) OldestPass() (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.since, f.running
}

func (f *fakePasses) set(since time.Time, running bool) {
	f.mu.Lock()
	f.since, f.running = since, running
	f.mu.Unlock()
}

// The watchdog pings on idle ticks and after passes, stops once one pass
// has run longer than half the interval (a stuck pass then trips systemd's
// watchdog), and pings again when it ends.
func TestWatchdogStopsPingingWhileAPassIsStuck(t *testing.T) {
	now := time.Unix(1000, 0)
	clock := func() time.Time { return now }
	passes := &fakePasses{}
	pings := make(chan struct{}, 100)
	w := &watchdog{interval: 60 * time.Second, passes: passes, now: clock,
		notify: func() { pings <- struct{}{} }, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	pinged := func() bool {
		select {
		case <-pings:
			return true
		default:
			return false
		}
	}

	if !w.check() || !pinged() {
		t.Fatal("no ping on an idle tick")
	}
	passes.set(now, true) // a pass starts
	now = now.Add(29 * time.Second)
	if !w.check() || !pinged() {
		t.Fatal("no ping while a pass has run 29 s of a 60 s watchdog")
	}
	for i := 0; i < 6; i++ { // 31 s, then on: over half the interval
		now = now.Add(2*time.Second + time.Duration(i)*15*time.Second)
		if w.check() || pinged() {
			t.Fatalf("a pass stuck for %s still got a ping", now.Sub(time.Unix(1000, 0)))
		}
	}
	passes.set(time.Time{}, false) // it ends
	if !w.check() || !pinged() {
		t.Fatal("no ping after the stuck pass ended")
	}

	// The loop: a tick and the end of a pass each make a check.
	ticks := make(chan time.Time)
	done := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.run(ctx, ticks, done)
	ticks <- now
	<-pings
	done <- struct{}{}
	<-pings

	// A work loop that does not answer (a deadlock outside any pass):
	// ticks ping no more; the next one it answers pings again.
	passes.mu.Lock()
	passes.wedged = true
	passes.mu.Unlock()
	for i := 0; i < 3; i++ {
		ticks <- now
	}
	ticks <- now // taken only once the one before it was handled
	if pinged() {
		t.Fatal("a tick the work loop did not answer pinged")
	}
	passes.mu.Lock()
	passes.wedged = false
	passes.mu.Unlock()
	ticks <- now
	<-pings
}
