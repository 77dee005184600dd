package cli

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/rdmad/rdmad/daemon/memlock"
)

// Local is what doctor checks on this host directly rather than through
// rdmad: what an RDMA program started from this session would get.
type Local struct {
	UverbsLoaded bool

	// From rdmad's managed limits.d file; Group == "" when rdmad does not manage memlock.
	Group     string
	SoftLimit string // as written: "unlimited" or KiB
	InGroup   bool   // the calling user is a member of Group
	// This process's RLIMIT_MEMLOCK soft limit, KiB; -1 for unlimited.
	SessionKiB int64

	NFSDRunning bool     // /proc/fs/nfsd/portlist exists
	NFSDPorts   []string // its lines, e.g. "rdma 20049"
}

// ProbeLocal reads the local facts under root ("/" on a real host).
func ProbeLocal(root string) Local {
	var l Local
	_, err := os.Stat(filepath.Join(root, "sys/module/ib_uverbs"))
	l.UverbsLoaded = err == nil
	if b, err := os.ReadFile(filepath.Join(root, memlock.LimitsFile)); err == nil {
		l.Group, l.SoftLimit = parseLimits(b)
	}
	if l.Group != "" {
		l.InGroup = memberOf(l.Group)
	}
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &rl); err == nil {
		if rl.Cur == unix.RLIM_INFINITY {
			l.SessionKiB = -1
		} else {
			l.SessionKiB = int64(rl.Cur / 1024)
		}
	}
	if b, err := os.ReadFile(filepath.Join(root, "proc/fs/nfsd/portlist")); err == nil {
		l.NFSDRunning = true
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if line = strings.TrimSpace(line); line != "" {
				l.NFSDPorts = append(l.NFSDPorts, line)
			}
		}
	}
	return l
}

// parseLimits finds "@group soft memlock VALUE" in a limits.conf file.
func parseLimits(b []byte) (group, soft string) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 4 && strings.HasPrefix(f[0], "@") && f[1] == "soft" && f[2] == "memlock" {
			return f[0][1:], f[3]
		}
	}
	return "", ""
}

func memberOf(group string) bool {
	u, err := user.Current()
	if err != nil {
		return false
	}
	g, err := user.LookupGroup(group)
	if err != nil {
		return false
	}
	ids, err := u.GroupIds()
	return err == nil && slices.Contains(ids, g.Gid)
}

func (l Local) memlockChecks() []Check {
	if l.Group == "" {
		return nil // rdmad does not manage memlock here: nothing declared to compare with
	}
	c := Check{Target: "session", Check: "memlock limit of @" + l.Group}
	session := "unlimited"
	if l.SessionKiB >= 0 {
		session = fmt.Sprintf("%d KiB", l.SessionKiB)
	}
	switch {
	case !l.InGroup:
		c.OK = true
		c.Detail = fmt.Sprintf("you are not in group %s; this session has %s (RDMA users join %s)", l.Group, session, l.Group)
	case l.SoftLimit == "unlimited":
		c.OK = l.SessionKiB < 0
		c.Detail = fmt.Sprintf("declared unlimited, this session has %s", session)
	default:
		want, err := strconv.ParseInt(l.SoftLimit, 10, 64)
		c.OK = err == nil && (l.SessionKiB < 0 || l.SessionKiB >= want)
		c.Detail = fmt.Sprintf("declared %s KiB, this session has %s", l.SoftLimit, session)
	}
	if !c.OK {
		c.Detail += "; log in again (pam_limits applies limits at login)"
	}
	return []Check{c}
}

// nfsChecks: NFS over RDMA listens on port 20049 when nfsd has "rdma 20049"
// in its portlist; only meaningful where nfsd runs.
func (l Local) nfsChecks() []Check {
	if !l.NFSDRunning {
		return nil
	}
	ok := slices.Contains(l.NFSDPorts, "rdma 20049")
	detail := "portlist: " + strings.Join(l.NFSDPorts, ", ")
	if !ok {
		detail += "; enable with rdma=y in [nfsd] of /etc/nfs.conf, or echo 'rdma 20049' > /proc/fs/nfsd/portlist"
	}
	return []Check{{Target: "nfsd", Check: "NFS over RDMA on port 20049", OK: ok, Detail: detail}}
}
