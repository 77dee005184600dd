package bus

import (
	"context"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/rdmad/rdmad/daemon/reconcile"
	"github.com/rdmad/rdmad/dbusapi"
)

// SyncForTest publishes a change as a reconcile pass would, and waits
// until it is served.
func (s *Server) SyncForTest(ch reconcile.Change) {
	s.mark(ch)
	_ = s.Flush(context.Background())
}

// PropertyForTest reads a property as Properties.Get does, without the bus.
func (s *Server) PropertyForTest(p dbus.ObjectPath, iface, name string) (dbus.Variant, error) {
	msg := dbus.Message{Headers: map[dbus.HeaderField]dbus.Variant{dbus.FieldPath: dbus.MakeVariant(p)}}
	v, err := s.get(msg, iface, name)
	if err != nil {
		return v, err
	}
	return v, nil
}

// AfterDescribeSnapshotForTest runs fn in every Describe right after it
// took the state it describes.
func (s *Server) AfterDescribeSnapshotForTest(fn func()) {
	s.setHook(func(h *testHooks) { h.afterSnapshot = fn })
}

// ReportSlots is how many Describe and Diagnose calls build at once.
const ReportSlots = reportSlots

// InReportForTest runs fn in every Describe and Diagnose while it holds a
// report slot.
func (s *Server) InReportForTest(fn func()) {
	s.setHook(func(h *testHooks) { h.inReport = fn })
}

// SetReportLimitsForTest replaces the report gate.
func (s *Server) SetReportLimitsForTest(slots, waiters int, wait time.Duration) {
	s.reports.Store(newReportGate(slots, waiters, wait))
}

// ReportsWaitingForTest is how many calls wait for a report slot.
func (s *Server) ReportsWaitingForTest() int { return s.reports.Load().waitingCalls() }

// EncodeFindingsForTest replaces dbusapi.EncodeFindings in Diagnose.
func (s *Server) EncodeFindingsForTest(fn func([]dbusapi.Finding) (string, error)) {
	s.setHook(func(h *testHooks) { h.encodeFindings = fn })
}

// InPlanForTest runs fn in every Plan while it holds a plan slot.
func (s *Server) InPlanForTest(fn func()) {
	s.setHook(func(h *testHooks) { h.inPlan = fn })
}

// SetPlanTimeoutForTest replaces planTimeout (0: planTimeout again).
func (s *Server) SetPlanTimeoutForTest(d time.Duration) {
	s.setHook(func(h *testHooks) { h.planTimeout = d })
}

// SetLiveTimeoutForTest replaces liveTimeout (0: liveTimeout again).
func (s *Server) SetLiveTimeoutForTest(d time.Duration) {
	s.setHook(func(h *testHooks) { h.liveTimeout = d })
}

// LiveSlotsPerUID is how many ReadPorts calls a uid other than root has
// under way at once.
const LiveSlotsPerUID = liveSlotsPerUID

// PlanSlots is how many plans are worked out at once.
const PlanSlots = planSlots

// FollowedForTest is how many callers the authorizer follows on the bus
// now (each while one of its checks is outstanding).
func (a *PolkitAuthorizer) FollowedForTest() int {
	w := a.watcher()
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.waiting)
}
