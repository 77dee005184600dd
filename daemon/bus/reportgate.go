package bus

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/rdmad/rdmad/dbusapi"
)

// Describe and Diagnose each build a whole report (on a host with a
// thousand devices, megabytes), and both are open to every local user.
// godbus serves each call on a goroutine of its own, so without a bound a
// loop of calls from many connections builds as many reports at once as
// there are calls in flight. reportGate bounds them:
//
//   - reportSlots reports are built at a time; memory stays a few reports
//     whatever the callers do, and a slot is free again within one report.
//   - a call that finds no slot waits for one, as sd-bus and NetworkManager
//     queue calls behind their one main loop rather than refuse them: a
//     burst from rdmactl, a monitoring agent and an operator is served,
//     only later. It waits at most reportWait, well below the 25 s default
//     timeout of D-Bus clients, so a caller that cannot be served gets
//     org.rdmad1.Error.Busy saying why instead of NoReply.
//   - at most reportWaiters calls wait; beyond that a call fails with
//     org.rdmad1.Error.Busy at once, so a flood does not pile up goroutines
//     (each waiting call holds one) for reportWait each.
const (
	reportSlots   = 4
	reportWaiters = 64
	reportWait    = 10 * time.Second
)

type reportGate struct {
	slots   chan struct{}
	waiting atomic.Int32
	waiters int32
	wait    time.Duration
}

func newReportGate(slots, waiters int, wait time.Duration) *reportGate {
	return &reportGate{slots: make(chan struct{}, slots), waiters: int32(waiters), wait: wait}
}

// enter takes a slot for method, waiting for one as described above; the
// caller must call the returned release when its report is built.
func (g *reportGate) enter(method string) (release func(), _ *dbus.Error) {
	release = func() { <-g.slots }
	select {
	case g.slots <- struct{}{}:
		return release, nil
	default:
	}
	if g.waiting.Add(1) > g.waiters {
		g.waiting.Add(-1)
		return nil, busy(fmt.Sprintf("%s: %d reports are being built and %d calls wait for them; try again later", method, cap(g.slots), g.waiters))
	}
	defer g.waiting.Add(-1)
	ctx, cancel := context.WithTimeout(context.Background(), g.wait)
	defer cancel()
	select {
	case g.slots <- struct{}{}:
		return release, nil
	case <-ctx.Done():
		return nil, busy(fmt.Sprintf("%s: waited %s for one of the %d reports being built; try again later", method, g.wait, cap(g.slots)))
	}
}

// waitingCalls is how many calls wait for a slot (tests).
func (g *reportGate) waitingCalls() int { return int(g.waiting.Load()) }

// enterReport takes a report slot for msg's call of method on s's gate;
// the test hook runs while the slot is held.
func (s *Server) enterReport(msg dbus.Message, method string) (release func(), _ *dbus.Error) {
	leave, e := s.reports.Load().enter(method)
	if e != nil {
		s.refuse(msg, method, ReasonBusy, "report call refused", "err", e.Body[0])
		return nil, e
	}
	if h := s.hook(); h != nil && h.inReport != nil {
		h.inReport()
	}
	return func() { leave(); s.reclaim.soon() }, nil
}

func busy(msg string) *dbus.Error {
	return dbus.NewError(dbusapi.ErrBusy, []any{msg})
}
