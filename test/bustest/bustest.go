// Package bustest starts a real dbus-daemon for tests, with the private
// configuration test/bus/bus.conf.in (everyone may connect, own names and
// call: rdmad's own authorization is what the tests exercise).
package bustest

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rdmad/rdmad/daemon/host/hosttest"
)

// Start runs dbus-daemon with its socket in dir (which must be readable by
// every uid a test connects as) and returns the bus address. The daemon
// stops when the test ends. Without dbus-daemon the test is skipped
// (test/install-deps.sh installs it).
func Start(t testing.TB, dir string) string {
	t.Helper()
	if _, err := exec.LookPath("dbus-daemon"); err != nil {
		t.Skip("dbus-daemon not installed (test/install-deps.sh installs it)")
	}
	tmpl, err := os.ReadFile(filepath.Join(hosttest.RepoRoot(), "test/bus/bus.conf.in"))
	if err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "bus.conf")
	sock := filepath.Join(dir, "bus.sock")
	if err := os.WriteFile(conf, []byte(strings.ReplaceAll(string(tmpl), "@SOCKET@", sock)), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("dbus-daemon", "--config-file", conf, "--print-address", "--nofork", "--nopidfile")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("dbus-daemon: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("dbus-daemon gave no address: %v", err)
	}
	go io.Copy(io.Discard, out)
	return strings.TrimSpace(line)
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
