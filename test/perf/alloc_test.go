package perf

import (
	"context"
	"runtime"
	"testing"

	"github.com/rdmad/rdmad/test/bustest"
)

// Allocation bounds at allocDevices devices (128 RoCE ports), in `make
// test`: what a no-change pass (the pass of `rdmad --once` on a host that
// holds the policy) and a GetManagedObjects round trip (rdmad's handler,
// godbus's encoding and a godbus client's decoding, all in this process)
// allocate, so the next change that doubles rdmad's memory fails a test,
// not a benchmark nobody ran. Counts, not time: they hold on a busy
// machine and under the race detector, which allocates more bytes for the
// same objects (its own bounds). The bounds are about 1.25 times what was
// measured when they were set (make bench prints the figures at 1,024
// devices); the health monitor's sample has its own count
// (daemon/health), its bytes are make bench's target.
const allocDevices = 64

var (
	noChangeBound = allocBound{allocs: 9_000, bytes: 1_100_000, raceBytes: 4_000_000}
	gmoBound      = allocBound{allocs: 225_000, bytes: 11_500_000, raceBytes: 17_000_000}
)

// allocBound is how much an operation may allocate: times, and bytes
// without and with the race detector.
type allocBound struct{ allocs, bytes, raceBytes uint64 }

func TestAllocationBounds(t *testing.T) {
	h, err := NewHost(allocDevices)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Remove()
	t.Run("no-change pass", func(t *testing.T) {
		svc := newService(t, h, true)
		if rep := svc.ReconcileNow(context.Background()); rep.Failed() {
			t.Fatal(rep.Failures())
		}
		pass := func() { svc.ReconcileNow(context.Background()) }
		checkAllocs(t, pass, noChangeBound)
	})
	t.Run("GetManagedObjects", func(t *testing.T) {
		d, err := StartDaemon(h, bustest.Start(t))
		if err != nil {
			t.Fatal(err)
		}
		defer d.Stop()
		call := func() {
			if n, err := d.GetManagedObjects(); err != nil || n != 3*allocDevices {
				t.Fatalf("%d objects, %v", n, err)
			}
		}
		call()
		checkAllocs(t, call, gmoBound)
	})
}

// checkAllocs fails t when fn allocates more than the bound (the least of
// three runs: another goroutine of the process may allocate meanwhile,
// never less).
func checkAllocs(t *testing.T, fn func(), bound allocBound) {
	t.Helper()
	allocs, bytes := bound.allocs, bound.bytes
	if raceDetector {
		bytes = bound.raceBytes
	}
	var minAllocs, minBytes uint64
	for i := 0; i < 3; i++ {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		fn()
		runtime.ReadMemStats(&after)
		a, b := after.Mallocs-before.Mallocs, after.TotalAlloc-before.TotalAlloc
		if i == 0 || a < minAllocs {
			minAllocs = a
		}
		if i == 0 || b < minBytes {
			minBytes = b
		}
	}
	t.Logf("%d allocations, %d bytes (bounds %d, %d)", minAllocs, minBytes, allocs, bytes)
	if minAllocs > allocs || minBytes > bytes {
		t.Errorf("%d allocations and %d bytes, bounds %d and %d", minAllocs, minBytes, allocs, bytes)
	}
}
