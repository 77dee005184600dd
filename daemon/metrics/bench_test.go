package metrics

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/rdmad/rdmad/daemon/reconcile"
)

// benchHost is a 1,024-device host (SR-IOV scale), two RoCE ports each,
// mode and TOS declared on every port.
func benchHost(b *testing.B) (*fakeSource, []string) {
	src := &fakeSource{states: map[string]reconcile.DeviceState{}}
	var names []string
	for i := 0; i < 1024; i++ {
		n := fmt.Sprintf("mlx5_%d", i)
		ds := reconcile.DeviceState{}
		ds.Name = n
		for p := 1; p <= 2; p++ {
			ps := rocePort("IB/RoCE v1", 106)
			ps.Number = p
			ds.Ports = append(ds.Ports, ps)
		}
		src.states[n] = ds
		names = append(names, n)
	}
	return src, names
}

func benchTextfile(b *testing.B, dir string) (*Textfile, *fakeSource, string) {
	src, names := benchHost(b)
	path := filepath.Join(dir, "rdmad.prom")
	tf := New(Options{Source: src, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), MinInterval: -1})
	tf.SetPath(path)
	tf.Changed(reconcile.Change{Full: true, Updated: names})
	if !tf.flush() || tf.lastErr != "" {
		b.Fatalf("first write failed: %s", tf.lastErr)
	}
	return tf, src, path
}

func reportSize(b *testing.B, path string) {
	if st, err := os.Stat(path); err == nil {
		b.ReportMetric(float64(st.Size()), "file-bytes")
	}
}

// BenchmarkTextfileFull1024 is the write after a full pass: every device
// rendered again, the file replaced (fsync included).
func BenchmarkTextfileFull1024(b *testing.B) {
	tf, _, path := benchTextfile(b, b.TempDir())
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tf.Changed(reconcile.Change{Full: true})
		tf.flush()
	}
	reportSize(b, path)
}

// BenchmarkTextfileOneDevice1024 is the write after a pass over one
// device: that device rendered, the file replaced.
func BenchmarkTextfileOneDevice1024(b *testing.B) {
	tf, _, path := benchTextfile(b, b.TempDir())
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tf.Changed(reconcile.Change{Updated: []string{"mlx5_512"}})
		tf.flush()
	}
	reportSize(b, path)
}

// BenchmarkTextfileRender1024 is the rendering alone, without the disk.
func BenchmarkTextfileRender1024(b *testing.B) {
	tf, src, _ := benchTextfile(b, b.TempDir())
	sum := src.Summary()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tf.buf.Reset()
		render(&tf.buf, &snapshot{sum: sum, devices: tf.devices})
	}
}

// BenchmarkTextfileChanged is what a pass pays on its own goroutine: the
// listener only records the names.
func BenchmarkTextfileChanged(b *testing.B) {
	tf, _, _ := benchTextfile(b, b.TempDir())
	ch := reconcile.Change{Updated: []string{"mlx5_512"}}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tf.Changed(ch)
	}
}
