package capture

import (
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/rdmad/rdmad/daemon/host/hosttest"
)

// synthRoot generates an SR-IOV host of n devices in memory (tmpfs, as
// sysfs is), or in a temporary directory where /dev/shm is not there.
func synthRoot(tb testing.TB, n int) string {
	tb.Helper()
	dir := ""
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		dir = "/dev/shm"
	}
	root, err := os.MkdirTemp(dir, "rdmad-capture-synth-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(root) })
	if err := hosttest.Synth(root, n); err != nil {
		tb.Fatal(err)
	}
	return root
}

type countingWriter struct{ n int64 }

func (w *countingWriter) Write(p []byte) (int, error) { w.n += int64(len(p)); return len(p), nil }

// BenchmarkCapture1024 captures a generated host of 1,024 dual-port
// ConnectX-5 functions (2,048 RoCE ports): ns/op is the capture's time,
// cpu-s/op the processor time it took (user and system: on a busy machine
// the time waits for a processor), MB the tarball's size.
func BenchmarkCapture1024(b *testing.B) {
	root := synthRoot(b, 1024)
	b.ResetTimer()
	var w countingWriter
	before := cpuTime()
	for i := 0; i < b.N; i++ {
		w = countingWriter{}
		if _, err := Write(&w, Options{Root: root, Dir: "host", Now: time.Now()}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric((cpuTime()-before).Seconds()/float64(b.N), "cpu-s/op")
	b.ReportMetric(float64(w.n)/1e6, "MB")
}

// cpuTime is the processor time this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
