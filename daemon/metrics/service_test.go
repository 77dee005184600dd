package metrics_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/rdmad/rdmad/daemon/compose"
	"github.com/rdmad/rdmad/daemon/doctor"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/daemon/metrics"
	"github.com/rdmad/rdmad/daemon/service"
)

// The textfile of the running daemon on the demo host (mlx4_0 VPI with an
// InfiniBand and an Ethernet port, mlx5_0, mlx5_1, rxe0), where rxe0
// refuses RoCE v1 as Soft-RoCE does (EIO) and mlx4_0 refuses to switch
// port 1 to Ethernet.
const (
	textfile = "/var/lib/prometheus/node-exporter/rdmad.prom"
	policy   = `[modules]
enable = false

[metrics]
textfile = "` + textfile + `"

[[roce]]
device = "*"
mode = "v1"
tos = 106

[[vpi]]
device = "mlx4_0"
port = 1
type = "eth"

[[vpi]]
device = "mlx4_0"
port = 2
type = "eth"
`
)

type daemon struct {
	root string
	svc  *service.Service
}

func startDaemon(t *testing.T) *daemon {
	t.Helper()
	root := hosttest.Copy(t, "demo")
	hosttest.Write(t, root, "etc/rdma/rdmad.toml", policy)
	k := hosttest.NewKernel(root)
	k.Refuse("rdma_cm/rxe0/ports/1/default_roce_mode", "IB/RoCE v1", syscall.EIO)
	k.Refuse("mlx4_port1", "eth", syscall.EINVAL)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	svc, err := service.New(service.Options{Host: k.Host(), Parts: compose.Parts(compose.Kernel{Modules: &hosttest.Modprobe{}}), Log: log})
	if err != nil {
		t.Fatal(err)
	}
	textfile := compose.Textfile(svc, log)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 2)
	go func() { svc.Run(ctx); done <- struct{}{} }()
	go func() { textfile.Run(ctx); done <- struct{}{} }()
	t.Cleanup(func() { cancel(); <-done; <-done })
	svc.Start()
	if err := svc.Idle(ctx); err != nil {
		t.Fatal(err)
	}
	return &daemon{root: root, svc: svc}
}

// wait polls the file at rel until check accepts its metrics (the file is
// written on its own goroutine, at most once a second).
func (d *daemon) wait(t *testing.T, rel string, check func(map[string]*dto.MetricFamily) bool) map[string]*dto.MetricFamily {
	t.Helper()
	path := filepath.Join(d.root, rel)
	deadline := time.Now().Add(15 * time.Second)
	for {
		data, err := os.ReadFile(path)
		if err == nil {
			if fams := metrics.ParseText(t, data); check(fams) {
				return fams
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s (last read: %v)\n%s", path, err, data)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// writeConfig writes a configuration file and reloads; wantErr says
// whether the reload must fail.
func (d *daemon) writeConfig(t *testing.T, rel, content string, wantErr bool) {
	t.Helper()
	hosttest.Write(t, d.root, rel, content)
	if err := d.svc.Reload(); (err != nil) != wantErr {
		t.Fatalf("reload: %v, want error: %v", err, wantErr)
	}
}

// drifts lists the rdmad_port_drift samples as "device/port setting=value".
func drifts(fams map[string]*dto.MetricFamily) []string {
	var out []string
	if f := fams["rdmad_port_drift"]; f != nil {
		for _, m := range f.Metric {
			l := map[string]string{}
			for _, lp := range m.Label {
				l[lp.GetName()] = lp.GetValue()
			}
			v := "0"
			if m.GetGauge().GetValue() == 1 {
				v = "1"
			}
			out = append(out, l["device"]+"/"+l["port"]+" "+l["setting"]+"="+v)
		}
	}
	sort.Strings(out)
	return out
}

func configError(want float64) func(map[string]*dto.MetricFamily) bool {
	return func(f map[string]*dto.MetricFamily) bool {
		v, ok := metrics.Sample(f, "rdmad_config_error")
		return ok && v == want
	}
}

func TestDaemonTextfileShowsDriftWhereAPortRefuses(t *testing.T) {
	t.Parallel()
	d := startDaemon(t)
	fams := d.wait(t, textfile, func(map[string]*dto.MetricFamily) bool { return true })
	if data, _ := os.ReadFile(filepath.Join(d.root, textfile)); !bytes.HasPrefix(data, []byte(metrics.Header)) {
		t.Errorf("textfile does not start with rdmad's header:\n%s", data)
	}

	want := []string{
		"mlx4_0/1 vpi_type=1", // refused: EINVAL; port 1 is InfiniBand, so no RoCE settings
		"mlx4_0/2 roce_mode=0",
		"mlx4_0/2 roce_tos=0",
		"mlx4_0/2 vpi_type=0",
		"mlx5_0/1 roce_mode=0",
		"mlx5_0/1 roce_tos=0",
		"mlx5_1/1 roce_mode=0",
		"mlx5_1/1 roce_tos=0",
		"rxe0/1 roce_mode=1", // Soft-RoCE refuses v1
		"rxe0/1 roce_tos=0",
	}
	if got := drifts(fams); !reflect.DeepEqual(got, want) {
		t.Errorf("drift:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for name, wantV := range map[string]float64{"rdmad_devices": 4, "rdmad_config_error": 0} {
		if v, ok := metrics.Sample(fams, name); !ok || v != wantV {
			t.Errorf("%s = %v (present %v), want %v", name, v, ok, wantV)
		}
	}
	if v, _ := metrics.Sample(fams, "rdmad_failures", "subject_kind=port"); v != 2 {
		t.Errorf("port failures = %v, want 2 (rxe0 mode, mlx4_0 port 1 type)", v)
	}
	if v, _ := metrics.Sample(fams, "rdmad_ports", "transport=roce", "state=ACTIVE"); v < 1 {
		t.Errorf("no ACTIVE RoCE port counted")
	}
	last, _ := metrics.Sample(fams, "rdmad_last_reconcile_timestamp_seconds")
	if sum := d.svc.Reconciler().Summary(); last != float64(sum.LastReconcile.UnixMilli())/1e3 {
		t.Errorf("last reconcile %v, want the reconciler's %v", last, sum.LastReconcile)
	}
	st, err := os.Stat(filepath.Join(d.root, textfile))
	if err != nil || st.Mode().Perm() != 0o644 {
		t.Errorf("textfile mode: %v %v, want 0644", st.Mode(), err)
	}

	// The kernel's values: v1 and 106 where they were set, rxe0 kept v2.
	for _, c := range []struct {
		dev, mode string
	}{{"mlx4_0/2", "IB/RoCE v1"}, {"mlx5_0/1", "IB/RoCE v1"}, {"mlx5_1/1", "IB/RoCE v1"}, {"rxe0/1", "RoCE v2"}} {
		dev, port, _ := strings.Cut(c.dev, "/")
		if v, ok := metrics.Sample(fams, "rdmad_port_roce_tos", "device="+dev, "port="+port); !ok || v != 106 {
			t.Errorf("rdmad_port_roce_tos %s = %v (present %v), want 106", c.dev, v, ok)
		}
		if v, ok := metrics.Sample(fams, "rdmad_port_roce_mode_info", "device="+dev, "port="+port, "mode="+c.mode); !ok || v != 1 {
			t.Errorf("rdmad_port_roce_mode_info %s mode=%q missing", c.dev, c.mode)
		}
	}
	// Doctor's findings, as Diagnose gives them on the bus: the same
	// counts (once the counters' first sample, which comes after the
	// first pass, has made the findings run again), and the refused RoCE
	// mode among the failures.
	var findings []doctor.Finding
	sameCounts := func(fams map[string]*dto.MetricFamily) bool {
		findings = compose.Diagnose(d.svc)
		counts := map[string]float64{}
		for _, f := range findings {
			counts[string(f.Severity)]++
		}
		for _, sev := range []string{"ok", "warn", "fail"} {
			if v, ok := metrics.Sample(fams, "rdmad_doctor_findings", "severity="+sev); !ok || v != counts[sev] {
				return false
			}
		}
		return true
	}
	fams = d.wait(t, textfile, sameCounts)
	if v, ok := metrics.Sample(fams, "rdmad_doctor_finding", "id=roce-mode-differs", "subject=rxe0/1", "severity=fail"); !ok || v != 1 {
		t.Errorf("no rdmad_doctor_finding for rxe0/1's refused mode; doctor says %+v", findings)
	}
	metrics.Promtool(t, readTextfile(t, d))

	// The operator asks rxe0 for v2, which it supports: the drift clears,
	// and the full pass of the reload runs doctor again.
	d.writeConfig(t, "etc/rdma/rdmad.d/50-rxe.toml", "[[roce]]\ndevice = \"rxe0\"\nmode = \"v2\"\n", false)
	d.wait(t, textfile, func(f map[string]*dto.MetricFamily) bool {
		v, ok := metrics.Sample(f, "rdmad_port_drift", "device=rxe0", "port=1", "setting=roce_mode")
		_, finding := metrics.Sample(f, "rdmad_doctor_finding", "id=roce-mode-differs", "subject=rxe0/1", "severity=fail")
		return ok && v == 0 && !finding
	})
}

func readTextfile(t *testing.T, d *daemon) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(d.root, textfile))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestDaemonTextfileFollowsReloads(t *testing.T) {
	t.Parallel()
	d := startDaemon(t)
	d.wait(t, textfile, configError(0))

	// A broken drop-in: the last good policy stays, the file says so.
	d.writeConfig(t, "etc/rdma/rdmad.d/60-bad.toml", "[[roce]]\ndevice = \"mlx5_0\"\ntos = 300\n", true)
	d.wait(t, textfile, configError(1))
	if err := os.Remove(filepath.Join(d.root, "etc/rdma/rdmad.d/60-bad.toml")); err != nil {
		t.Fatal(err)
	}
	if err := d.svc.Reload(); err != nil {
		t.Fatal(err)
	}
	d.wait(t, textfile, configError(0))

	// The path moves: the old file goes, the new one comes.
	const moved = "/run/node-exporter/rdmad.prom"
	d.writeConfig(t, "etc/rdma/rdmad.d/70-metrics.toml", "[metrics]\ntextfile = \""+moved+"\"\n", false)
	d.wait(t, moved, configError(0))
	if _, err := os.Stat(filepath.Join(d.root, textfile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("old textfile still there after the path moved: %v", err)
	}

	// Metrics turned off: the file goes.
	d.writeConfig(t, "etc/rdma/rdmad.d/70-metrics.toml", "[metrics]\ntextfile = \"\"\n", false)
	deadline := time.Now().Add(15 * time.Second)
	for {
		_, err := os.Stat(filepath.Join(d.root, moved))
		if errors.Is(err, os.ErrNotExist) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("textfile still there after metrics were turned off: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// rdmad --once writes no textfile: nothing would keep it fresh.
func TestOneShotWritesNoTextfile(t *testing.T) {
	root := hosttest.Copy(t, "demo")
	hosttest.Write(t, root, "etc/rdma/rdmad.toml", policy)
	h := host.New(root)
	svc, err := service.New(service.Options{Host: h, Parts: compose.Parts(compose.Kernel{Modules: &hosttest.Modprobe{}}),
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), OneShot: true})
	if err != nil {
		t.Fatal(err)
	}
	svc.ReconcileNow(context.Background())
	if _, err := os.Stat(h.Path(textfile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("--once wrote %s: %v", textfile, err)
	}
}

// Coexistence findings are exported like any other: the NVIDIA Network
// Operator's driver container on the node (test/coexist/nvidia-driver)
// while rdmad loads module lists is a standing warning until one of them
// gives way.
func TestDaemonTextfileHasCoexistenceFindings(t *testing.T) {
	t.Parallel()
	d := startDaemon(t)
	if err := hosttest.CopyTree(filepath.Join(hosttest.RepoRoot(), "test", "coexist", "nvidia-driver"), d.root); err != nil {
		t.Fatal(err)
	}
	d.writeConfig(t, "etc/rdma/rdmad.d/60-modules.toml", "[modules]\nenable = true\n", false)
	d.wait(t, textfile, func(f map[string]*dto.MetricFamily) bool {
		v, ok := metrics.Sample(f, "rdmad_doctor_finding", "id=coexist-nvidia-driver", "subject=host", "severity=warn")
		return ok && v == 1
	})
	metrics.Promtool(t, readTextfile(t, d))
	d.writeConfig(t, "etc/rdma/rdmad.d/60-modules.toml", "[modules]\nenable = false\n", false)
	d.wait(t, textfile, func(f map[string]*dto.MetricFamily) bool {
		_, ok := metrics.Sample(f, "rdmad_doctor_finding", "id=coexist-nvidia-driver", "subject=host", "severity=warn")
		return !ok
	})
}

// A TOS set over D-Bus over the files' is a standing override in the
// running daemon's textfile, named by port, until it is withdrawn.
func TestDaemonTextfileShowsOverrides(t *testing.T) {
	t.Parallel()
	d := startDaemon(t)
	override := func(f map[string]*dto.MetricFamily) (float64, bool) {
		return metrics.Sample(f, "rdmad_doctor_finding", "id=override", "subject=mlx5_0/1", "severity=warn")
	}
	if err := d.svc.SetRoCE(context.Background(), service.RoCEChange{Device: "mlx5_0", Port: 1, TOS: 0, Persist: true}); err != nil {
		t.Fatal(err)
	}
	d.wait(t, textfile, func(f map[string]*dto.MetricFamily) bool {
		v, ok := override(f)
		return ok && v == 1
	})
	metrics.Promtool(t, readTextfile(t, d))
	if err := d.svc.Withdraw(context.Background(), service.Withdrawal{Kind: service.WithdrawRoCE, Name: "mlx5_0", Port: 1, Persist: true}); err != nil {
		t.Fatal(err)
	}
	d.wait(t, textfile, func(f map[string]*dto.MetricFamily) bool {
		_, ok := override(f)
		return !ok
	})
}
