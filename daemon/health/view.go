package health

import (
	"time"

	"github.com/rdmad/rdmad/daemon/config"
)

// View is what the monitor has seen, for one run of doctor.
type View struct {
	Now   time.Time
	Start time.Time // when the monitor started: rdmad's start
	Ports map[PortKey]PortView
	// CarrierLosses are the losses of carrier of each netdev within the
	// window.
	CarrierLosses map[string]int
}

// PortView is one port.
type PortView struct {
	// LinkUpSince is when the monitor first saw the physical link up in
	// its current run; zero when it was not up when last seen.
	LinkUpSince time.Time
	Netdev      string
	// VF: a virtual function's port, whose counters are not sampled
	// (its link is its physical function's).
	VF bool
	// From and To are the first and the last sample; zero before the
	// first sample.
	From, To time.Time
	Counters []CounterView // in config.Counters order
}

// CounterView is one counter of one port.
type CounterView struct {
	Name      string
	Available bool
	Why       string // why not available: "absent", "EINVAL", "N/A (no PMA)"
	Value     uint64
	Max       uint64 // the saturation value; 0 for a 64-bit counter
	Saturated bool
	// Increase is how much it rose within the window (since the first
	// sample when that is more recent), counting from 0 again after a
	// reset (perfquery -R); Since is where that count starts.
	Increase uint64
	Since    time.Time
}

// View returns what the monitor has seen, now.
func (m *Monitor) View() View {
	now := m.o.Now()
	from := now.Add(-Window)
	m.mu.Lock()
	defer m.mu.Unlock()
	v := View{Now: now, Start: m.start, Ports: make(map[PortKey]PortView, len(m.ports)), CarrierLosses: map[string]int{}}
	for n, ts := range m.netdevs {
		c := 0
		for _, t := range ts {
			if !t.Before(from) {
				c++
			}
		}
		if c > 0 {
			v.CarrierLosses[n] = c
		}
	}
	for k, h := range m.ports {
		pv := PortView{LinkUpSince: h.linkUpSince, Netdev: h.netdev, VF: h.vf, From: h.first, To: h.last}
		if h.counters != nil { // sampled
			pv.Counters = make([]CounterView, len(config.Counters))
		}
		for i := range pv.Counters {
			c, ch := config.Counters[i], &h.counters[i]
			cv := CounterView{Name: c.Name, Available: ch.state == available, Max: Max(c.Name)}
			switch {
			case ch.state == text:
				cv.Why = h.texts[i]
			case !cv.Available:
				cv.Why = why[ch.state]
			}
			if cv.Available && ch.base.at != 0 {
				prev := ch.base.value
				for _, mv := range h.moves {
					if mv.i != i {
						continue
					}
					if mv.value >= prev {
						cv.Increase += mv.value - prev
					} else {
						cv.Increase += mv.value // reset to 0, then rose to it
					}
					prev = mv.value
				}
				cv.Value = prev
				cv.Saturated = cv.Max != 0 && cv.Value >= cv.Max
				cv.Since = time.Unix(0, ch.base.at)
				if cv.Since.Before(from) {
					cv.Since = from
				}
			}
			pv.Counters[i] = cv
		}
		v.Ports[k] = pv
	}
	return v
}
