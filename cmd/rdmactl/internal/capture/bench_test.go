package capture

import (
	"archive/tar"
	"compress/gzip"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/rdmad/rdmad/daemon/host/hosttest"
)

// synthRoot generates an SR-IOV host of n devices in memory (memDir).
func synthRoot(tb testing.TB, n int) string {
	tb.Helper()
	root := memDir(tb, "rdmad-capture-synth-")
	if err := hosttest.Synth(root, n); err != nil {
		tb.Fatal(err)
	}
	return root
}

// memDir is a temporary directory in memory (tmpfs, as sysfs is), or in
// the temporary directory where /dev/shm is not there, removed when the
// test ends. A tree of a thousand devices is written, read and removed in
// a fraction of the time it takes on a disk's file system.
func memDir(tb testing.TB, pattern string) string {
	tb.Helper()
	dir := ""
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		dir = "/dev/shm"
	}
	root, err := os.MkdirTemp(dir, pattern)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(root) })
	return root
}

type countingWriter struct{ n int64 }

func (w *countingWriter) Write(p []byte) (int, error) { w.n += int64(len(p)); return len(p), nil }

// BenchmarkCapture1024 captures a generated host of 1,024 dual-port
// ConnectX-5 functions (2,048 RoCE ports), and in turn with each capture
// its floor (plainTar) on the same tree, so a busy moment of the machine
// falls on both alike: capture-s and floor-s are their times, x-floor their
// ratio, capture-cpu-s the processor time of a capture (user and system:
// on a busy machine the time waits for a processor), MB the tarball's size
// and floor-MB the floor's.
func BenchmarkCapture1024(b *testing.B) {
	root := synthRoot(b, 1024)
	b.ResetTimer()
	var capT, floorT, capCPU time.Duration
	var capW, floorW countingWriter
	for i := 0; i < b.N; i++ {
		capW, floorW = countingWriter{}, countingWriter{}
		t0, c0 := time.Now(), cpuTime()
		if _, err := Write(&capW, Options{Root: root, Dir: "host", Now: time.Now()}); err != nil {
			b.Fatal(err)
		}
		capT += time.Since(t0)
		capCPU += cpuTime() - c0
		t0 = time.Now()
		if err := plainTar(&floorW, root); err != nil {
			b.Fatal(err)
		}
		floorT += time.Since(t0)
	}
	n := float64(b.N)
	b.ReportMetric(capT.Seconds()/n, "capture-s")
	b.ReportMetric(floorT.Seconds()/n, "floor-s")
	b.ReportMetric(capT.Seconds()/floorT.Seconds(), "x-floor")
	b.ReportMetric(capCPU.Seconds()/n, "capture-cpu-s")
	b.ReportMetric(float64(capW.n)/1e6, "MB")
	b.ReportMetric(float64(floorW.n)/1e6, "floor-MB")
}

// cpuTime is the processor time this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// plainTar is the floor of a capture: the whole tree under root walked,
// every file read and written into the same compressed tarball, with
// nothing checked (no file type, no bound, no link resolved inside the
// root) and nothing replaced.
func plainTar(w io.Writer, root string) error {
	zw, _ := gzip.NewWriterLevel(w, gzip.BestSpeed)
	tw := tar.NewWriter(zw)
	now := time.Now().Truncate(time.Second)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		hdr := &tar.Header{Name: filepath.Join("host", rel), ModTime: now, Mode: 0o644}
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			t, err := os.Readlink(p)
			if err != nil {
				return err
			}
			hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, t
			return tw.WriteHeader(hdr)
		case d.IsDir():
			hdr.Typeflag, hdr.Mode = tar.TypeDir, 0o755
			return tw.WriteHeader(hdr)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		hdr.Typeflag, hdr.Size = tar.TypeReg, int64(len(data))
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		_, err = tw.Write(data)
		return err
	})
	if err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return zw.Close()
}
