// Package bustest starts a real dbus-daemon for tests, with the private
// configuration test/bus/bus.conf.in (everyone may connect, own names and
// call: rdmad's own authorization is what the tests exercise).
package bustest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/test/testdeps"
)

// Start runs dbus-daemon with its socket in a short directory every uid
// may enter (a socket path is limited to 108 bytes; a test may connect as
// another user) and returns the bus address. The daemon stops when the
// test ends. Without dbus-daemon the test is skipped (test/install-deps.sh
// installs it).
func Start(t testing.TB) string {
	t.Helper()
	testdeps.Tool(t, "dbus-daemon", "dbus-daemon")
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
	testdeps.Tool(t, "dbus-daemon", "dbus-daemon")
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

// Broker is a kind of bus daemon a test can run: dbus-daemon, the
// reference implementation (Debian, Ubuntu), or dbus-broker (the system
// bus of Fedora and RHEL), which limits clients by per-user quotas rather
// than dbus-daemon's per-connection counts.
type Broker struct {
	Name  string
	Start func(testing.TB) string // the bus address; skips the test when the broker cannot run here
}

// Brokers are the bus daemons rdmad is tested on.
var Brokers = []Broker{{"dbus-daemon", Start}, {"dbus-broker", StartBroker}}

// StartBroker runs Debian's dbus-broker with the same private configuration
// as Start and returns its address; it stops when the test ends. Without
// dbus-broker-launch (test/install-deps.sh installs it where that is
// harmless), or without root (it needs a mount namespace), the test is
// skipped.
//
// dbus-broker-launch expects what systemd gives it: the listening socket
// as fd 3 (LISTEN_FDS), a journal socket to log to, and the bus it serves
// as the system bus (it connects to it as a client). It runs in a private
// mount namespace where /run is a tmpfs holding a journal socket this test
// reads, so the host's /run is not touched.
func StartBroker(t testing.TB) string {
	t.Helper()
	tmpl, err := os.ReadFile(filepath.Join(hosttest.RepoRoot(), "test/bus/bus.conf.in"))
	if err != nil {
		t.Fatal(err)
	}
	// dbus-broker ignores eavesdropping (it is deprecated) and says so.
	text := strings.ReplaceAll(string(tmpl), ` eavesdrop="true"`, "")
	text = strings.ReplaceAll(text, "    <allow/>\n", "")
	return StartBrokerConfig(t, func(sock string) string { return strings.ReplaceAll(text, "@SOCKET@", sock) })
}

// StartBrokerConfig is StartBroker with the bus configuration config
// gives for the socket path (a test of a policy the bus enforces).
func StartBrokerConfig(t testing.TB, config func(socket string) string) string {
	t.Helper()
	if _, err := exec.LookPath("dbus-broker-launch"); err != nil {
		if _, booted := os.Stat("/run/systemd/system"); booted == nil {
			// install-deps.sh leaves it out here: Debian's package would
			// make it the system bus at the next boot.
			t.Skip("dbus-broker not installed (test/install-deps.sh installs it only on a machine not booted with systemd)")
		}
		testdeps.Missing(t, "dbus-broker-launch", "dbus-broker", nil)
	}
	if os.Getuid() != 0 {
		t.Skip("dbus-broker-launch runs in a mount namespace of its own here: needs root")
	}
	dir := PublicDir(t)
	conf := filepath.Join(dir, "bus.conf")
	sock := filepath.Join(dir, "bus.sock")
	if err := os.WriteFile(conf, []byte(config(sock)), 0o644); err != nil {
		t.Fatal(err)
	}
	listener, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	listener.SetUnlinkOnClose(false) // closed here once the launcher has its copy
	if err := os.Chmod(sock, 0o666); err != nil {
		t.Fatal(err)
	}
	lf, err := listener.File()
	if err != nil {
		t.Fatal(err)
	}
	journalDir := filepath.Join(dir, "journal")
	if err := os.Mkdir(journalDir, 0o755); err != nil {
		t.Fatal(err)
	}
	journal, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: filepath.Join(journalDir, "socket"), Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	var logMu sync.Mutex
	var log strings.Builder
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, err := journal.Read(buf)
			if err != nil {
				return
			}
			logMu.Lock()
			if log.Len() < 1<<20 {
				log.WriteString(strings.ReplaceAll(string(buf[:n]), "\n", " ") + "\n")
			}
			logMu.Unlock()
		}
	}()
	const script = `set -e
mount --make-rprivate /
mount -t tmpfs tmpfs /run
mkdir -p /run/systemd/journal
mount --bind "$1" /run/systemd/journal
LISTEN_PID=$$ exec dbus-broker-launch --scope system --config-file "$2"`
	cmd := exec.Command("sh", "-c", script, "sh", journalDir, conf)
	cmd.Env = append(os.Environ(), "LISTEN_FDS=1", "DBUS_SYSTEM_BUS_ADDRESS=unix:path="+sock)
	cmd.ExtraFiles = []*os.File{lf}
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("dbus-broker-launch: %v", err)
	}
	lf.Close()
	listener.Close() // the launcher has its own copy
	t.Cleanup(func() {
		// SIGTERM: the launcher stops its broker and reaps it.
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		journal.Close()
		if t.Failed() {
			logMu.Lock()
			t.Logf("dbus-broker's log:\n%s%s", stderr.String(), log.String())
			logMu.Unlock()
		}
	})
	addr := "unix:path=" + sock
	// The socket accepts at once; the bus answers once the launcher has
	// started the broker and handed it the socket.
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := exec.Command("busctl", "--address="+addr, "call", "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus", "GetId").CombinedOutput()
		if err == nil {
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("dbus-broker did not answer within 10s: %v: %s\n%s", err, out, stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
