package bus

import (
	"runtime/debug"
	"sync"
	"time"
)

// The reclaimer: a big reply's garbage is handed back to the system.

// reclaimDelay is how long after a big reply (GetManagedObjects, Describe,
// Diagnose, ReadPorts) its garbage is handed back to the system, once godbus has
// sent it: a host with a thousand devices makes megabytes of it per call,
// which the runtime would otherwise keep resident while rdmad idles.
const reclaimDelay = time.Second

// reclaimer runs debug.FreeOSMemory once, reclaimDelay after the last of
// a burst of big replies.
type reclaimer struct {
	mu    sync.Mutex
	delay time.Duration
	timer *time.Timer
	done  bool
}

func (r *reclaimer) soon() {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.done:
	case r.timer == nil:
		r.timer = time.AfterFunc(r.delay, debug.FreeOSMemory)
	default:
		r.timer.Reset(r.delay)
	}
}

func (r *reclaimer) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.done = true
	if r.timer != nil {
		r.timer.Stop()
	}
}
