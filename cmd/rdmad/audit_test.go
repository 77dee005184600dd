package main_test

import (
	"bytes"
	"encoding/binary"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/test/livetest"
	"github.com/rdmad/rdmad/test/testdeps"
)

// journalEntry is one datagram of journald's native protocol, parsed.
type journalEntry map[string]string

// parseJournalEntry reads the native protocol as journald does
// (https://systemd.io/JOURNAL_NATIVE_PROTOCOL/): KEY=value lines, or KEY,
// a newline, a little-endian 64-bit length, the value and a newline.
func parseJournalEntry(t *testing.T, b []byte) journalEntry {
	t.Helper()
	e := journalEntry{}
	for len(b) > 0 {
		nl := bytes.IndexByte(b, '\n')
		if nl < 0 {
			t.Fatalf("an entry's field does not end in a newline: %q", b)
		}
		line := b[:nl]
		if k, v, ok := bytes.Cut(line, []byte("=")); ok {
			e[string(k)] = string(v)
			b = b[nl+1:]
			continue
		}
		rest := b[nl+1:]
		if len(rest) < 8 {
			t.Fatalf("field %q without its length", line)
		}
		n := binary.LittleEndian.Uint64(rest[:8])
		if uint64(len(rest)) < 8+n+1 || rest[8+n] != '\n' {
			t.Fatalf("field %q: a value of %d bytes does not fit", line, n)
		}
		e[string(line)] = string(rest[8 : 8+n])
		b = rest[8+n+1:]
	}
	return e
}

// journal listens where journald takes native-protocol datagrams under a
// host root, as journald's own socket does.
type journal struct {
	conn *net.UnixConn
}

func listenJournal(t *testing.T, root string) *journal {
	t.Helper()
	path := filepath.Join(root, "run/systemd/journal/socket")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &journal{conn: c}
}

// until reads entries until one satisfies want, within 20 s, and returns
// every entry read.
func (j *journal) until(t *testing.T, what string, want func(journalEntry) bool) []journalEntry {
	t.Helper()
	var all []journalEntry
	buf := make([]byte, 1<<16)
	deadline := time.Now().Add(20 * time.Second)
	for {
		_ = j.conn.SetReadDeadline(deadline)
		n, err := j.conn.Read(buf)
		if err != nil {
			t.Fatalf("no journal entry %s: %v; read %v", what, err, all)
		}
		e := parseJournalEntry(t, buf[:n])
		all = append(all, e)
		if want(e) {
			return all
		}
	}
}

// busctl runs busctl call on rdmad's Manager and returns its pid.
func busctl(t *testing.T, addr string, args ...string) int {
	t.Helper()
	return busctlAs(t, testdeps.Tool(t, "busctl", "systemd"), addr, args...)
}

// busctlAs is busctl run from the binary bin (a copy under another name:
// its process's command is the name).
func busctlAs(t *testing.T, bin, addr string, args ...string) int {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"--address=" + addr, "call", "org.rdmad1", "/org/rdmad1", "org.rdmad1.Manager"}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("busctl %v: %v\n%s", args, err, out.String())
	}
	return cmd.Process.Pid
}

// A root busctl call of SetRoCE leaves one audit line, at notice
// priority, naming the caller (uid 0 and its name from the host's
// /etc/passwd, the pid, busctl), the method and its arguments. Under
// systemd it goes to the journal's native socket with its fields (here a
// socket the test listens on, the protocol parsed as journald parses it),
// and so does each "applied" line the call causes; the persisted drop-in
// and rdmactl status name the caller; a reload by SIGHUP names the
// signal. A command holding a newline (a copy of busctl so named) is a
// field of its own length, and stays on one line in the drop-in.
func TestAuditTrailInTheJournal(t *testing.T) {
	addr := privateBus(t)
	root, env := livetest.DemoHost(t)
	hosttest.Write(t, root, "etc/passwd", "root:x:0:0:root:/root:/bin/bash\n")
	j := listenJournal(t, root)
	p := startJournaled(t, env, "--root", root, "--bus", addr)
	eventually(t, "rdmad answers on the bus", func() bool { return exec.Command(rdmactlBin, "--bus", addr, "status").Run() == nil })

	pid := busctl(t, addr, "SetRoCE", "susib", "mlx5_0", "1", "v2", "96", "true")
	want := map[string]string{"PRIORITY": "5", "SYSLOG_IDENTIFIER": "rdmad", "RDMAD_METHOD": "SetRoCE", "RDMAD_CALLER_UID": "0",
		"RDMAD_CALLER_USER": "root", "RDMAD_CALLER_PID": strconv.Itoa(pid), "RDMAD_CALLER_COMM": "busctl",
		"RDMAD_ARGS": `device=mlx5_0 port=1 mode=v2 tos=96 persist=true`}
	isAudit := func(e journalEntry) bool { return e["RDMAD_METHOD"] == "SetRoCE" }
	entries := j.until(t, "of the SetRoCE call", isAudit)
	audit := entries[len(entries)-1]
	for k, v := range want {
		if audit[k] != v {
			t.Errorf("audit entry %s=%q, want %q (entry %v)", k, audit[k], v, audit)
		}
	}
	if !strings.HasPrefix(audit["RDMAD_CALLER"], ":") || !strings.Contains(audit["MESSAGE"], `msg="call accepted"`) {
		t.Errorf("audit entry %v", audit)
	}
	// The lines the call caused name the same caller.
	applied := j.until(t, "of the TOS the call applied", func(e journalEntry) bool {
		return strings.Contains(e["MESSAGE"], "msg=applied") && strings.Contains(e["MESSAGE"], "mlx5_0/1")
	})
	if last := applied[len(applied)-1]; last["RDMAD_CALLER_PID"] != strconv.Itoa(pid) || last["RDMAD_CALLER_UID"] != "0" || last["PRIORITY"] != "6" {
		t.Errorf("applied entry %v", last)
	}
	for _, e := range append(entries[:len(entries)-1], applied...) {
		if isAudit(e) {
			t.Errorf("a second audit entry for one call: %v", e)
		}
	}
	if strings.Contains(p.logs(), "call accepted") {
		t.Errorf("the audit line went on the stream too:\n%s", p.logs())
	}

	// The drop-in and rdmactl status name the caller.
	dropIn := hosttest.Read(t, root, filepath.Join(config.DropInDir, config.PersistedName))
	if who := "# set by root (uid 0), pid " + strconv.Itoa(pid) + " busctl"; !strings.Contains(dropIn, who) {
		t.Errorf("rdmad's drop-in lacks %q:\n%s", who, dropIn)
	}
	out, err := exec.Command(rdmactlBin, "--bus", addr, "status").CombinedOutput()
	if err != nil || !strings.Contains(string(out), `mlx5_0/1 roce: mode = "v2", tos = 96 (persisted at `) ||
		!strings.Contains(string(out), "by root (uid 0), pid "+strconv.Itoa(pid)+" busctl") {
		t.Errorf("rdmactl status: %v\n%s", err, out)
	}

	// A command with a newline in its name: the field carries it whole,
	// the drop-in's comment keeps it on one line.
	odd := filepath.Join(t.TempDir(), "bus\nctl")
	if b, err := os.ReadFile(testdeps.Tool(t, "busctl", "systemd")); err != nil || os.WriteFile(odd, b, 0o755) != nil {
		t.Fatalf("copy busctl: %v", err)
	}
	pid = busctlAs(t, odd, addr, "SetRoCE", "susib", "mlx5_1", "1", "v2", "40", "true")
	entries = j.until(t, "of the second SetRoCE call", isAudit)
	if last := entries[len(entries)-1]; last["RDMAD_CALLER_COMM"] != "bus\nctl" || last["RDMAD_CALLER_PID"] != strconv.Itoa(pid) {
		t.Errorf("a command with a newline: entry %q", last)
	}
	dropIn = hosttest.Read(t, root, filepath.Join(config.DropInDir, config.PersistedName))
	if who := "# set by root (uid 0), pid " + strconv.Itoa(pid) + " bus?ctl, "; !strings.Contains(dropIn, who) {
		t.Errorf("rdmad's drop-in lacks %q:\n%s", who, dropIn)
	}

	// systemctl reload: SIGHUP names the signal.
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	reload := j.until(t, "of the reload by SIGHUP", func(e journalEntry) bool { return e["RDMAD_METHOD"] == "Reload" })
	if last := reload[len(reload)-1]; last["RDMAD_CALLER"] != "signal SIGHUP" || last["PRIORITY"] != "5" || !strings.Contains(last["MESSAGE"], "caller=\"signal SIGHUP\"") {
		t.Errorf("reload entry %v", last)
	}
}

// Without the journal (a fixture, a container) the same audit line is
// key=value text on rdmad's log, once.
func TestAuditTrailAsText(t *testing.T) {
	addr := privateBus(t)
	root, env := livetest.DemoHost(t)
	hosttest.Write(t, root, "etc/passwd", "root:x:0:0:root:/root:/bin/bash\n")
	d := livetest.Start(t, livetest.Binaries{Rdmad: rdmadBin, Rdmactl: rdmactlBin}, addr, root, env)
	pid := busctl(t, addr, "SetRoCE", "susib", "mlx5_0", "1", "", "40", "false")
	var lines []string
	eventually(t, "the audit line", func() bool {
		lines = nil
		for _, l := range strings.Split(d.Log(), "\n") {
			if strings.Contains(l, "call accepted") {
				lines = append(lines, l)
			}
		}
		return len(lines) > 0
	})
	if len(lines) != 1 {
		t.Fatalf("%d audit lines for one call:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	for _, w := range []string{`level=NOTICE msg="call accepted" caller=:`, " uid=0 user=root pid=" + strconv.Itoa(pid) + " comm=busctl ",
		` method=SetRoCE args="device=mlx5_0 port=1 mode=\"\" tos=40 persist=false"`} {
		if !strings.Contains(lines[0], w) {
			t.Errorf("audit line lacks %q:\n%s", w, lines[0])
		}
	}
	applied := ""
	for _, l := range strings.Split(d.Log(), "\n") {
		if strings.Contains(l, "msg=applied") && strings.Contains(l, "subject=mlx5_0/1") {
			applied = l
		}
	}
	if !strings.Contains(applied, " pid="+strconv.Itoa(pid)+" ") {
		t.Errorf("the applied line does not name the caller: %q", applied)
	}
}
