package metrics

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/daemon/reconcile"
	"github.com/rdmad/rdmad/daemon/roce"
)

// benchHost is a 1,024-device host (SR-IOV scale), two RoCE ports each,
// mode and TOS declared on every port, as a fake source: for the render
// alone and the listener.
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

func benchTextfile(b *testing.B, src Source, names []string) (*Textfile, string) {
	path := filepath.Join(b.TempDir(), "rdmad.prom")
	tf := New(Options{Source: src, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), MinInterval: -1})
	tf.SetPath(path)
	tf.Changed(reconcile.Change{Full: true, Updated: names})
	if !tf.flush() || tf.lastErr != "" {
		b.Fatalf("first write failed: %s", tf.lastErr)
	}
	return tf, path
}

// synthReconciler is the real reconciler after a full pass over the
// generated 1,024-device host (hosttest.Synth) with RoCE mode and TOS
// declared on every port: the state the daemon would write.
func synthReconciler(b *testing.B) (*reconcile.Reconciler, []string) {
	root := b.TempDir()
	if err := hosttest.Synth(root, 1024); err != nil {
		b.Fatal(err)
	}
	pol, err := config.Parse("rdmad.toml", []byte("[[roce]]\ndevice = \"mlx5_*\"\nmode = \"v1\"\ntos = 106\n"))
	if err != nil {
		b.Fatal(err)
	}
	h := host.New(root)
	r := reconcile.New(reconcile.Options{Host: h, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		DeviceParts: []reconcile.DevicePart{&roce.Part{Host: h}}, Detail: host.DetailFull})
	if rep := r.Pass(context.Background(), pol, reconcile.Scope{Full: true}); rep.Failed() {
		b.Fatalf("pass failed: %v", rep.Failures())
	}
	return r, r.Summary().Devices
}

func reportSize(b *testing.B, path string) {
	if st, err := os.Stat(path); err == nil {
		b.ReportMetric(float64(st.Size()), "file-bytes")
	}
}

// BenchmarkTextfileFull1024 is the write after a full pass: every device
// rendered again from the reconciler, the file replaced (fsync included).
func BenchmarkTextfileFull1024(b *testing.B) {
	r, names := synthReconciler(b)
	tf, path := benchTextfile(b, r, names)
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
	r, names := synthReconciler(b)
	tf, path := benchTextfile(b, r, names)
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
	src, names := benchHost(b)
	tf, _ := benchTextfile(b, src, names)
	sum := src.Summary()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tf.buf.Reset()
		render(&tf.buf, &snapshot{sum: sum, families: tf.families, devices: tf.devices})
	}
}

// BenchmarkTextfileChanged is what a pass pays on its own goroutine: the
// listener only records the names.
func BenchmarkTextfileChanged(b *testing.B) {
	src, names := benchHost(b)
	tf, _ := benchTextfile(b, src, names)
	ch := reconcile.Change{Updated: []string{"mlx5_512"}}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tf.Changed(ch)
	}
}
