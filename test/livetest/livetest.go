// Package livetest runs the real rdmad and rdmactl binaries on a private
// dbus-daemon (test/bustest) and a fixture host, for tests of the tools around rdmad (the
// Ansible role, third-party D-Bus clients) that must talk to the real thing.
package livetest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rdmad/rdmad/daemon/host/hosttest"
)

// Binaries are rdmad and rdmactl built from this tree.
type Binaries struct {
	Dir, Rdmad, Rdmactl string
}

// Build compiles rdmad and rdmactl into dir.
func Build(dir string) (Binaries, error) {
	b := Binaries{Dir: dir, Rdmad: filepath.Join(dir, "rdmad"), Rdmactl: filepath.Join(dir, "rdmactl")}
	repo := hosttest.RepoRoot()
	for bin, pkg := range map[string]string{b.Rdmad: "./cmd/rdmad", b.Rdmactl: "./cmd/rdmactl"} {
		cmd := exec.Command("go", "build", "-o", bin, pkg)
		cmd.Dir = repo
		if out, err := cmd.CombinedOutput(); err != nil {
			return b, fmt.Errorf("go build %s: %w\n%s", pkg, err, out)
		}
	}
	return b, nil
}

// Main builds the binaries into a temporary directory for the whole test
// binary, runs the tests and removes the directory: a TestMain is
//
//	func TestMain(m *testing.M) { livetest.Main(m, &bins) }
func Main(m *testing.M, b *Binaries) {
	dir, err := os.MkdirTemp("", "rdmad-livetest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if *b, err = Build(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// DemoHost copies the demo fixture host with the shipped rdmad.toml and puts
// a modprobe first in PATH (in the returned environment) that lists the
// modules it is asked for in the fixture's proc/modules, as loading does.
func DemoHost(t testing.TB) (root string, env []string) {
	t.Helper()
	root = hosttest.Copy(t, "demo")
	shipped, err := os.ReadFile(filepath.Join(hosttest.RepoRoot(), "etc/rdma/rdmad.toml"))
	if err != nil {
		t.Fatal(err)
	}
	hosttest.Write(t, root, "etc/rdma/rdmad.toml", string(shipped))
	if err := os.MkdirAll(filepath.Join(root, "etc/rdma/rdmad.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	script := "#!/bin/sh\nshift # -a\nfor m in \"$@\"; do echo \"$m 16384 0 - Live 0x0\" >> " + filepath.Join(root, "proc/modules") + "; done\n"
	if err := os.WriteFile(filepath.Join(bin, "modprobe"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return root, append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"))
}

// Daemon is a running rdmad.
type Daemon struct {
	Addr string
	cmd  *exec.Cmd
	logs *SyncBuffer
	done chan struct{} // closed when rdmad has exited; err is then set
	err  error
}

// Start runs rdmad --root root --bus addr and waits until it answers
// `rdmactl status` (it owns its name only after the first pass). It is
// stopped with SIGTERM when the test ends, and its log is shown if the test
// failed.
func Start(t testing.TB, b Binaries, addr, root string, env []string) *Daemon {
	t.Helper()
	d := &Daemon{Addr: addr, logs: &SyncBuffer{}, done: make(chan struct{})}
	d.cmd = exec.Command(b.Rdmad, "--root", root, "--bus", addr)
	d.cmd.Env = env
	d.cmd.Stdout, d.cmd.Stderr = d.logs, d.logs
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { d.err = d.cmd.Wait(); close(d.done) }()
	t.Cleanup(func() {
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.done:
		case <-time.After(10 * time.Second):
			_ = d.cmd.Process.Kill()
			<-d.done
		}
		if t.Failed() {
			t.Logf("rdmad log:\n%s", d.logs.String())
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		if err := exec.Command(b.Rdmactl, "--bus", addr, "status").Run(); err == nil {
			return d
		}
		select {
		case <-d.done:
			t.Fatalf("rdmad exited: %v\n%s", d.err, d.logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("rdmad did not answer on the bus:\n%s", d.logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Log is what rdmad printed so far.
func (d *Daemon) Log() string { return d.logs.String() }

// Signal sends sig to rdmad (SIGSTOP: an rdmad that no longer answers).
func (d *Daemon) Signal(sig os.Signal) error { return d.cmd.Process.Signal(sig) }

// SyncBuffer collects a child process's output while a test reads it.
type SyncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

// Write implements io.Writer.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String is everything written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
