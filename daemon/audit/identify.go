package audit

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/rdmad/rdmad/daemon/host"
)

// Proc reads what the kernel says of a caller's process: its command and
// its systemd unit. Dir is the /proc of rdmad's own mount and pid
// namespace ("/proc"): the caller is a process of the running kernel that
// the bus named, never a file of a --root tree.
type Proc struct{ Dir string }

// initPidNS is the inode of the initial pid namespace
// (PROC_PID_INIT_INO), where the system bus and its callers run.
const initPidNS = "pid:[4026531836]"

// maxCgroupFile bounds /proc/PID/cgroup: a line per hierarchy.
const maxCgroupFile = 64 << 10

// Fill sets c.Comm and c.Unit from the process of c.PID, pinned by a
// pidfd: pidfd is the bus's ProcessFD, -1 when the bus gave none. The
// pidfd names the process in rdmad's own pid namespace (fdinfo's Pid:),
// and the process is alive after the reads, so its pid was not reused
// meanwhile and what was read is its own. Without one, Fill opens a
// pidfd on c.PID itself, but only where rdmad runs in the initial pid
// namespace (where the bus's pid means the same process); a pid reused
// between the bus's answer and that open is the one case it cannot rule
// out. Fill closes no descriptor it was given; what it cannot read stays
// "".
func (p Proc) Fill(c *Caller, pidfd int) {
	if p.Dir == "" {
		p.Dir = "/proc"
	}
	pid := int(c.PID)
	if pidfd >= 0 {
		n, ok := p.fdinfoPid(pidfd)
		if ok {
			pid = n // 0: not in rdmad's namespace; -1: gone
		}
	} else {
		if pid <= 0 || !p.inInitPidNS() {
			return
		}
		fd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			return // gone already
		}
		defer unix.Close(fd)
		pidfd = fd
	}
	if pid <= 0 {
		return
	}
	dir := filepath.Join(p.Dir, strconv.Itoa(pid))
	comm, err := host.ReadAttr(filepath.Join(dir, "comm"))
	if err != nil {
		return
	}
	cg, _ := host.ReadFileLimit(filepath.Join(dir, "cgroup"), maxCgroupFile)
	if unix.PidfdSendSignal(pidfd, 0, nil, 0) != nil {
		return // it exited while being read: the pid may name another process now
	}
	c.Comm = strings.TrimSuffix(string(comm), "\n")
	c.Unit = UnitOfCgroup(cg)
}

// fdinfoPid is the pid a pidfd refers to in the namespace of p's /proc:
// 0 when the process is not in it, -1 when it has exited; false when the
// kernel does not say (before Linux 5.10).
func (p Proc) fdinfoPid(fd int) (int, bool) {
	b, err := host.ReadAttr(filepath.Join(p.Dir, "self/fdinfo", strconv.Itoa(fd)))
	if err != nil {
		return 0, false
	}
	for _, l := range bytes.Split(b, []byte("\n")) {
		if v, ok := bytes.CutPrefix(l, []byte("Pid:")); ok {
			n, err := strconv.Atoi(string(bytes.TrimSpace(v)))
			return n, err == nil
		}
	}
	return 0, false
}

func (p Proc) inInitPidNS() bool {
	ns, err := os.Readlink(filepath.Join(p.Dir, "self/ns/pid"))
	return err == nil && ns == initPidNS
}

// UnitOfCgroup is the systemd unit of a process from its /proc/PID/cgroup:
// the first element of its cgroup path that is not a slice
// ("session-3.scope", "cron.service", "user@1000.service"), from the
// unified hierarchy ("0::") or else systemd's named one; "" when it is in
// none (a process outside systemd's tree, a container's root).
func UnitOfCgroup(b []byte) string {
	var path string
	for _, l := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(l, "0::"); ok {
			path = p
			break
		}
		if _, p, ok := strings.Cut(l, ":name=systemd:"); ok && path == "" {
			path = p
		}
	}
	for _, e := range strings.Split(path, "/") {
		if e == "" || strings.HasSuffix(e, ".slice") {
			continue
		}
		for _, suffix := range []string{".service", ".scope", ".socket", ".mount", ".swap", ".timer"} {
			if strings.HasSuffix(e, suffix) {
				return e
			}
		}
		return ""
	}
	return ""
}

// UserName is uid's name in the host's /etc/passwd, read through h's
// trusted reader (a passwd another user can change names nobody); "" when
// it lists no such uid. rdmad does no NSS lookup: a daemon must not hang
// on LDAP, and under --root the host's names are its files'.
func UserName(h *host.Host, uid uint32) string {
	b, err := h.ReadTrustedFile("etc/passwd")
	if err != nil {
		return ""
	}
	want := strconv.FormatUint(uint64(uid), 10)
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.SplitN(l, ":", 4)
		if len(f) == 4 && f[2] == want && f[0] != "" && !strings.HasPrefix(f[0], "#") && !strings.HasPrefix(f[0], "+") && !strings.HasPrefix(f[0], "-") {
			return f[0]
		}
	}
	return ""
}
