// Package bustest starts a real dbus-daemon for tests, with the private
// configuration test/bus/bus.conf.in (everyone may connect, own names and
// call: rdmad's own authorization is what the tests exercise).
package bustest

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rdmad/rdmad/daemon/host/hosttest"
)

// Start runs dbus-daemon with its socket in a short directory every uid
// may enter (a socket path is limited to 108 bytes; a test may connect as
// another user) and returns the bus address. The daemon stops when the
// test ends. Without dbus-daemon the test is skipped (test/install-deps.sh
// installs it).
func Start(t testing.TB) string {
	t.Helper()
	if _, err := exec.LookPath("dbus-daemon"); err != nil {
		t.Skip("dbus-daemon not installed (test/install-deps.sh installs it)")
	}
	dir := PublicDir(t)
	addr, stop, err := Run(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return addr
}

// StartProcess is Start that also returns the dbus-daemon process, for a
// test that stops it (SIGSTOP) to play a bus that does not read.
func StartProcess(t testing.TB) (string, *os.Process) {
	t.Helper()
	if _, err := exec.LookPath("dbus-daemon"); err != nil {
		t.Skip("dbus-daemon not installed (test/install-deps.sh installs it)")
	}
	addr, cmd, err := run(PublicDir(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return addr, cmd.Process
}

// Run starts dbus-daemon with its socket and configuration in dir and
// returns its address and how to stop it.
func Run(dir string) (addr string, stop func(), err error) {
	addr, cmd, err := run(dir)
	if err != nil {
		return "", nil, err
	}
	return addr, func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}, nil
}

func run(dir string) (string, *exec.Cmd, error) {
	tmpl, err := os.ReadFile(filepath.Join(hosttest.RepoRoot(), "test/bus/bus.conf.in"))
	if err != nil {
		return "", nil, err
	}
	conf := filepath.Join(dir, "bus.conf")
	sock := filepath.Join(dir, "bus.sock")
	if err := os.WriteFile(conf, []byte(strings.ReplaceAll(string(tmpl), "@SOCKET@", sock)), 0o644); err != nil {
		return "", nil, err
	}
	cmd := exec.Command("dbus-daemon", "--config-file", conf, "--print-address", "--nofork", "--nopidfile")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("dbus-daemon: %w", err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return "", nil, fmt.Errorf("dbus-daemon gave no address: %w", err)
	}
	go io.Copy(io.Discard, out)
	return strings.TrimSpace(line), cmd, nil
}

// PublicDir makes a temporary directory every uid can enter, for a bus a
// test reaches as another user; it is removed when the test ends.
func PublicDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "rdmad-bus-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}
