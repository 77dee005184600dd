package service

import (
	"slices"

	"github.com/rdmad/rdmad/daemon/health"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/reconcile"
)

// startHealth keeps what doctor needs a history for (daemon/health): the
// error counters of every port, sampled as a port is first seen and every
// [doctor.counters] interval, since when each link is up, and the carrier
// losses rtnetlink reports (Health().CarrierLost). The reconciler's
// listener only marks; the monitor reads on its own goroutine (Run).
func (s *Service) startHealth() {
	s.health = health.New(health.Options{Host: s.host, Policy: s.PolicyInForce, Devices: s.observedDevices, Changed: s.healthChanged})
	s.rec.OnChange(func(ch reconcile.Change) { s.health.Changed(ch.Full, ch.Updated, ch.Removed) })
}

// OnHealthChange registers fn to run when a sample of the health monitor
// moved what doctor judges (an error counter, a link's history), so a
// reader of doctor's findings (the metrics textfile) runs it again
// without waiting for a pass. fn runs on the monitor's goroutine and must
// not block.
func (s *Service) OnHealthChange(fn func()) {
	s.healthMu.Lock()
	s.healthFns = append(s.healthFns, fn)
	s.healthMu.Unlock()
}

func (s *Service) healthChanged() {
	s.healthMu.Lock()
	fns := slices.Clone(s.healthFns)
	s.healthMu.Unlock()
	for _, fn := range fns {
		fn()
	}
}

// Health is the monitor doctor reads (nil with OneShot).
func (s *Service) Health() *health.Monitor { return s.health }

// observedDevices are the named devices as the last pass observed them
// (nil: every device).
func (s *Service) observedDevices(names []string) []host.Device { return s.rec.Devices(names) }
