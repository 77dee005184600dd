package bus_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdmad/rdmad/daemon/bus"
	"github.com/rdmad/rdmad/dbusapi"
	"github.com/rdmad/rdmad/dbusapi/client"
)

// reportProbe holds every Describe and Diagnose inside its report slot
// until released (releaseOne lets one go, open all), counting how many
// are inside at once.
type reportProbe struct {
	inside, most atomic.Int32
	release      chan struct{}
	once         sync.Once
}

func newReportProbe(t *testing.T, srv *bus.Server) *reportProbe {
	p := &reportProbe{release: make(chan struct{})}
	srv.InReportForTest(func() {
		n := p.inside.Add(1)
		for m := p.most.Load(); n > m && !p.most.CompareAndSwap(m, n); m = p.most.Load() {
		}
		<-p.release
		p.inside.Add(-1)
	})
	t.Cleanup(p.open) // a failed test must not leave calls blocked
	return p
}

func (p *reportProbe) open() { p.once.Do(func() { close(p.release) }) }

// releaseOne lets one call inside a slot go on.
func (p *reportProbe) releaseOne(t *testing.T) {
	t.Helper()
	select {
	case p.release <- struct{}{}:
	case <-time.After(30 * time.Second):
		t.Fatal("no call inside a report slot to release")
	}
}

// callContext bounds a test's calls only so that a broken gate fails the
// test rather than hang it (a failure guard, as in until, not a speed
// limit; longer than the minute-long waits below).
func callContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// reportClients connects n clients before any call starts, so that no
// step of a test waits behind a connection being set up.
func reportClients(t *testing.T, e *testEnv, n int) []*client.Client {
	t.Helper()
	cs := make([]*client.Client, n)
	for i := range cs {
		c, err := client.Connect(e.addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		cs[i] = c
	}
	return cs
}

// until polls cond (the state of calls in flight, not a duration).
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Describe and Diagnose from many connections at once: no more than
// ReportSlots build a report at a time, the others wait for a slot, and
// every call is answered.
func TestReportCallsAreBounded(t *testing.T) {
	e := newEnv(t, "mlx5", mlx5Config)
	// The production bound, with a wait no loaded machine runs out of:
	// this test is about the bound, not the wait.
	e.d.srv.SetReportLimitsForTest(bus.ReportSlots, 64, time.Minute)
	probe := newReportProbe(t, e.d.srv)
	const conns, perConn = 6, 2 // 12 calls, 3 times the slots
	calls := conns * perConn
	errs := make(chan error, calls)
	ctx := callContext(t)
	for _, c := range reportClients(t, e, conns) {
		go func() { _, err := c.Describe(ctx); errs <- err }()
		go func() { _, err := c.Diagnose(ctx); errs <- err }()
	}
	until(t, "every call is inside or waiting", func() bool {
		if n := probe.most.Load(); n > bus.ReportSlots {
			t.Fatalf("%d reports built at once; the bound is %d", n, bus.ReportSlots)
		}
		return int(probe.inside.Load()) == bus.ReportSlots && e.d.srv.ReportsWaitingForTest() == calls-bus.ReportSlots
	})
	probe.open()
	for range calls {
		if err := <-errs; err != nil {
			t.Errorf("call: %v", err)
		}
	}
	if n := probe.most.Load(); n != bus.ReportSlots {
		t.Errorf("at most %d reports at once, want the bound %d", n, bus.ReportSlots)
	}
}

// When every slot is held, a call waits for one, as sd-bus queues calls,
// and is served once a slot frees. The wait is a minute, so only a freed
// slot can end it.
func TestReportCallBeyondTheSlotsWaitsForOne(t *testing.T) {
	e := newEnv(t, "mlx5", mlx5Config)
	ctx := callContext(t)
	e.d.srv.SetReportLimitsForTest(1, 1, time.Minute)
	probe := newReportProbe(t, e.d.srv)
	c := reportClients(t, e, 2)
	holding, waiting := make(chan error, 1), make(chan error, 1)
	go func() { _, err := c[0].Describe(ctx); holding <- err }()
	until(t, "the first call holds the slot", func() bool { return probe.inside.Load() == 1 })
	go func() { _, err := c[1].Diagnose(ctx); waiting <- err }()
	until(t, "the second call waits", func() bool { return e.d.srv.ReportsWaitingForTest() == 1 })
	select {
	case err := <-waiting:
		t.Fatalf("the call beyond the slot was answered while the slot was held: %v", err)
	default:
	}
	probe.releaseOne(t)
	if err := <-holding; err != nil {
		t.Errorf("the call holding the slot: %v", err)
	}
	// No longer waiting and one call inside: the waiting call took the slot.
	until(t, "the waiting call takes the freed slot", func() bool {
		return e.d.srv.ReportsWaitingForTest() == 0 && probe.inside.Load() == 1
	})
	probe.releaseOne(t)
	if err := <-waiting; err != nil {
		t.Errorf("the call that waited for the slot: %v", err)
	}
	if n := probe.most.Load(); n != 1 {
		t.Errorf("%d reports built at once with one slot", n)
	}
}

// A call waits for a slot only so long; then it fails with
// org.rdmad1.Error.Busy saying how long it waited (rather than the
// client's NoReply), stops counting as waiting, and the gate still serves
// calls once the slot frees. The slot is held until the end, so only the
// wait running out can answer the call.
func TestReportCallThatWaitsTooLongIsBusy(t *testing.T) {
	e := newEnv(t, "mlx5", mlx5Config)
	ctx := callContext(t)
	e.d.srv.SetReportLimitsForTest(1, 1, 100*time.Millisecond)
	probe := newReportProbe(t, e.d.srv)
	c := reportClients(t, e, 3)
	holding := make(chan error, 1)
	go func() { _, err := c[0].Describe(ctx); holding <- err }()
	until(t, "the first call holds the slot", func() bool { return probe.inside.Load() == 1 })

	_, err := c[1].Diagnose(ctx)
	if client.ErrorName(err) != dbusapi.ErrBusy || !strings.Contains(client.ErrorMessage(err), "waited 100ms") {
		t.Errorf("a call that waited past the limit: %v", err)
	}
	if n := e.d.srv.ReportsWaitingForTest(); n != 0 {
		t.Errorf("%d calls still counted as waiting after the wait ran out", n)
	}
	probe.open()
	if err := <-holding; err != nil {
		t.Errorf("the call holding the slot: %v", err)
	}
	if _, err := c[2].Diagnose(ctx); err != nil {
		t.Errorf("a call once the slot is free: %v", err)
	}
}

// Beyond the waiters a call fails with org.rdmad1.Error.Busy at once,
// saying why, and the calls already in are answered. The wait is a
// minute, so a Busy naming the waiters can only be the immediate refusal.
func TestReportCallsBeyondTheWaitersAreBusy(t *testing.T) {
	e := newEnv(t, "mlx5", mlx5Config)
	ctx := callContext(t)
	e.d.srv.SetReportLimitsForTest(1, 1, time.Minute)
	probe := newReportProbe(t, e.d.srv)
	c := reportClients(t, e, 3)
	holding, waiting := make(chan error, 1), make(chan error, 1)
	go func() { _, err := c[0].Describe(ctx); holding <- err }()
	until(t, "the first call holds the slot", func() bool { return probe.inside.Load() == 1 })
	go func() { _, err := c[1].Diagnose(ctx); waiting <- err }()
	until(t, "the second call waits", func() bool { return e.d.srv.ReportsWaitingForTest() == 1 })

	_, err := c[2].Describe(ctx)
	if client.ErrorName(err) != dbusapi.ErrBusy || !strings.Contains(client.ErrorMessage(err), "calls wait") {
		t.Errorf("a call beyond the waiters: %v", err)
	}
	if n := e.d.srv.ReportsWaitingForTest(); n != 1 {
		t.Errorf("%d calls waiting after the refusal, want the one already waiting", n)
	}
	probe.open()
	if err := <-holding; err != nil {
		t.Errorf("the call holding the slot: %v", err)
	}
	if err := <-waiting; err != nil {
		t.Errorf("the call that waited for the slot: %v", err)
	}
}
