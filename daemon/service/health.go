package service

import (
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
	// A sample that moved a counter makes the textfile's doctor findings
	// due: they show it without waiting for the next minute.
	var changed func()
	if s.textfile != nil {
		changed = s.textfile.FindingsChanged
	}
	s.health = health.New(health.Options{Host: s.host, Policy: s.PolicyInForce, Devices: s.observedDevices, Changed: changed})
	s.rec.OnChange(func(ch reconcile.Change) { s.health.Changed(ch.Full, ch.Updated, ch.Removed) })
}

// Health is the monitor doctor reads (nil with OneShot).
func (s *Service) Health() *health.Monitor { return s.health }

// observedDevices are the named devices as the last pass observed them
// (nil: every device).
func (s *Service) observedDevices(names []string) []host.Device {
	var states []reconcile.DeviceState
	if names == nil {
		states = s.rec.Snapshot().Devices
	} else {
		states = s.rec.DeviceStates(names)
	}
	out := make([]host.Device, len(states))
	for i := range states {
		out[i] = states[i].Device
	}
	return out
}
