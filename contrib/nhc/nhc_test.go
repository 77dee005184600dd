// Package nhc tests rdmad.nhc, the LBNL NHC check on rdmactl doctor, with
// its bash harness (check_rdmad_test.sh: NHC's die and dbg stubbed), the
// real rdmactl and a real rdmad on a fixture host.
package nhc

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/test/bustest"
	"github.com/rdmad/rdmad/test/livetest"
)

var bins livetest.Binaries

func TestMain(m *testing.M) { livetest.Main(m, &bins) }

// stateDir is where check_rdmad counts the runs without an answer (its
// /run directory on a node).
var stateDir string

func harness(t *testing.T, rdmactl, expect string, args ...string) {
	t.Helper()
	cmd := exec.Command("bash", append([]string{"./check_rdmad_test.sh", expect}, args...)...)
	cmd.Env = append(os.Environ(), "RDMAD_RDMACTL="+rdmactl, "RDMAD_STATE_DIR="+stateDir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("check_rdmad %v, want %q: %v\n%s", args, expect, err, out)
	}
}

func TestCheckRdmad(t *testing.T) {
	addr := bustest.Start(t)
	root, env := livetest.DemoHost(t)
	livetest.Start(t, bins, addr, root, env)
	rdmactl := bins.Rdmactl + " --bus " + addr
	stateDir = t.TempDir()

	harness(t, rdmactl, "pass")
	hosttest.Write(t, root, "etc/rdma/rdmad.d/50-expect.toml", "[[expect]]\ndevice = \"rxe0\"\nrate = 1000\n")
	_ = exec.Command(bins.Rdmactl, "--bus", addr, "reload").Run()
	harness(t, rdmactl, "check_rdmad: rdmad: port-rate-low rxe0/1: rxe0/1 runs at 10 Gb/s")

	// A lost adapter: the rule that names it by PCI address fails.
	hosttest.Write(t, root, "etc/rdma/rdmad.d/50-expect.toml", "[[expect]]\npci = \"0000:3b:00.1\"\nstate = \"up\"\n")
	_ = exec.Command(bins.Rdmactl, "--bus", addr, "reload").Run()
	harness(t, rdmactl, "pass")
	link := filepath.Join(root, "sys/class/infiniband/mlx5_1")
	target, err := os.Readlink(link)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(link); err != nil {
		t.Fatal(err)
	}
	_ = exec.Command(bins.Rdmactl, "--bus", addr, "reconcile").Run()
	harness(t, rdmactl, `check_rdmad: rdmad: expect-missing mlx5_1: the [[expect]] rule at `)
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	_ = exec.Command(bins.Rdmactl, "--bus", addr, "reconcile").Run()

	// verify's first failing step (no RDMA tool installed here).
	if err := os.Remove(filepath.Join(root, "etc/rdma/rdmad.d/50-expect.toml")); err != nil {
		t.Fatal(err)
	}
	_ = exec.Command(bins.Rdmactl, "--bus", addr, "reload").Run()
	t.Setenv("PATH", "/usr/bin:/bin")
	if _, err := exec.LookPath("ibv_rc_pingpong"); err == nil {
		t.Setenv("PATH", t.TempDir()+":"+filepath.Dir(mustLook(t, "timeout"))+":"+filepath.Dir(mustLook(t, "awk")))
	}
	harness(t, rdmactl, "check_rdmad: rdmad: verify-rc mlx4_0/1: ibv_rc_pingpong is not installed", "-v", "--root "+root+" --timeout 2s --size 1K")

	// rdmad does not answer: the node goes offline only on the third run
	// in a row without an answer; an answer starts the count again.
	silent := bins.Rdmactl + " --bus unix:path=/nonexistent/bus"
	harness(t, silent, "pass")
	harness(t, silent, "pass")
	harness(t, rdmactl, "pass")
	harness(t, silent, "pass")
	harness(t, silent, "pass")
	harness(t, silent, "check_rdmad: rdmad: no-answer host: doctor did not answer 3 times in a row: rdmactl:")
	harness(t, rdmactl, "pass")
	hang := filepath.Join(t.TempDir(), "hang")
	if err := os.WriteFile(hang, []byte("#!/bin/sh\nexec sleep 30\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	harness(t, hang, "check_rdmad: rdmad: no-answer host: doctor did not answer 1 times in a row: no answer within 1s", "-t", "1", "-n", "1")
	harness(t, rdmactl, "check_rdmad: usage", "-x")
}

func mustLook(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil || strings.Contains(p, " ") {
		t.Skipf("%s: %v", name, err)
	}
	return p
}
