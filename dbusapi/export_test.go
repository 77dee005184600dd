package dbusapi

import "github.com/rdmad/rdmad/daemon/reconcile"

// SyncForTest publishes st as a reconcile pass would, for tests of
// out-of-order delivery.
func (s *Server) SyncForTest(st reconcile.State) { s.sync(st) }
