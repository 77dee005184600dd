package main_test

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/test/livetest"
)

// A host that lost an adapter fails the gate: with an [[expect]] rule
// naming mlx5_1 by PCI address and one counting two mlx5 ports, removing
// mlx5_1 makes rdmactl doctor exit 1 with expect-missing naming the
// address (both rules), rdmad logs the device's departure at warning
// priority with its PCI address, the metrics count it, and the rollout
// gate (--scope policy) still passes.
func TestLostAdapterFailsTheGate(t *testing.T) {
	addr := privateBus(t)
	root, env := livetest.DemoHost(t)
	hosttest.Write(t, root, "etc/rdma/rdmad.d/60-expect.toml", `[[expect]]
pci = "0000:3b:00.1"
state = "up"

[[expect]]
driver = "mlx5_core"
port = 1
count = 2

[metrics]
textfile = "/var/lib/prometheus/node-exporter/rdmad.prom"
`)
	d := livetest.Start(t, livetest.Binaries{Rdmad: rdmadBin, Rdmactl: rdmactlBin}, addr, root, env)
	ctl := func(args ...string) (string, int) {
		out, err := exec.Command(rdmactlBin, append([]string{"--bus", addr}, args...)...).CombinedOutput()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return string(out), ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return string(out), 0
	}
	prom := filepath.Join(root, "var/lib/prometheus/node-exporter/rdmad.prom")
	// sample is the value of the series written exactly so ("name" or
	// `name{label="value"}`).
	sample := func(series string) (float64, bool) {
		b, err := os.ReadFile(prom)
		if err != nil {
			return 0, false
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, series+" "); ok {
				f, err := strconv.ParseFloat(v, 64)
				return f, err == nil
			}
		}
		return 0, false
	}
	if out, code := ctl("doctor"); code != 0 {
		t.Fatalf("rdmactl doctor with both adapters: exit %d\n%s", code, out)
	}
	eventually(t, "the metrics count two mlx5 devices and no expectation missing", func() bool {
		n, ok1 := sample(`rdmad_devices_by_driver{driver="mlx5_core"}`)
		m, ok2 := sample("rdmad_expect_missing")
		return ok1 && ok2 && n == 2 && m == 0
	})

	if err := os.Remove(filepath.Join(root, host.ClassInfiniband, "mlx5_1")); err != nil {
		t.Fatal(err)
	}
	ctl("reconcile") // a full pass, as the kernel's remove uevent brings one pass over mlx5_1
	out, code := ctl("doctor")
	if code != 1 || !strings.Contains(out, `(pci="0000:3b:00.1") expects the device it names`) {
		t.Fatalf("rdmactl doctor without mlx5_1: exit %d, want 1 naming 0000:3b:00.1\n%s", code, out)
	}
	js, _ := exec.Command(rdmactlBin, "--bus", addr, "-o", "json", "doctor").Output() // exit 1: a finding fails
	var fs []struct {
		ID       string `json:"id"`
		Severity string `json:"severity"`
		Finding  string `json:"finding"`
		Scope    string `json:"scope"`
	}
	if err := json.Unmarshal(js, &fs); err != nil {
		t.Fatalf("%v\n%s", err, js)
	}
	var missing []string
	for _, f := range fs {
		if f.ID == "expect-missing" {
			missing = append(missing, f.Severity+" "+f.Scope+": "+f.Finding)
		}
	}
	if len(missing) != 2 || !strings.Contains(missing[0], `fail host: the [[expect]] rule at `) ||
		!strings.Contains(missing[0], `(pci="0000:3b:00.1") expects the device it names (up), which is not here; rdmad saw mlx5_1 (PCI 0000:3b:00.1, driver mlx5_core) go at `) ||
		!strings.Contains(missing[1], `expects at least 2 ports, 1 here; rdmad saw mlx5_1 (PCI 0000:3b:00.1, driver mlx5_core)`) {
		t.Errorf("expect-missing findings:\n%s", strings.Join(missing, "\n"))
	}
	if out, code := ctl("doctor", "--scope", "policy"); code != 0 || strings.Contains(out, "0000:3b:00.1") {
		t.Errorf("rdmactl doctor --scope policy fails on a lost adapter (the rollout gate must not): exit %d\n%s", code, out)
	}
	gone := ""
	for _, l := range strings.Split(d.Log(), "\n") {
		if strings.Contains(l, "RDMA device gone") {
			gone = l
		}
	}
	if !strings.Contains(gone, "level=WARN") || !strings.Contains(gone, "pci=0000:3b:00.1") || !strings.Contains(gone, "device=mlx5_1") {
		t.Errorf("the departure's log line: %q", gone)
	}
	eventually(t, "the metrics say one mlx5 device and two expectations missing", func() bool {
		n, ok1 := sample(`rdmad_devices_by_driver{driver="mlx5_core"}`)
		m, ok2 := sample("rdmad_expect_missing")
		all, ok3 := sample("rdmad_devices")
		return ok1 && ok2 && ok3 && n == 1 && m == 2 && all == 3
	})
}
