package main_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/test/livetest"
)

// proc is an rdmad started by a test.
type proc struct {
	cmd  *exec.Cmd
	logs *livetest.SyncBuffer
	done chan struct{}
	err  error // Wait's, once done is closed
}

func startRdmad(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	return startBinary(t, rdmadBin, env, args...)
}

// startBinary starts bin (an rdmad build) with env; it is killed at the
// end of the test, and its log shown if the test failed.
func startBinary(t *testing.T, bin string, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(bin, args...), logs: &livetest.SyncBuffer{}, done: make(chan struct{})}
	p.cmd.Env = env
	p.cmd.Stderr = p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		if p.running() {
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("rdmad %v log (its end):\n%s", args, tail(p.logs.String(), 16000))
		}
	})
	return p
}

func (p *proc) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

func (p *proc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Fatal(err)
	}
}

// exit waits for the process to end and describes how it ended: "exit N"
// or "signal NAME".
func (p *proc) exit(t *testing.T, within time.Duration) string {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(within):
		t.Fatalf("rdmad still running after %s", within)
	}
	ws := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		return "signal " + ws.Signal().String()
	}
	return "exit " + strconv.Itoa(ws.ExitStatus())
}

// silentBus is a socket that accepts connections and never answers: a bus
// whose socket is up (socket activation) while dbus-daemon is not yet.
// accepted is closed at the first connection.
func silentBus(t *testing.T) (addr string, accepted chan struct{}) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "bus.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	accepted = make(chan struct{})
	var conns []net.Conn
	go func() {
		first := true
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
			if first {
				close(accepted)
				first = false
			}
		}
	}()
	t.Cleanup(func() {
		l.Close()
		for _, c := range conns {
			c.Close()
		}
	})
	return "unix:path=" + sock, accepted
}

// Before the bus answers, a SIGHUP is a reload request, not a kill, and a
// SIGTERM still stops rdmad at once, cleanly.
func TestSignalsBeforeTheBusIsUp(t *testing.T) {
	root, env, _ := demoHost(t)
	addr, accepted := silentBus(t)
	p := startRdmad(t, env, "--root", root, "--bus", addr)
	select {
	case <-accepted:
	case <-p.done:
		t.Fatalf("rdmad ended before connecting: %v", p.err)
	case <-time.After(20 * time.Second):
		t.Fatal("rdmad never connected to the bus")
	}
	p.signal(t, syscall.SIGHUP)
	time.Sleep(300 * time.Millisecond)
	if !p.running() {
		t.Fatalf("a SIGHUP while connecting to the bus stopped rdmad: %s", p.exit(t, 0))
	}
	p.signal(t, syscall.SIGTERM)
	if got := p.exit(t, 5*time.Second); got != "exit 0" {
		t.Errorf("SIGTERM while connecting to the bus: %s, want exit 0", got)
	}
}

// blockingHost is the demo host whose first pass waits in modprobe: the
// rdma_cm module (and with it configfs rdma_cm) is missing, and the test's
// modprobe waits for release before "loading" it, i.e. putting configfs
// rdma_cm back.
func blockingHost(t *testing.T) (root string, env []string, calls, release string) {
	t.Helper()
	root, _, _ = demoHost(t)
	mods := hosttest.Read(t, root, host.ProcModules)
	var kept []string
	for _, l := range strings.Split(mods, "\n") {
		if !strings.HasPrefix(l, "rdma_cm ") {
			kept = append(kept, l)
		}
	}
	hosttest.Write(t, root, host.ProcModules, strings.Join(kept, "\n")+"\n")
	saved := filepath.Join(root, "saved_rdma_cm")
	if err := os.Rename(filepath.Join(root, host.ConfigfsRdmaCM), saved); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	calls, release = filepath.Join(dir, "calls"), filepath.Join(dir, "release")
	script := "echo \"$@\" >> " + calls + "\n" +
		"case \" $* \" in *\" rdma_cm \"*)\n" +
		"  while [ ! -e " + release + " ]; do sleep 0.05; done\n" +
		"  mv " + saved + " " + filepath.Join(root, host.ConfigfsRdmaCM) + " 2>/dev/null\n" +
		"  echo 'rdma_cm 16384 0 - Live 0x0' >> " + filepath.Join(root, host.ProcModules) + ";;\n" +
		"esac\n"
	return root, hosttest.CommandInPath(t, "modprobe", script), calls, release
}

func waitFor(t *testing.T, p *proc, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if !p.running() {
			t.Fatalf("rdmad ended (%v) while waiting for: %s", p.err, what)
		}
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func fileContains(name, s string) func() bool {
	return func() bool { b, _ := os.ReadFile(name); return strings.Contains(string(b), s) }
}

// A SIGHUP during the first pass (held in modprobe) is served once the
// pass ends: the edit it announces is applied, and rdmad goes on to take
// its bus name.
func TestSIGHUPDuringTheFirstPassReloads(t *testing.T) {
	root, env, calls, release := blockingHost(t)
	addr := privateBus(t)
	p := startRdmad(t, env, "--root", root, "--bus", addr)
	waitFor(t, p, "the first pass waits in modprobe rdma_cm", fileContains(calls, "rdma_cm"))
	// An edit the watcher would also see; the SIGHUP asks for it at once.
	hosttest.Write(t, root, "etc/rdma/rdmad.d/50-roce.toml", "[[roce]]\ndevice = \"mlx5_*\"\ntos = 44\n")
	p.signal(t, syscall.SIGHUP)
	time.Sleep(100 * time.Millisecond)
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	ctl := func() bool { return exec.Command(rdmactlBin, "--bus", addr, "status").Run() == nil }
	waitFor(t, p, "rdmad answers on the bus", ctl)
	tos := func() bool {
		b, _ := os.ReadFile(filepath.Join(root, host.ConfigfsPortPath("mlx5_0", 1, "default_roce_tos")))
		return strings.TrimSpace(string(b)) == "44"
	}
	waitFor(t, p, "the reloaded TOS 44 reaches configfs", tos)
	p.signal(t, syscall.SIGTERM)
	if got := p.exit(t, 5*time.Second); got != "exit 0" {
		t.Errorf("SIGTERM: %s, want exit 0", got)
	}
}

// A SIGTERM while the first pass waits in modprobe stops rdmad at once:
// the modprobe is killed, nothing waits for it.
func TestSIGTERMDuringTheFirstPass(t *testing.T) {
	root, env, calls, _ := blockingHost(t)
	addr := privateBus(t)
	p := startRdmad(t, env, "--root", root, "--bus", addr)
	waitFor(t, p, "the first pass waits in modprobe rdma_cm", fileContains(calls, "rdma_cm"))
	p.signal(t, syscall.SIGTERM)
	if got := p.exit(t, 5*time.Second); got != "exit 0" {
		t.Errorf("SIGTERM during the first pass: %s, want exit 0", got)
	}
}

// SIGHUPs at any moment of start-up (from the instance lock on; earlier
// moments: TestSignalsBeforeTheBusIsUp), the first pass, service and
// shutdown never kill rdmad, and SIGTERM always ends it with exit 0.
func TestSignalStormThroughStartAndShutdown(t *testing.T) {
	root, env, _ := demoHost(t)
	addr := privateBus(t)
	for i := range 6 {
		p := startRdmad(t, env, "--root", root, "--bus", addr)
		// From the moment rdmad holds its lock (its handlers are in
		// place before): the microseconds between the Go runtime's start
		// and rdmad's first instruction are any program's, where the
		// kernel's default action applies.
		lockFile := filepath.Join(root, host.LockFile)
		pid := strconv.Itoa(p.cmd.Process.Pid) + "\n"
		deadline := time.Now().Add(20 * time.Second)
		for p.running() {
			if b, _ := os.ReadFile(lockFile); string(b) == pid {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: rdmad never took its lock %s", i, lockFile)
			}
			time.Sleep(100 * time.Microsecond)
		}
		// Round i sends its SIGTERM at a different moment: at once,
		// during start-up, after it is up.
		termAt := time.Now().Add(time.Duration(i*i) * 40 * time.Millisecond)
		termSent := false
		var stopAt time.Time
		for p.running() {
			p.signal(t, syscall.SIGHUP)
			now := time.Now()
			if !termSent && now.After(termAt) {
				p.signal(t, syscall.SIGTERM)
				termSent, stopAt = true, now
			}
			if termSent && now.Sub(stopAt) > 10*time.Second {
				t.Fatalf("round %d: rdmad did not stop within 10s of SIGTERM", i)
			}
			time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond)
		}
		if got := p.exit(t, time.Second); got != "exit 0" {
			t.Fatalf("round %d (SIGTERM after %s): %s, want exit 0", i, time.Duration(i*i)*40*time.Millisecond, got)
		}
	}
}

// A second rdmad started by mistake on the same host stops before it
// touches anything, says why and who runs, and leaves the first one
// serving; the same goes for rdmad --once.
func TestSecondInstanceStopsBeforeTouchingTheHost(t *testing.T) {
	root, env, calls := demoHost(t)
	// The first one reports a change behind its back and leaves it.
	hosttest.Write(t, root, "etc/rdma/rdmad.d/60-report.toml", "[drift]\naction = \"report\"\n")
	addr := privateBus(t)
	first := startRdmad(t, env, "--root", root, "--bus", addr)
	ctl := func() bool { return exec.Command(rdmactlBin, "--bus", addr, "status").Run() == nil }
	waitFor(t, first, "the first rdmad answers on the bus", ctl)
	// Drift the first one only reports: a second reconciler would put it
	// back.
	tosFile := filepath.Join(root, host.ConfigfsPortPath("mlx5_0", 1, "default_roce_tos"))
	if err := os.WriteFile(tosFile, []byte("3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, first, "the first rdmad reports the drift", func() bool {
		out, _ := exec.Command(rdmactlBin, "--bus", addr, "status").CombinedOutput()
		return strings.Contains(string(out), "106") && strings.Contains(string(out), "do not hold")
	})
	before := snapshot(t, root)
	callsBefore, _ := os.ReadFile(calls)

	for _, args := range [][]string{
		{"--root", root, "--bus", addr},
		{"--root", root, "--bus", "none"},
		{"--root", root, "--once"},
	} {
		second := startRdmad(t, env, args...)
		if got := second.exit(t, 10*time.Second); got != "exit 1" {
			t.Errorf("second rdmad %v: %s, want exit 1", args, got)
		}
		msg := second.logs.String()
		if !strings.Contains(msg, "another rdmad is running") || !strings.Contains(msg, fmt.Sprintf("pid %d", first.cmd.Process.Pid)) {
			t.Errorf("second rdmad %v does not say that rdmad (pid %d) runs:\n%s", args, first.cmd.Process.Pid, msg)
		}
	}
	if after := snapshot(t, root); after != before {
		t.Errorf("the second rdmad changed the host")
	}
	if b, _ := os.ReadFile(calls); string(b) != string(callsBefore) {
		t.Errorf("the second rdmad ran modprobe: %q", b)
	}
	if !first.running() || !ctl() {
		t.Fatal("the first rdmad stopped serving")
	}
	first.signal(t, syscall.SIGTERM)
	if got := first.exit(t, 5*time.Second); got != "exit 0" {
		t.Errorf("first rdmad: %s", got)
	}
	// Its lock died with it: a new one starts.
	third := startRdmad(t, env, "--root", root, "--once")
	if got := third.exit(t, 10*time.Second); got != "exit 0" {
		t.Errorf("rdmad --once after the daemon stopped: %s", got)
	}
	if got := hosttest.Read(t, root, host.ConfigfsPortPath("mlx5_0", 1, "default_roce_tos")); got != "106" {
		t.Errorf("drift not repaired by the next rdmad: tos %s", got)
	}
}

// Temp files an interrupted atomic write left beside rdmad's files are
// removed at start; anybody else's are not.
func TestStaleTempFilesAreRemovedAtStart(t *testing.T) {
	root, env, _ := demoHost(t)
	hosttest.Write(t, root, "etc/rdma/rdmad.d/40-metrics.toml", "[metrics]\ntextfile = \"/var/lib/node_exporter/rdmad.prom\"\n")
	stale := []string{
		"var/lib/node_exporter/.rdmad.prom.tmp-77",
		"etc/rdma/rdmad.d/.zz-rdmad-persist.toml.tmp-2718281828",
		"etc/security/limits.d/.90-rdmad-memlock.conf.tmp-1",
		"etc/modprobe.d/.rdmad-netns.conf.tmp-31415",
	}
	foreign := []string{
		"etc/rdma/rdmad.d/.50-roce.toml.tmp-1", // an editor's, or another tool's
		"etc/modprobe.d/.mlx5.conf.tmp-9",
	}
	for _, f := range append(append([]string{}, stale...), foreign...) {
		hosttest.Write(t, root, f, "half written")
	}
	out, errOut, code := rdmad(t, env, "--root", root, "--once")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	for _, f := range stale {
		if _, err := os.Stat(filepath.Join(root, f)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("stale %s not removed (%v)", f, err)
		}
	}
	for _, f := range foreign {
		if _, err := os.Stat(filepath.Join(root, f)); err != nil {
			t.Errorf("%s is not rdmad's and was removed: %v", f, err)
		}
	}
}
