package bus

import "github.com/rdmad/rdmad/daemon/reconcile"

// SyncForTest publishes a change as a reconcile pass would.
func (s *Server) SyncForTest(ch reconcile.Change) { s.sync(ch) }
