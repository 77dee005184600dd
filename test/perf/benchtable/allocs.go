package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"time"

	"github.com/rdmad/rdmad/daemon/compose"
	"github.com/rdmad/rdmad/daemon/health"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/service"
	"github.com/rdmad/rdmad/test/perf"
)

// allocRow is what one operation allocates, at one size: in this process,
// the least of three runs (another goroutine may allocate meanwhile, never
// less).
type allocRow struct {
	sample, noChange, gmo allocs
}

type allocs struct {
	count, bytes uint64
}

func (a allocs) String() string {
	return fmt.Sprintf("%s allocations, %.2f MB", thousands(a.count), float64(a.bytes)/1e6)
}

// measureAllocs measures on h: one sample of the health monitor (every
// port's counters, after the baseline sample), the pass of `rdmad --once`
// on a host that holds the policy, and a GetManagedObjects round trip
// (rdmad in this process, its godbus encoding and a godbus client's
// decoding: both ends).
func measureAllocs(h *perf.Host, addr string) (allocRow, error) {
	var r allocRow
	if err := h.Reset(); err != nil {
		return r, err
	}
	hh := host.New(h.Root)
	devs, err := hh.Devices()
	if err != nil {
		return r, err
	}
	now := time.Now()
	m := health.New(health.Options{Host: hh, Now: func() time.Time { return now }, Devices: func([]string) []host.Device { return devs }})
	m.Changed(true, nil, nil)
	m.Update()
	r.sample = least(func() { now = now.Add(time.Minute); m.SampleAll() })

	svc, err := service.New(service.Options{Host: hh, Parts: compose.Parts(compose.Kernel{Modules: perf.NoModprobe{}}),
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), OneShot: true})
	if err != nil {
		return r, err
	}
	if rep := svc.ReconcileNow(context.Background()); rep.Failed() {
		return r, fmt.Errorf("the pass before the no-change passes failed: %v", rep.Failures())
	}
	r.noChange = least(func() { svc.ReconcileNow(context.Background()) })

	d, err := perf.StartDaemon(h, addr)
	if err != nil {
		return r, err
	}
	defer d.Stop()
	call := func() error {
		n, err := d.GetManagedObjects()
		if err == nil && n != 3*h.N {
			err = fmt.Errorf("GetManagedObjects: %d objects, want %d", n, 3*h.N)
		}
		return err
	}
	if err := call(); err != nil {
		return r, fmt.Errorf("in process: %w", err)
	}
	var callErr error
	r.gmo = least(func() {
		if err := call(); err != nil {
			callErr = err
		}
	})
	return r, callErr
}

// least is the least of three runs of fn: allocations and bytes.
func least(fn func()) allocs {
	var out allocs
	for i := 0; i < 3; i++ {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		fn()
		runtime.ReadMemStats(&after)
		a := allocs{after.Mallocs - before.Mallocs, after.TotalAlloc - before.TotalAlloc}
		if i == 0 || a.count < out.count {
			out.count = a.count
		}
		if i == 0 || a.bytes < out.bytes {
			out.bytes = a.bytes
		}
	}
	return out
}

// thousands writes n with thousands separators.
func thousands(n uint64) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// sampleTarget is the most a sample of every port's counters may allocate
// at 1,024 devices.
const sampleTarget = 1 << 20
