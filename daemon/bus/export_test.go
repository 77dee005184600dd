package bus

import "github.com/rdmad/rdmad/daemon/reconcile"

// SyncForTest publishes a change as a reconcile pass would.
func (s *Server) SyncForTest(ch reconcile.Change) { s.sync(ch) }

// AfterDescribeSnapshotForTest runs fn in every Describe right after it
// took the state it describes.
func (s *Server) AfterDescribeSnapshotForTest(fn func()) {
	s.setHook(func(h *testHooks) { h.afterSnapshot = fn })
}
