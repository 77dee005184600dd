package reconcile

import (
	"context"
	"errors"
	"reflect"
	"time"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host"
)

// A live read: the settings of some devices as the kernel holds them at
// the moment of a call, not at rdmad's last read (rdmactl roce show and
// qos show). What rdmad publishes follows its reads, which follow the
// kernel's notifications; a setting whose change the kernel does not
// announce (firmware DCBX, a driver that sends nothing) shows the last
// read until the verify read-back. A live read asks the kernel again.

// Live is the settings of some devices as read at one moment.
type Live struct {
	// At is when the read began: every value was read at or after it.
	At time.Time
	// Devices are the devices read, in the order asked, each with its
	// ports' records as read now (and the host-wide records on its ports
	// as last judged).
	Devices []DeviceState
}

// ErrChangedSinceRead is why a declared setting that held at rdmad's last
// read does not hold in a live read: the kernel's value changed and rdmad
// has not read it again yet.
var ErrChangedSinceRead = errors.New("changed since rdmad last read it; rdmad corrects or reports it when it reads it again (an event, the verify read-back, rdmactl reconcile)")

// ReadLive reads the settings of the named devices (known ones; others
// are skipped) under pol now: each device part reads every setting of
// every port, declared or not, from the cached device, and writes
// nothing. Like Observe it takes no lock that passes wait for, and stores
// nothing: what it read is returned, not published (the next read of a
// pass publishes the same).
func (r *Reconciler) ReadLive(ctx context.Context, pol *config.Policy, names []string) Live {
	if pol == nil {
		pol = &config.Policy{}
	}
	out := Live{At: time.Now()}
	working := make(map[string]*host.Device, len(names))
	for _, n := range names {
		if d, ok := r.cachedDevice(n); ok {
			working[n] = &d
		}
	}
	acts, recs := r.applyDevices(ctx, pol, working, nil, liveRead{r})
	r.stateMu.RLock()
	hostOnPorts := portRecords(r.hostRecs)
	r.stateMu.RUnlock()
	for _, n := range names {
		d, ok := working[n]
		if !ok {
			continue
		}
		var failed []Action
		for _, a := range acts[n] {
			if a.Status == Failed {
				failed = append(failed, a) // a read that failed
			}
		}
		r.tally.markRecords(recs[n]) // Corrected counts as a pass's records do
		out.Devices = append(out.Devices, BuildDeviceState(*d, failed, append(recs[n], hostOnPorts[n]...)))
	}
	return out
}

// liveRead is the guard of a live read: nothing is written (every answer
// has a why). A declared
// setting that does not hold is judged as rdmad's last read judged it
// (reported, contested, refused), or, when it held then, as changed since
// (ErrChangedSinceRead).
type liveRead struct{ r *Reconciler }

func (g liveRead) Hold(s Subject, st *Setting, want Value, src config.Position) (RecordState, error) {
	prev, ok := g.r.previous(s, st)
	if ok && prev.Why != nil && prev.Source == src && reflect.DeepEqual(prev.Declared, want) {
		switch prev.State {
		case Differs, Contested, Refused, Deferred:
			return prev.State, prev.Why
		}
	}
	return Differs, ErrChangedSinceRead
}

func (liveRead) ReadOnly() bool { return true }
