package main_test

import (
	"bufio"
	"encoding/json"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rdmad/rdmad/daemon/fixturekernel"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
)

// qualifiedHost is the demo host with the lossless drop-in applied by a
// running rdmad on a private bus, settled.
func qualifiedHost(t *testing.T) (root, addr string, p *proc) {
	t.Helper()
	addr = privateBus(t)
	root, env := losslessHost(t)
	p = startRdmad(t, env, "--root", root, "--bus", addr)
	eventually(t, "the lossless profile holds on mlx5_0", func() bool {
		out, err := exec.Command(rdmactlBin, "--bus", addr, "qos", "show", "mlx5_0").CombinedOutput()
		return err == nil && strings.Contains(string(out), "mlx5_0/1  ens1f0np0  dscp   3") && !strings.Contains(string(out), "differs")
	})
	return root, addr, p
}

type qualifyDoc struct {
	Rdmad      string   `json:"rdmad"`
	Kernel     string   `json:"kernel"`
	Notes      []string `json:"notes"`
	Unrestored []string `json:"unrestored"`
	Ports      []struct {
		Device  string `json:"device"`
		Port    int    `json:"port"`
		Netdev  string `json:"netdev"`
		Driver  string `json:"driver"`
		Held    bool   `json:"held"`
		Refused string `json:"refused"`
		Results []struct {
			Setting        string   `json:"setting"`
			Result         string   `json:"result"`
			Notice         string   `json:"notice"`
			Notified       bool     `json:"notified"`
			NotificationMS float64  `json:"notification_ms"`
			LinkToggled    bool     `json:"link_toggled"`
			Restored       bool     `json:"restored"`
			Disagrees      []string `json:"disagrees"`
		} `json:"results"`
	} `json:"ports"`
}

// rdmactl qualify --root on the ConnectX-5 of a fixture that carries its
// DCB state, with rdmad running there on the lossless drop-in: rdmad holds
// off its corrections for the port (it logs the hold and its end, and
// corrects nothing meanwhile), PFC interrupts traffic (mlx5 toggles the
// link), every result agrees with rdmad's notification table, and every
// file of the fixture is as it was before.
func TestQualifyFixtureWithRdmad(t *testing.T) {
	t.Parallel() // a bus and a host of its own; the test mostly waits
	root, addr, p := qualifiedHost(t)
	before := hosttest.Tree(t, root)
	corrected := strings.Count(p.logs.String(), "corrected a setting changed behind rdmad's back")
	out, err := exec.Command(rdmactlBin, "--bus", addr, "-o", "json", "qualify", "--root", root, "--yes", "--wait", "300ms", "mlx5_0").Output()
	if err != nil {
		t.Fatalf("rdmactl qualify: %v\n%s", err, out)
	}
	var doc qualifyDoc
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if doc.Rdmad != "holding off" || len(doc.Ports) != 1 || !doc.Ports[0].Held || doc.Ports[0].Driver != "mlx5_core" || len(doc.Unrestored) != 0 {
		t.Fatalf("report:\n%s", out)
	}
	results := map[string]string{}
	for _, r := range doc.Ports[0].Results {
		results[r.Setting] = r.Result
		if len(r.Disagrees) > 0 {
			t.Errorf("%s disagrees with rdmad's tables: %q", r.Setting, r.Disagrees)
		}
		if !r.Restored && r.Result != "not offered" {
			t.Errorf("%s not put back: %+v", r.Setting, r)
		}
		if r.Setting == "qos_pfc" && (!r.LinkToggled || !r.Notified || r.Notice != "dcb") {
			t.Errorf("PFC: %+v", r)
		}
	}
	if results["qos_pfc"] != "interrupts traffic" || results["roce_tos"] != "works" || results["qos_trust"] != "works" ||
		results["qos_pfc_storm_timeout"] != "no notification" {
		t.Errorf("results %v", results)
	}
	for _, n := range doc.Notes {
		if strings.Contains(n, "notifications not compared") {
			t.Errorf("rdmad's notification table was not compared: %s", n)
		}
	}
	eventually(t, "rdmad logs the hold and its end", func() bool {
		l := p.logs.String()
		return strings.Contains(l, `msg="corrections held" subject=mlx5_0/1`) && strings.Contains(l, `msg="corrections released" subject=mlx5_0/1`)
	})
	if n := strings.Count(p.logs.String(), "corrected a setting changed behind rdmad's back"); n != corrected {
		t.Errorf("rdmad corrected %d settings while qualify held them", n-corrected)
	}
	time.Sleep(300 * time.Millisecond) // rdmad reads the port again after the hold: it must find nothing to do
	if d := hosttest.TreeDiff(before, hosttest.Tree(t, root)); len(d) > 0 {
		t.Errorf("the fixture differs after qualify:\n%s", strings.Join(d, "\n"))
	}
	if out, _ := exec.Command(rdmactlBin, "--bus", addr, "status").CombinedOutput(); strings.Contains(string(out), "corrections held") {
		t.Errorf("status still shows a hold:\n%s", out)
	}
}

// SIGTERM during a qualification: the setting under way is put back, the
// hold released, and every file of the fixture is as it was; rdmactl says
// so and exits 1.
func TestQualifySIGTERMPutsBack(t *testing.T) {
	t.Parallel() // a bus and a host of its own; the test mostly waits
	root, addr, p := qualifiedHost(t)
	before := hosttest.Tree(t, root)
	cmd := exec.Command(rdmactlBin, "--bus", addr, "qualify", "--root", root, "--yes", "--wait", "3s", "mlx5_0/1")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var rest strings.Builder
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(stdout)
	for lines.Scan() {
		rest.WriteString(lines.Text() + "\n")
		if strings.HasPrefix(lines.Text(), "roce_mode ") {
			break // roce_tos is under way, its wait 3 s long
		}
	}
	time.Sleep(200 * time.Millisecond)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(stdout)
	rest.Write(b)
	err = cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Errorf("rdmactl qualify after SIGTERM: %v\n%s", err, rest.String())
	}
	if !strings.Contains(rest.String(), "stopped by a signal: every value tried was put back") ||
		!strings.Contains(rest.String(), "roce_tos ") || strings.Contains(rest.String(), "qos_pfc    ") {
		t.Errorf("output:\n%s", rest.String())
	}
	eventually(t, "the hold is released", func() bool {
		return strings.Contains(p.logs.String(), `msg="corrections released" subject=mlx5_0/1`)
	})
	if d := hosttest.TreeDiff(before, hosttest.Tree(t, root)); len(d) > 0 {
		t.Errorf("the fixture differs after a SIGTERM:\n%s", strings.Join(d, "\n"))
	}
}

// A port whose device carries a process's queue pair is refused: rdmactl
// names it and exits 1, and nothing changes.
func TestQualifyRefusesUserQueuePairs(t *testing.T) {
	root := hosttest.Copy(t, "mlx5")
	hosttest.Write(t, root, fixturekernel.QPFile, `{"qp": [
  {"device": "mlx5_0", "port": 1, "lqpn": 1, "type": "GSI", "state": "RTS", "kernel": "ib_core"},
  {"device": "mlx5_0", "port": 1, "lqpn": 812, "type": "RC", "state": "RTS", "pid": 4242}
]}
`)
	before := hosttest.Tree(t, root)
	out, err := exec.Command(rdmactlBin, "--bus", "unix:path="+filepath.Join(t.TempDir(), "none"), "qualify", "--root", root, "--yes", "mlx5_0/1").CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 ||
		!strings.Contains(string(out), "mlx5_0/1 (ens1f0np0): not tried: it carries traffic: RC queue pair 812 of pid 4242; stop those users first, or --force") {
		t.Errorf("exit %v:\n%s", err, out)
	}
	if d := hosttest.TreeDiff(before, hosttest.Tree(t, root)); len(d) > 0 {
		t.Errorf("a refused port changed the fixture:\n%s", strings.Join(d, "\n"))
	}
}
