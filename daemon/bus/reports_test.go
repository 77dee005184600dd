package bus_test

import (
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
// until released, counting how many are inside at once.
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
	probe := newReportProbe(t, e.d.srv)
	const conns, perConn = 6, 2 // 12 calls, 3 times the slots
	calls := conns * perConn
	errs := make(chan error, calls)
	for range conns {
		c, err := client.Connect(e.addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		go func() { _, err := c.Describe(t.Context()); errs <- err }()
		go func() { _, err := c.Diagnose(t.Context()); errs <- err }()
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

// When every slot is held, a call waits for one only so long and only
// while few others wait; otherwise it fails with org.rdmad1.Error.Busy
// saying why, and the calls already in are answered.
func TestReportCallsBeyondTheWaitAreBusy(t *testing.T) {
	e := newEnv(t, "mlx5", mlx5Config)
	e.d.srv.SetReportLimitsForTest(1, 1, time.Second)
	probe := newReportProbe(t, e.d.srv)
	connect := func() *client.Client {
		c, err := client.Connect(e.addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	inside, waiting := make(chan error, 1), make(chan error, 1)
	go func() { _, err := connect().Describe(t.Context()); inside <- err }()
	until(t, "the first call holds the slot", func() bool { return probe.inside.Load() == 1 })
	go func() { _, err := connect().Diagnose(t.Context()); waiting <- err }()
	until(t, "the second call waits", func() bool { return e.d.srv.ReportsWaitingForTest() == 1 })

	_, err := connect().Describe(t.Context())
	if client.ErrorName(err) != dbusapi.ErrBusy || !strings.Contains(client.ErrorMessage(err), "calls wait") {
		t.Errorf("a call beyond the waiters: %v", err)
	}
	err = <-waiting
	if client.ErrorName(err) != dbusapi.ErrBusy || !strings.Contains(client.ErrorMessage(err), "waited 1s") {
		t.Errorf("a call that waited past the limit: %v", err)
	}
	probe.open()
	if err := <-inside; err != nil {
		t.Errorf("the call holding the slot: %v", err)
	}
	if _, err := connect().Diagnose(t.Context()); err != nil {
		t.Errorf("a call once the slot is free: %v", err)
	}
}
