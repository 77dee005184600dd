package main_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/daemon/memlock"
)

var rdmadBin, rdmactlBin string

func TestMain(m *testing.M) {
	if spec := os.Getenv(callerEnv); spec != "" {
		os.Exit(runCaller(spec))
	}
	// RDMAD_TEST_BINDIR runs these tests against rdmad and rdmactl built
	// elsewhere (an installed package, an older commit) instead of this tree.
	if dir := os.Getenv("RDMAD_TEST_BINDIR"); dir != "" {
		rdmadBin, rdmactlBin = filepath.Join(dir, "rdmad"), filepath.Join(dir, "rdmactl")
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "rdmad-bin-")
	if err != nil {
		panic(err)
	}
	rdmadBin = filepath.Join(dir, "rdmad")
	rdmactlBin = filepath.Join(dir, "rdmactl")
	for bin, pkg := range map[string]string{rdmadBin: ".", rdmactlBin: "../rdmactl"} {
		if out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
			os.Stderr.Write(out)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// demoHost copies the demo fixture with the shipped config and the example
// drop-in, and puts the test modprobe first in PATH (it records its
// arguments and lists the modules in the fixture's proc/modules, as loading
// them would).
func demoHost(t *testing.T) (root string, env []string, calls string) {
	t.Helper()
	root = hosttest.Copy(t, "demo")
	repo := hosttest.RepoRoot()
	copyFile(t, filepath.Join(repo, "etc/rdma/rdmad.toml"), filepath.Join(root, "etc/rdma/rdmad.toml"))
	copyFile(t, filepath.Join(repo, "docs/examples/50-roce.toml"), filepath.Join(root, "etc/rdma/rdmad.d/50-roce.toml"))
	env, calls = hosttest.ModprobeScript(t, root)
	return root, env, calls
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func rdmad(t *testing.T, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(rdmadBin, args...)
	cmd.Env = env
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return o.String(), e.String(), code
}

func TestOnceAppliesThenChangesNothing(t *testing.T) {
	root, env, calls := demoHost(t)
	out, errOut, code := rdmad(t, env, "--root", root, "--once")
	if code != 0 {
		t.Fatalf("first run exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	for _, want := range []string{
		`changed    mlx5_1/1  roce mode`, `"RoCE v2" -> "IB/RoCE v1"`,
		"changed    rxe0/1    roce tos", `"0" -> "32"`,
		"not-applicable  mlx4_0/1", "changed host modules",
		"/etc/security/limits.d/90-rdmad-memlock.conf",
	} {
		if !strings.Contains(strings.Join(strings.Fields(out), " "), strings.Join(strings.Fields(want), " ")) {
			t.Errorf("first run output lacks %q:\n%s", want, out)
		}
	}
	for port, want := range map[string]string{"mlx5_0": "RoCE v2/106", "mlx5_1": "IB/RoCE v1/106", "rxe0": "RoCE v2/32"} {
		got := hosttest.Read(t, root, host.ConfigfsPortPath(port, 1, "default_roce_mode")) + "/" +
			hosttest.Read(t, root, host.ConfigfsPortPath(port, 1, "default_roce_tos"))
		if got != want {
			t.Errorf("%s port 1 = %s, want %s", port, got, want)
		}
	}
	if got := hosttest.Read(t, root, memlock.LimitsFile); !strings.Contains(got, "@rdma hard memlock unlimited") {
		t.Errorf("limits file = %q", got)
	}
	b, _ := os.ReadFile(calls)
	if got := strings.TrimSpace(string(b)); got != "-a -- ib_ipoib ib_umad ib_iser ib_isert xprtrdma svcrdma" { // ib_uverbs, rdma_ucm: loaded on the demo host
		t.Errorf("modprobe calls = %q", got)
	}

	out, errOut, code = rdmad(t, env, "--root", root, "--once")
	if code != 0 || !strings.Contains(out, "\n0 changed,") || strings.Contains("\n"+out, "\nchanged ") {
		t.Errorf("second run changed something (exit %d):\n%s\n%s", code, out, errOut)
	}
	if b2, _ := os.ReadFile(calls); !bytes.Equal(b, b2) {
		t.Errorf("second run called modprobe again: %q", b2)
	}
}

func TestOnceBadConfigTouchesNothing(t *testing.T) {
	root, env, calls := demoHost(t)
	hosttest.Write(t, root, "etc/rdma/rdmad.d/60-typo.toml", "[[roce]]\ndevice = \"mlx5_0\"\n\ntos = 300\n")
	before := snapshot(t, root)
	out, errOut, code := rdmad(t, env, "--root", root, "--once")
	if code == 0 {
		t.Fatalf("bad config accepted:\n%s", out)
	}
	if !strings.Contains(errOut, "60-typo.toml:4") || !strings.Contains(errOut, "300") {
		t.Errorf("error does not name file:line and value: %q", errOut)
	}
	if after := snapshot(t, root); after != before {
		t.Error("host changed despite the bad config")
	}
	if _, err := os.Stat(calls); !os.IsNotExist(err) {
		t.Error("modprobe ran despite the bad config")
	}
}

func TestOnceReportsFailureWithExitCode(t *testing.T) {
	root, env, _ := demoHost(t)
	// A configfs attribute that cannot be written (as a port the kernel
	// refuses): the run fails, names the port, and still does the rest.
	attr := filepath.Join(root, host.ConfigfsPortPath("mlx5_0", 1, "default_roce_tos"))
	os.Remove(attr)
	os.Mkdir(attr, 0o755)
	out, _, code := rdmad(t, env, "--root", root, "--once")
	if code != 1 {
		t.Fatalf("exit %d, want 1:\n%s", code, out)
	}
	if !strings.Contains(out, "failed") || !strings.Contains(out, "mlx5_0/1") || !strings.Contains(out, "1 failed") {
		t.Errorf("output:\n%s", out)
	}
	if got := hosttest.Read(t, root, host.ConfigfsPortPath("mlx5_1", 1, "default_roce_tos")); got != "106" {
		t.Errorf("mlx5_1 not applied after mlx5_0 failed: %s", got)
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{{"--nope"}, {"extra"}} {
		if _, _, code := rdmad(t, os.Environ(), args...); code != 2 {
			t.Errorf("rdmad %v: exit %d, want 2", args, code)
		}
	}
}

// snapshot is every file under root with its content, to prove nothing moved.
func snapshot(t *testing.T, root string) string {
	t.Helper()
	var b strings.Builder
	filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		b.WriteString(p + "\n")
		if fi.Mode().IsRegular() {
			c, _ := os.ReadFile(p)
			b.Write(c)
		}
		return nil
	})
	return b.String()
}

// A fixture's netdev names (ens1f0np0) may be a real adapter's on the
// machine running the tests: neither RDMA netlink (links) nor DCB netlink
// ([[qos]]) may reach this machine's kernel with --root. The fixture's own
// DCB state takes the [[qos]] rule instead.
func TestOnceUnderRootDoesNotTouchThisKernel(t *testing.T) {
	root, env, _ := demoHost(t)
	hosttest.Write(t, root, "etc/rdma/rdmad.d/70-link.toml", "[[link]]\nname = \"rxe9\"\ntype = \"rxe\"\nnetdev = \"ens2\"\n")
	hosttest.Write(t, root, "etc/rdma/rdmad.d/71-qos.toml", "[[qos]]\ndevice = \"mlx5_0\"\nport = 1\npfc = [3]\n")
	out, _, code := rdmad(t, env, "--root", root, "--once")
	if code != 1 || !strings.Contains(out, "rdma link add rxe9 type rxe netdev ens2: netlink is not used with --root") {
		t.Errorf("exit %d:\n%s", code, out)
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "ens1f0np0") && strings.Contains(line, "fail") {
			t.Errorf("a DCB request for ens1f0np0 failed: %s", line)
		}
	}
	if got := qosOf(t, root, "ens1f0np0").pfc; !slices.Equal(got, []int{3}) {
		t.Errorf("the fixture's ens1f0np0 has PFC %v, want [3]", got)
	}
}
