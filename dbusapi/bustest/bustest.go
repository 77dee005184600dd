// Package bustest starts a real, private dbus-daemon for tests, with the
// configuration in test/bus/bus.conf.in (everyone may connect, own names and
// call, as the tests need).
package bustest

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// confTemplate is test/bus/bus.conf.in of this repository.
func confTemplate() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "test", "bus", "bus.conf.in")
}

// Start runs dbus-daemon with its socket in dir (which must be readable by
// every uid a test connects as) and returns the bus address. The daemon is
// stopped when the test ends. The test is skipped where dbus-daemon is not
// installed (make test installs it).
func Start(t testing.TB, dir string) string {
	t.Helper()
	if _, err := exec.LookPath("dbus-daemon"); err != nil {
		t.Skip("dbus-daemon not installed (apt-get install dbus-daemon)")
	}
	tmpl, err := os.ReadFile(confTemplate())
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "bus.sock")
	conf := filepath.Join(dir, "bus.conf")
	if err := os.WriteFile(conf, []byte(strings.ReplaceAll(string(tmpl), "@SOCKET@", sock)), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("dbus-daemon", "--config-file", conf, "--print-address", "--nofork", "--nopidfile")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("dbus-daemon gave no address: %v", err)
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	return strings.TrimSpace(line)
}
