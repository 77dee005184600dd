// Package verify is rdmactl verify: RDMA works for the user who runs it.
// It runs as that user, with no call to rdmad: the locked-memory limit
// against the buffer size first, then, for each ACTIVE port (or those
// named), access to the user-verbs device, data moved over a reliable
// connection with a registered buffer of that size (ibv_rc_pingpong), an
// RDMA-CM connection on Ethernet ports (rping: the path a declared RoCE
// TOS applies to) and, when asked, the bandwidth (ib_write_bw). Each tool
// is rdma-core's or perftest's, run server and client on this host,
// bounded by the per-port timeout; rdmactl stays a static binary with no
// cgo.
package verify

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"golang.org/x/sys/unix"
)

// Defaults.
const (
	DefaultSize    = 64 << 20 // more than the 8 MiB default of Linux 5.16+ and systemd
	DefaultTimeout = 10 * time.Second
)

// Result of one step.
type Result string

const (
	OK      Result = "ok"
	Fail    Result = "fail"
	Skipped Result = "skipped"
)

// Step is one check, as rdmactl verify reports it.
type Step struct {
	Subject string  `json:"subject"` // "host" or "DEV/PORT"
	Name    string  `json:"step"`    // memlock, uverbs, rc, rdma-cm, bandwidth, port
	Result  Result  `json:"result"`
	Seconds float64 `json:"seconds"`
	Detail  string  `json:"detail"`
	Cause   string  `json:"cause,omitempty"`
	Fix     string  `json:"fix,omitempty"`
}

// Options of a run.
type Options struct {
	Size    uint64        // bytes registered and moved; 0: DefaultSize
	Timeout time.Duration // per port; 0: DefaultTimeout
	// MinBandwidth in Gb/s; 0: the bandwidth is not measured.
	MinBandwidth float64
	// Targets are DEV or DEV/PORT; none: every ACTIVE port.
	Targets []string
	// Root prefixes /sys and /dev (tests); "" is "/".
	Root string
	// Memlock returns RLIMIT_MEMLOCK's soft limit (nil: getrlimit).
	Memlock func() (uint64, error)
	// Addrs lists a netdev's IPv4 addresses (nil: the kernel's).
	Addrs func(netdev string) ([]net.IP, error)
	// Progress, when set, is told each step as it ends.
	Progress func(Step)
}

// Tools and the packages that have them: Debian's, then RHEL's.
var tools = map[string][2]string{
	"ibv_rc_pingpong": {"ibverbs-utils", "libibverbs-utils"},
	"rping":           {"rdmacm-utils", "librdmacm-utils"},
	"ib_write_bw":     {"perftest", "perftest"},
}

// Run runs every step and returns them in order. It fails only for bad
// arguments (a target that does not name a device or port); what does not
// work is a failed step.
func Run(ctx context.Context, o Options) ([]Step, error) {
	if o.Size == 0 {
		o.Size = DefaultSize
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Root == "" {
		o.Root = "/"
	}
	if o.Memlock == nil {
		o.Memlock = rlimitMemlock
	}
	if o.Addrs == nil {
		o.Addrs = ipv4Addrs
	}
	r := &run{o: o}
	ports, err := r.ports()
	if err != nil {
		return nil, err
	}
	memOK := r.memlock()
	if len(ports) == 0 {
		r.add(Step{Subject: "host", Name: "port", Result: Fail, Detail: "no ACTIVE RDMA port",
			Cause: "no port of /sys/class/infiniband is ACTIVE", Fix: "rdmactl doctor (and rdmactl status) say why"})
	}
	for _, p := range ports {
		r.port(ctx, p, memOK)
	}
	return r.steps, nil
}

type run struct {
	o     Options
	steps []Step
	next  int // the next TCP or RDMA-CM port to try
}

func (r *run) add(s Step) {
	r.steps = append(r.steps, s)
	if r.o.Progress != nil {
		r.o.Progress(s)
	}
}

// memlock: the user's RLIMIT_MEMLOCK against the size, first: a buffer
// larger than the limit cannot be registered.
func (r *run) memlock() bool {
	start := time.Now()
	lim, err := r.o.Memlock()
	s := Step{Subject: "host", Name: "memlock"}
	switch {
	case err != nil:
		s.Result, s.Detail, s.Cause, s.Fix = Fail, "RLIMIT_MEMLOCK cannot be read", err.Error(), "ulimit -l"
	case lim != unix.RLIM_INFINITY && lim < r.o.Size:
		s.Result = Fail
		s.Detail = fmt.Sprintf("RLIMIT_MEMLOCK is %s, below the %s buffer to register", FormatSize(lim), FormatSize(r.o.Size))
		s.Cause = "this session's locked-memory limit is too small to register the buffer"
		s.Fix = "join the group rdmad's [memlock] names (usermod -aG rdma USER) and log in again; for a service, LimitMEMLOCK=infinity in its unit (systemctl edit UNIT); rdmactl doctor shows the limits each gets"
	default:
		s.Result, s.Detail = OK, fmt.Sprintf("RLIMIT_MEMLOCK %s, at least the %s buffer", FormatSize(lim), FormatSize(r.o.Size))
	}
	s.Seconds = time.Since(start).Seconds()
	r.add(s)
	return s.Result == OK
}

// port runs the steps of one port within its timeout.
func (r *run) port(parent context.Context, p port, memOK bool) {
	ctx, cancel := context.WithTimeout(parent, r.o.Timeout)
	defer cancel()
	subj := p.String()
	if p.state != "ACTIVE" {
		r.add(Step{Subject: subj, Name: "port", Result: Fail, Detail: fmt.Sprintf("%s is %s, not ACTIVE", subj, orUnknown(p.state)),
			Cause: "nothing can move over a port that is not ACTIVE", Fix: "rdmactl doctor says why"})
		return
	}
	if !r.uverbs(p) {
		r.skip(p, "user-verbs access failed")
		return
	}
	if !memOK {
		r.skip(p, "the memlock limit is below the buffer size")
		return
	}
	gid := -1
	if p.linkLayer == "Ethernet" && !p.iwarp {
		if gid = r.gidIndex(p); gid < 0 {
			r.add(Step{Subject: subj, Name: "rc", Result: Fail, Detail: "no GID to address the port with",
				Cause: "the port's GID table has no entry", Fix: "ip link set dev " + orUnknown(p.netdev) + " up, and give it an address"})
			return
		}
	}
	if !p.iwarp { // iWARP connects only through RDMA-CM
		r.rc(ctx, p, gid)
	}
	if p.linkLayer == "Ethernet" || p.iwarp {
		r.rdmaCM(ctx, p)
	}
	if r.o.MinBandwidth > 0 && !p.iwarp {
		r.bandwidth(ctx, p, gid)
	}
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

func (r *run) skip(p port, why string) {
	names := []string{"rc"}
	if p.linkLayer == "Ethernet" || p.iwarp {
		names = append(names, "rdma-cm")
	}
	if r.o.MinBandwidth > 0 {
		names = append(names, "bandwidth")
	}
	for _, n := range names {
		r.add(Step{Subject: p.String(), Name: n, Result: Skipped, Detail: "not run: " + why})
	}
}

var errMissingTool = errors.New("not installed")

// Failed reports whether a step failed.
func Failed(steps []Step) bool {
	for _, s := range steps {
		if s.Result == Fail {
			return true
		}
	}
	return false
}
