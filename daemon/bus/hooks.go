package bus

import (
	"sync"
	"time"

	"github.com/rdmad/rdmad/dbusapi"
)

// testHooks are seams for tests (export_test.go). They live outside the
// Server, keyed by it, so production code carries no test state: in
// production the registry stays empty and hook returns nil.
type testHooks struct {
	// afterSnapshot runs in Describe right after it took the state it
	// describes: a pass started there must not show in the answer.
	afterSnapshot func()
	// inReport runs in Describe and Diagnose while they hold a report slot.
	inReport func()
	// inPlan runs in Plan while it holds a plan slot.
	inPlan func()
	// planTimeout replaces planTimeout (0: not replaced).
	planTimeout time.Duration
	// liveTimeout replaces liveTimeout (0: not replaced).
	liveTimeout time.Duration
	// encodeFindings replaces dbusapi.EncodeFindings in Diagnose.
	encodeFindings func([]dbusapi.Finding) (string, error)
}

// hookRegistry maps a *Server to its *testHooks.
var hookRegistry sync.Map

// hook returns the test hooks of s, or nil.
func (s *Server) hook() *testHooks {
	h, _ := hookRegistry.Load(s)
	th, _ := h.(*testHooks)
	return th
}

// setHook changes one test hook of s (export_test.go).
func (s *Server) setHook(edit func(*testHooks)) {
	h := &testHooks{}
	if old := s.hook(); old != nil {
		*h = *old
	}
	edit(h)
	hookRegistry.Store(s, h)
}
