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
	"github.com/rdmad/rdmad/daemon/dcb/dcbtest"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/daemon/qos"
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

func benchTextfile(b testing.TB, src Source, names []string) (*Textfile, string) {
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
func synthReconciler(b testing.TB) (*reconcile.Reconciler, []string) {
	return synthHost(b, 1024, false)
}

// synthQoSPolicy adds lossless RoCE on every port to the RoCE values.
const synthQoSPolicy = "[[qos]]\ndevice = \"mlx5_*\"\ntrust = \"dscp\"\npfc = [3]\n"

// synthHost is the real reconciler after a full pass over a generated
// host of n devices, RoCE mode and TOS declared on every port; with qos,
// also the QoS part on a DCB kernel where every netdev is an mlx5 one
// (dcbtest), PFC on priority 3 and DSCP trust declared on every port: the
// QoS values rdmad publishes for each RoCE port, declared or not.
func synthHost(b testing.TB, n int, qosToo bool) (*reconcile.Reconciler, []string) {
	root := hosttest.SynthRoot(b, n)
	text := "[[roce]]\ndevice = \"mlx5_*\"\nmode = \"v1\"\ntos = 106\n"
	h := host.New(root)
	parts := []reconcile.DevicePart{&roce.Part{Host: h}}
	if qosToo {
		text += synthQoSPolicy
		k := dcbtest.New()
		for i := 0; i < n; i++ {
			dcbtest.MLX5(k.Add(hosttest.SynthNetdev(i)))
		}
		parts = append(parts, &qos.Part{Host: h, DCB: k.Kernel()})
	}
	pol, err := config.Parse("rdmad.toml", []byte(text))
	if err != nil {
		b.Fatal(err)
	}
	r := reconcile.New(reconcile.Options{Host: h, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		DeviceParts: parts, Detail: host.DetailFull})
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

// BenchmarkTextfileFull1024QoS is BenchmarkTextfileFull1024 on a host
// where every RoCE port's netdev has DCB and lossless RoCE declared: the
// QoS values are written too (rdmad_qos_pfc_mask, rdmad_qos_trust_info).
// The "without-gauges" variant writes the same state without those two
// families: the difference is what they cost.
func BenchmarkTextfileFull1024QoS(b *testing.B) {
	r, names := synthHost(b, 1024, true)
	for _, bc := range []struct {
		name   string
		gauges bool
	}{{"with-gauges", true}, {"without-gauges", false}} {
		b.Run(bc.name, func(b *testing.B) {
			tf, path := benchTextfile(b, r, names)
			if !bc.gauges {
				tf.families = withoutQoSGauges(tf.families)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				tf.Changed(reconcile.Change{Full: true})
				tf.flush()
			}
			reportSize(b, path)
		})
	}
}

// BenchmarkTextfileOneDevice1024QoS is BenchmarkTextfileOneDevice1024 on
// the host of BenchmarkTextfileFull1024QoS.
func BenchmarkTextfileOneDevice1024QoS(b *testing.B) {
	r, names := synthHost(b, 1024, true)
	tf, path := benchTextfile(b, r, names)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tf.Changed(reconcile.Change{Updated: []string{"mlx5_512"}})
		tf.flush()
	}
	reportSize(b, path)
}

// withoutQoSGauges are the families but the QoS value gauges.
func withoutQoSGauges(fams []devFamily) []devFamily {
	var out []devFamily
	for _, f := range fams {
		if f.setting != qos.PFC.Setting() && f.setting != qos.Trust.Setting() {
			out = append(out, f)
		}
	}
	return out
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
