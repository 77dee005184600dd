package health_test

import (
	"testing"
	"time"

	"github.com/rdmad/rdmad/daemon/health"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
)

// sampleAllocs bounds the allocations of one sample of every port
// (SampleAll) that moved nothing: a few, whatever the number of ports.
// Before the counters were read relative to their port's directory, a
// sample allocated 4 times a counter. Its bytes are a target of make bench
// (at most 1 MB at 1,024 devices, test/perf/benchtable) and
// BenchmarkSampleAll1024 reports them: a count is the same on every run,
// bytes are a measure.
const sampleAllocs = 8

// A sample is the health monitor's steady work (every port's 19 counters
// every minute); it must not build a path or a string per counter. The
// bound is a count of allocations, not time or bytes: it holds on a busy
// machine and under the race detector.
func TestSampleAllocationBound(t *testing.T) {
	const devices = 64
	root := hosttest.SynthRoot(t, devices)
	h := host.New(root)
	devs, err := h.Devices()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	m := health.New(health.Options{Host: h, Now: func() time.Time { return now },
		Devices: func([]string) []host.Device { return devs }})
	m.Changed(true, nil, nil)
	m.Update() // the baseline sample
	if n := len(m.View().Ports); n != 2*devices {
		t.Fatalf("%d ports sampled, want %d", n, 2*devices)
	}
	sample := func() { now = now.Add(time.Minute); m.SampleAll() }
	if allocs := testing.AllocsPerRun(5, sample); allocs > sampleAllocs {
		t.Errorf("a sample of %d ports allocates %v times, bound %d", 2*devices, allocs, sampleAllocs)
	}
}
