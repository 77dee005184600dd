package audit_test

import (
	"os/exec"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/rdmad/rdmad/daemon/audit"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
)

// BenchmarkIdentify is what naming a caller costs rdmad beyond the bus's
// answer, once per accepted call: the process read through its pidfd
// (fdinfo, comm, cgroup, the liveness check) and the user name from a
// passwd of 60 entries.
func BenchmarkIdentify(b *testing.B) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	pidfd, err := unix.PidfdOpen(cmd.Process.Pid, 0)
	if err != nil {
		b.Skipf("pidfd_open: %v", err)
	}
	defer unix.Close(pidfd)
	root := b.TempDir()
	passwd := ""
	for i := 0; i < 59; i++ {
		passwd += "svc" + string(rune('a'+i%26)) + ":x:" + itoa(100+i) + ":100::/nonexistent:/usr/sbin/nologin\n"
	}
	hosttest.Write(b, root, "etc/passwd", passwd+"alice:x:1000:1000::/home/alice:/bin/sh\n")
	h := host.New(root)
	proc := audit.Proc{Dir: "/proc"}
	b.ReportAllocs()
	for b.Loop() {
		c := audit.Caller{PID: uint32(cmd.Process.Pid), UID: 1000, HasUID: true}
		c.User = audit.UserName(h, c.UID)
		proc.Fill(&c, pidfd)
		if c.Comm != "sleep" || c.User != "alice" {
			b.Fatalf("%+v", c)
		}
	}
}
