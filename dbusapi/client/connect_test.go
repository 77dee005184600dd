package client

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rdmad/rdmad/test/bustest"
)

// connectWithin runs ConnectTarget and fails the test if it has not
// returned long after the target's timeout: without a bound it never does.
func connectWithin(t *testing.T, target Target) error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		c, err := ConnectTarget(target)
		if c != nil {
			c.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(target.Timeout + 10*time.Second):
		t.Fatalf("connecting to %+v did not return within %s + 10s", target, target.Timeout)
		return nil
	}
}

// A bus that accepts the connection and then says nothing (a stopped
// dbus-daemon) is given up after the timeout, with the bus named.
func TestConnectToAStoppedBusIsBounded(t *testing.T) {
	addr, proc := bustest.StartProcess(t)
	if err := proc.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer proc.Signal(syscall.SIGCONT)
	start := time.Now()
	err := connectWithin(t, Target{Bus: addr, Timeout: 300 * time.Millisecond})
	var be *BusError
	if !errors.As(err, &be) || !strings.Contains(err.Error(), "does not answer") {
		t.Errorf("stopped bus: %v, want a BusError saying it does not answer", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("gave up after %s", d)
	}
}

// A hostile bus that answers the AUTH line with endless bytes and no
// newline costs rdmactl at most the 16 KiB auth line bound, not memory
// without end (2 GiB took it to 4.3 GB).
func TestAuthLineIsBounded(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "bus")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, 4096)
		if _, err := c.Read(buf); err != nil { // the NUL byte and AUTH
			return
		}
		junk := []byte(strings.Repeat("A", 64<<10))
		for i := 0; i < (256<<20)/len(junk); i++ {
			if _, err := c.Write(junk); err != nil {
				return
			}
		}
	}()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	err = connectWithin(t, Target{Bus: "unix:path=" + sock, Timeout: 20 * time.Second})
	runtime.ReadMemStats(&after)
	if err == nil {
		t.Fatal("connected to a bus that answered AUTH with junk")
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 8<<20 {
		t.Errorf("the junk answer cost %d bytes of allocation", alloc)
	}
}

// fakeSSHScript puts an ssh first in PATH that runs body.
func fakeSSHScript(t *testing.T, body string) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "ssh"), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+":"+os.Getenv("PATH"))
}

// A remote that never answers (-H to a host whose bridge hangs) is given
// up after the timeout, and one that answers with endless bytes is cut at
// the auth line bound.
func TestSSHConnectIsBounded(t *testing.T) {
	fakeSSHScript(t, "exec sleep 60")
	err := connectWithin(t, Target{Host: "node7", Timeout: 300 * time.Millisecond})
	var se *SSHError
	if !errors.As(err, &se) {
		t.Errorf("silent remote: %v, want an SSHError", err)
	}
	fakeSSHScript(t, "exec cat /dev/zero")
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	err = connectWithin(t, Target{Host: "node7", Timeout: 20 * time.Second})
	runtime.ReadMemStats(&after)
	if !errors.As(err, &se) {
		t.Errorf("endless remote: %v, want an SSHError", err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 8<<20 {
		t.Errorf("the endless answer cost %d bytes of allocation", alloc)
	}
}

// What the remote side writes to stderr reaches the terminal escaped
// (no title, no clear screen, no forged line; ssh's own \r\n line ends
// stay line ends), and the hint is the ssh command rdmactl ran, quoted
// for a shell.
func TestSSHStderrIsEscapedAndTheHintIsTheCommandRun(t *testing.T) {
	fakeSSHScript(t, `printf 'Warning: \033]0;pwned\007\033[2J host key\r\nforged\rline \342\200\256x\r\n' >&2; exit 255`)
	var stderr strings.Builder
	err := connectWithin(t, Target{Host: "root@node7:2222", Timeout: 10 * time.Second, Stderr: &stderr})
	if got, want := stderr.String(), `Warning: \x1b]0;pwned\x07\x1b[2J host key`+"\n"+`forged\x0dline \xe2\x80\xaex`+"\n"; got != want {
		t.Errorf("ssh's stderr reached the terminal as\n%q, want\n%q", got, want)
	}
	if err == nil || !strings.Contains(err.Error(), "ssh -xT -l root -p 2222 -- node7 systemd-stdio-bridge") {
		t.Errorf("hint: %v, want the command run", err)
	}
	for _, c := range []struct{ host, want string }{
		{"node7", "ssh -xT -- node7 systemd-stdio-bridge"},
		{"o'brien@node7", `ssh -xT -l 'o'\''brien' -- node7 systemd-stdio-bridge`},
	} {
		argv, err := SSHCommand(c.host, "")
		if err != nil {
			t.Fatal(err)
		}
		if got := (&SSHError{Host: c.host, Argv: argv}).Error(); !strings.Contains(got, c.want) {
			t.Errorf("-H %s: %s, want the hint %s", c.host, got, c.want)
		}
	}
	for _, host := range []string{"127.0.0.1;touch X", "node7 -oProxyCommand=x", "node\x1b[2J", "node7\u202e"} {
		if _, err := SSHCommand(host, ""); err == nil {
			t.Errorf("-H %q accepted as a host", host)
		}
	}
}
