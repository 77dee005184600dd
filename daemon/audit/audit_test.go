package audit_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/rdmad/rdmad/daemon/audit"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
)

func TestUnitOfCgroup(t *testing.T) {
	for in, want := range map[string]string{
		"0::/system.slice/cron.service\n":                                               "cron.service",
		"0::/user.slice/user-1000.slice/session-3.scope\n":                              "session-3.scope",
		"0::/user.slice/user-1000.slice/user@1000.service/app.slice/dbus.service\n":     "user@1000.service",
		"12:memory:/x\n1:name=systemd:/system.slice/ansible.service\n":                  "ansible.service",
		"1:name=systemd:/system.slice/a.service\n0::/system.slice/rdmad-sync.service\n": "rdmad-sync.service",
		"0::/\n":                   "",
		"0::/init.scope\n":         "init.scope",
		"0::/kubepods/burstable\n": "",
		"":                         "",
	} {
		if got := audit.UnitOfCgroup([]byte(in)); got != want {
			t.Errorf("%q: %q, want %q", in, got, want)
		}
	}
}

// User names come from the host's /etc/passwd under its root, never NSS.
func TestUserName(t *testing.T) {
	root := t.TempDir()
	hosttest.Write(t, root, "etc/passwd", "root:x:0:0:root:/root:/bin/bash\n+nis::1000::::\nalice:x:1000:1000::/home/alice:/bin/sh\nbroken line\n")
	h := host.New(root)
	for uid, want := range map[uint32]string{0: "root", 1000: "alice", 4242: ""} {
		if got := audit.UserName(h, uid); got != want {
			t.Errorf("uid %d: %q, want %q", uid, got, want)
		}
	}
	if got := audit.UserName(host.New(t.TempDir()), 0); got != "" {
		t.Errorf("no passwd: %q", got)
	}
}

// A live process is named through its pidfd (the bus's ProcessFD) or, in
// the initial pid namespace, through its pid; one that exited is named by
// neither: its pid may be another process's by then.
func TestProcFill(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	pid := cmd.Process.Pid
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		t.Skipf("pidfd_open: %v", err)
	}
	defer unix.Close(pidfd)
	proc := audit.Proc{Dir: "/proc"}
	want := audit.UnitOfCgroup(mustRead(t, filepath.Join("/proc", itoa(pid), "cgroup")))

	c := audit.Caller{PID: uint32(pid)}
	proc.Fill(&c, pidfd)
	if c.Comm != "sleep" || c.Unit != want {
		t.Errorf("through the pidfd: comm %q unit %q, want sleep %q", c.Comm, c.Unit, want)
	}
	if ns, _ := os.Readlink("/proc/self/ns/pid"); ns == "pid:[4026531836]" {
		c = audit.Caller{PID: uint32(pid)}
		proc.Fill(&c, -1)
		if c.Comm != "sleep" {
			t.Errorf("through the pid: comm %q", c.Comm)
		}
	}
	// Outside the initial pid namespace, a pid alone names nothing.
	fake := t.TempDir()
	if err := os.MkdirAll(filepath.Join(fake, "self/ns"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("pid:[4026532999]", filepath.Join(fake, "self/ns/pid")); err != nil {
		t.Fatal(err)
	}
	c = audit.Caller{PID: uint32(pid)}
	audit.Proc{Dir: fake}.Fill(&c, -1)
	if c.Comm != "" {
		t.Errorf("a pid from another namespace named %q", c.Comm)
	}

	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	c = audit.Caller{PID: uint32(pid)}
	proc.Fill(&c, pidfd)
	if c.Comm != "" || c.Unit != "" {
		t.Errorf("an exited process named: %+v", c)
	}
}

func TestCallerAttrsAndWho(t *testing.T) {
	c := audit.Caller{Name: ":1.42", UID: 1000, HasUID: true, User: "alice", PID: 4242, Comm: "rdma\nctl", Unit: "session-3.scope"}
	if got := c.Who(); got != "alice (uid 1000), pid 4242 rdma\nctl, session-3.scope" {
		t.Errorf("Who %q", got)
	}
	want := []any{"caller", ":1.42", "uid", uint32(1000), "user", "alice", "pid", uint32(4242), "comm", "rdma\nctl", "unit", "session-3.scope"}
	if got := c.Attrs(); !reflect.DeepEqual(got, want) {
		t.Errorf("Attrs %v", got)
	}
	root := audit.Caller{Name: ":1.7", HasUID: true}
	if got := root.Who(); got != "uid 0" {
		t.Errorf("Who %q", got)
	}
	if got := audit.Signal("SIGHUP").Attrs(); !reflect.DeepEqual(got, []any{"caller", "signal SIGHUP"}) {
		t.Errorf("signal Attrs %v", got)
	}
	ctx := audit.With(context.Background(), c)
	if got, ok := audit.From(ctx); !ok || got != c || audit.Attrs(context.Background()) != nil {
		t.Errorf("From %+v %v", got, ok)
	}
	for key, field := range map[string]string{"uid": "RDMAD_CALLER_UID", "pid": "RDMAD_CALLER_PID", "comm": "RDMAD_CALLER_COMM", "method": "RDMAD_METHOD"} {
		if f, ok := audit.JournalField(key); !ok || f != field {
			t.Errorf("JournalField(%s) = %q", key, f)
		}
	}
	if _, ok := audit.JournalField("device"); ok {
		t.Error("device has a journal field")
	}
}

func mustRead(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func itoa(n int) string { return strconv.Itoa(n) }
