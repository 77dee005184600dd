package health_test

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/rdmad/rdmad/daemon/health"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
)

// synthMonitor is a monitor of the generated 1,024-device host
// (hosttest.Synth, 2,048 RoCE ports, each with every counter doctor
// watches), after its baseline sample; root is in tmpfs when /dev/shm is.
func synthMonitor(b *testing.B) (*health.Monitor, string, *time.Time) {
	dir := "/dev/shm"
	if _, err := os.Stat(dir); err != nil {
		dir = ""
	}
	root, err := os.MkdirTemp(dir, "rdmad-health-bench-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(root) })
	if err := hosttest.Synth(root, 1024); err != nil {
		b.Fatal(err)
	}
	h := host.New(root)
	devs, err := h.Devices()
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	m := health.New(health.Options{Host: h, Now: func() time.Time { return now }, Devices: func([]string) []host.Device { return devs }})
	m.Changed(true, nil, nil)
	m.Update()
	return m, root, &now
}

// BenchmarkSampleAll1024 is one sample of every counter of 2,048 ports
// (39k bounded reads): what the monitor does every [doctor.counters]
// interval; its bytes a sample are make bench's target (at most 1 MB).
func BenchmarkSampleAll1024(b *testing.B) {
	m, _, now := synthMonitor(b)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		*now = now.Add(time.Minute)
		m.SampleAll()
	}
}

// BenchmarkView1024 is what doctor takes of the history at each run.
func BenchmarkView1024(b *testing.B) {
	m, _, _ := synthMonitor(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		_ = m.View()
	}
}

// BenchmarkHistoryHeap1024 reports the heap the history holds after an
// hour of one-minute samples in which one counter of every port moves at
// every sample (the worst a busy fabric gives: 61 samples kept for it).
func BenchmarkHistoryHeap1024(b *testing.B) {
	for i := 0; i < b.N; i++ {
		before := heap()
		m, root, now := synthMonitor(b)
		for s := 1; s <= 60; s++ {
			*now = now.Add(time.Minute)
			for d := 0; d < 1024; d++ {
				for port := 1; port <= 2; port++ {
					p := filepath.Join(root, fmt.Sprintf("sys/class/infiniband/mlx5_%d/ports/%d/hw_counters/out_of_sequence", d, port))
					if err := os.WriteFile(p, []byte(fmt.Sprintf("%d\n", s)), 0o644); err != nil {
						b.Fatal(err)
					}
				}
			}
			m.SampleAll()
		}
		b.ReportMetric(float64(heap()-before)/1e6, "heap-MB")
		runtime.KeepAlive(m)
	}
}

func heap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}
