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
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
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

func (r *run) path(rel ...string) string {
	return filepath.Join(append([]string{r.o.Root}, rel...)...)
}

// port is one RDMA port as sysfs shows it.
type port struct {
	dev       string
	num       int
	state     string // "ACTIVE"...
	linkLayer string // InfiniBand, Ethernet
	iwarp     bool
	netdev    string
	named     bool // named on the command line
}

func (p port) String() string { return p.dev + "/" + strconv.Itoa(p.num) }

func (r *run) read(rel ...string) string {
	b, err := os.ReadFile(r.path(rel...))
	if err != nil || len(b) > 4096 {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// ports are the ports to check: the ACTIVE ones, or those named.
func (r *run) ports() ([]port, error) {
	devs, err := os.ReadDir(r.path("sys/class/infiniband"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("verify: %w", err)
	}
	var all []port
	for _, d := range devs {
		nums, _ := os.ReadDir(r.path("sys/class/infiniband", d.Name(), "ports"))
		for _, n := range nums {
			num, err := strconv.Atoi(n.Name())
			if err != nil || num <= 0 {
				continue
			}
			p := port{dev: d.Name(), num: num,
				state:     stripCode(r.read("sys/class/infiniband", d.Name(), "ports", n.Name(), "state")),
				linkLayer: r.read("sys/class/infiniband", d.Name(), "ports", n.Name(), "link_layer"),
				iwarp:     strings.HasPrefix(r.read("sys/class/infiniband", d.Name(), "node_type"), "4"),
			}
			p.netdev = r.portNetdev(p)
			all = append(all, p)
		}
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].dev != all[j].dev {
			return all[i].dev < all[j].dev
		}
		return all[i].num < all[j].num
	})
	if len(r.o.Targets) == 0 {
		var out []port
		for _, p := range all {
			if p.state == "ACTIVE" {
				out = append(out, p)
			}
		}
		return out, nil
	}
	var out []port
	for _, t := range r.o.Targets {
		dev, num, hasPort := strings.Cut(t, "/")
		found := false
		for _, p := range all {
			if p.dev == dev && (!hasPort || strconv.Itoa(p.num) == num) {
				p.named, found = true, true
				out = append(out, p)
			}
		}
		if !found {
			return nil, &ArgError{fmt.Sprintf("%q: no such RDMA device or port (rdmactl device list shows them)", t)}
		}
	}
	return out, nil
}

// ArgError is a target that names nothing: a usage error.
type ArgError struct{ Msg string }

func (e *ArgError) Error() string { return e.Msg }

func stripCode(s string) string {
	if _, v, ok := strings.Cut(s, ": "); ok {
		return v
	}
	return s
}

// portNetdev is an Ethernet port's netdev: the one its GID table names
// first, else the device's parent (rxe), else the PCI function's only one.
func (r *run) portNetdev(p port) string {
	base := r.path("sys/class/infiniband", p.dev, "ports", strconv.Itoa(p.num), "gid_attrs", "ndevs")
	if names, err := os.ReadDir(base); err == nil {
		idx := make([]int, 0, len(names))
		for _, n := range names {
			if i, err := strconv.Atoi(n.Name()); err == nil {
				idx = append(idx, i)
			}
		}
		sort.Ints(idx)
		for _, i := range idx {
			if n := r.read("sys/class/infiniband", p.dev, "ports", strconv.Itoa(p.num), "gid_attrs", "ndevs", strconv.Itoa(i)); n != "" {
				return n
			}
			if i > 16 {
				break
			}
		}
	}
	if n := r.read("sys/class/infiniband", p.dev, "parent"); n != "" {
		return n
	}
	if names, err := os.ReadDir(r.path("sys/class/infiniband", p.dev, "device", "net")); err == nil && len(names) == 1 {
		return names[0].Name()
	}
	return ""
}

func rlimitMemlock() (uint64, error) {
	var l unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &l); err != nil {
		return 0, err
	}
	return l.Cur, nil
}

// FormatSize prints a size as rdmactl reads it: "64 MiB", "unlimited".
func FormatSize(n uint64) string {
	if n == unix.RLIM_INFINITY {
		return "unlimited"
	}
	for _, u := range []struct {
		n    uint64
		name string
	}{{1 << 30, "GiB"}, {1 << 20, "MiB"}, {1 << 10, "KiB"}} {
		if n >= u.n && n%u.n == 0 {
			return fmt.Sprintf("%d %s", n/u.n, u.name)
		}
	}
	return fmt.Sprintf("%d bytes", n)
}

// ParseSize reads --size: bytes, or a number with K, M or G (base 1024).
func ParseSize(s string) (uint64, error) {
	t := strings.TrimSuffix(strings.TrimSuffix(strings.ToUpper(strings.TrimSpace(s)), "B"), "I")
	mult := uint64(1)
	switch {
	case strings.HasSuffix(t, "K"):
		mult, t = 1<<10, strings.TrimSuffix(t, "K")
	case strings.HasSuffix(t, "M"):
		mult, t = 1<<20, strings.TrimSuffix(t, "M")
	case strings.HasSuffix(t, "G"):
		mult, t = 1<<30, strings.TrimSuffix(t, "G")
	}
	n, err := strconv.ParseUint(t, 10, 64)
	if err != nil || n == 0 || n > (1<<40)/mult {
		return 0, fmt.Errorf("%q is not a size: write bytes or a number with K, M or G, such as 64M", s)
	}
	return n * mult, nil
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

// uverbs: the user-verbs device of the port's device opens read-write
// for this user.
func (r *run) uverbs(p port) bool {
	start := time.Now()
	s := Step{Subject: p.String(), Name: "uverbs"}
	node := ""
	if names, err := os.ReadDir(r.path("sys/class/infiniband_verbs")); err == nil {
		for _, n := range names {
			if r.read("sys/class/infiniband_verbs", n.Name(), "ibdev") == p.dev {
				node = n.Name()
			}
		}
	}
	dev := r.path("dev/infiniband", node)
	switch {
	case node == "":
		s.Result, s.Detail = Fail, p.dev+" has no user-verbs device"
		s.Cause, s.Fix = "ib_uverbs is not loaded, or the driver registered no verbs device", "modprobe ib_uverbs (as root; rdmad loads it from /etc/rdma/modules/rdma.conf)"
	default:
		f, err := os.OpenFile(dev, os.O_RDWR, 0)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			s.Result, s.Detail = Fail, "/dev/infiniband/"+node+" is missing"
			s.Cause, s.Fix = "udev made no device node", "udevadm trigger --action=add --subsystem-match=infiniband_verbs (as root)"
		case errors.Is(err, fs.ErrPermission):
			s.Result, s.Detail = Fail, "/dev/infiniband/"+node+" does not open for this user"
			s.Cause, s.Fix = err.Error(), "the device node's permissions: rdma-core's udev rules make it 0666; check /etc/udev/rules.d for a stricter rule"
		case err != nil:
			s.Result, s.Detail, s.Cause, s.Fix = Fail, "/dev/infiniband/"+node+" does not open", err.Error(), "journalctl -k -g uverbs"
		default:
			f.Close()
			s.Result, s.Detail = OK, "/dev/infiniband/"+node+" opens read-write"
		}
	}
	s.Seconds = time.Since(start).Seconds()
	r.add(s)
	return s.Result == OK
}

// gidIndex is the GID to address an Ethernet port with: the RoCE v2 GID of
// one of its netdev's IPv4 addresses, else any RoCE v2 GID, else the
// first populated one; -1 when there is none.
func (r *run) gidIndex(p port) int {
	base := []string{"sys/class/infiniband", p.dev, "ports", strconv.Itoa(p.num)}
	names, err := os.ReadDir(r.path(append(base, "gid_attrs", "types")...))
	if err != nil {
		return -1
	}
	var idx []int
	for _, n := range names {
		if i, err := strconv.Atoi(n.Name()); err == nil {
			idx = append(idx, i)
		}
	}
	sort.Ints(idx)
	first, v2 := -1, -1
	empty := 0
	for _, i := range idx {
		typ := r.read(append(base, "gid_attrs", "types", strconv.Itoa(i))...)
		if typ == "" {
			if empty++; empty >= 8 {
				break
			}
			continue
		}
		empty = 0
		if first < 0 {
			first = i
		}
		if typ != "RoCE v2" {
			continue
		}
		if v2 < 0 {
			v2 = i
		}
		if ip := net.ParseIP(r.read(append(base, "gids", strconv.Itoa(i))...)); ip != nil && ip.To4() != nil {
			return i
		}
	}
	if v2 >= 0 {
		return v2
	}
	return first
}

// freePort returns a TCP port nothing listens on now, for a tool's
// out-of-band exchange.
func (r *run) freePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		r.next++
		return 18515 + r.next
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// tool runs a server and a client of one tool on this host: the server
// first, the client again until it connects or the context ends.
type toolRun struct {
	server, client []string
	out            string // the client's output
}

var errMissingTool = errors.New("not installed")

func (r *run) pair(ctx context.Context, t *toolRun) error {
	if _, err := exec.LookPath(t.server[0]); err != nil {
		return fmt.Errorf("%s: %w", t.server[0], errMissingTool)
	}
	srv := exec.CommandContext(ctx, t.server[0], t.server[1:]...)
	var srvOut bytes.Buffer
	srv.Stdout, srv.Stderr = &srvOut, &srvOut
	srv.WaitDelay = time.Second
	if err := srv.Start(); err != nil {
		return err
	}
	srvDone := make(chan error, 1)
	go func() { srvDone <- srv.Wait() }()
	defer func() {
		select {
		case <-srvDone: // it ended by itself
		default:
			_ = srv.Process.Kill()
			<-srvDone
		}
	}()
	var last error
	var lastOut []byte
	for {
		c := exec.CommandContext(ctx, t.client[0], t.client[1:]...)
		c.WaitDelay = time.Second
		out, err := c.CombinedOutput()
		if err == nil {
			t.out = string(out)
			return nil
		}
		last, lastOut = err, out
		select {
		case err := <-srvDone:
			srvDone <- err
			return fmt.Errorf("%w: %s%s", last, tail(lastOut), tail(srvOut.Bytes()))
		case <-ctx.Done():
			return fmt.Errorf("no answer within the timeout: %s", tail(lastOut))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// tail is the last line of a tool's output, for a cause.
func tail(b []byte) string {
	s := strings.TrimSpace(string(b))
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	if len(s) > 200 {
		s = s[:200]
	}
	if s != "" {
		s = "; " + s
	}
	return s
}

// toolFailure fills a failed step from a tool's error.
func toolFailure(s *Step, tool string, err error, ctx context.Context, timeout time.Duration) {
	s.Result = Fail
	switch {
	case errors.Is(err, errMissingTool):
		s.Detail, s.Cause, s.Fix = tool+" is not installed", "verify runs rdma-core's and perftest's tools", "apt-get install "+tools[tool][0]+" (RHEL: dnf install "+tools[tool][1]+")"
	case ctx.Err() != nil:
		s.Detail, s.Cause, s.Fix = fmt.Sprintf("%s did not finish within the port's %s", tool, timeout), err.Error(), "raise --timeout on a slow link or emulated device; rdmactl doctor for the port's state"
	default:
		s.Detail, s.Cause = tool+" failed", err.Error()
		switch {
		case strings.Contains(err.Error(), "register") || strings.Contains(err.Error(), "MR"):
			s.Fix = "the buffer did not register: the memlock limit (ulimit -l) or the device's memory; rdmactl doctor"
		default:
			s.Fix = "rdmactl doctor (the port's state, the subnet manager, the GID table); dmesg for the driver"
		}
	}
}

// rc moves the buffer over a reliable connection: ibv_rc_pingpong, one
// exchange of --size bytes each way, the buffer registered once.
func (r *run) rc(ctx context.Context, p port, gid int) {
	start := time.Now()
	s := Step{Subject: p.String(), Name: "rc"}
	tcp := strconv.Itoa(r.freePort())
	args := []string{"-d", p.dev, "-i", strconv.Itoa(p.num), "-s", strconv.FormatUint(r.o.Size, 10), "-n", "1", "-p", tcp}
	if gid >= 0 {
		args = append(args, "-g", strconv.Itoa(gid))
	}
	t := &toolRun{server: append([]string{"ibv_rc_pingpong"}, args...), client: append(append([]string{"ibv_rc_pingpong"}, args...), "127.0.0.1")}
	if err := r.pair(ctx, t); err != nil {
		toolFailure(&s, "ibv_rc_pingpong", err, ctx, r.o.Timeout)
	} else {
		s.Result = OK
		s.Detail = fmt.Sprintf("%s moved over a reliable connection with a registered %s buffer", FormatSize(2*r.o.Size), FormatSize(r.o.Size))
		if gid >= 0 {
			s.Detail += fmt.Sprintf(" (GID index %d)", gid)
		}
	}
	s.Seconds = time.Since(start).Seconds()
	r.add(s)
}

// rdmaCM opens an RDMA-CM connection over an address of the port's
// netdev: rping, one exchange.
func (r *run) rdmaCM(ctx context.Context, p port) {
	start := time.Now()
	s := Step{Subject: p.String(), Name: "rdma-cm"}
	var addr net.IP
	if p.netdev != "" {
		if as, err := r.o.Addrs(p.netdev); err == nil && len(as) > 0 {
			addr = as[0]
		}
	}
	if addr == nil {
		s.Result, s.Detail = Fail, "no IPv4 address on "+orUnknown(p.netdev)
		s.Cause, s.Fix = "RDMA-CM resolves an IP address to the port", "give "+orUnknown(p.netdev)+" an address (ip addr add ADDR/LEN dev "+orUnknown(p.netdev)+")"
	} else {
		cmPort := strconv.Itoa(r.freePort())
		t := &toolRun{
			server: []string{"rping", "-s", "-a", addr.String(), "-p", cmPort, "-C", "1"},
			client: []string{"rping", "-c", "-a", addr.String(), "-p", cmPort, "-C", "1"},
		}
		if err := r.pair(ctx, t); err != nil {
			toolFailure(&s, "rping", err, ctx, r.o.Timeout)
		} else {
			s.Result, s.Detail = OK, "RDMA-CM connection over "+addr.String()+" ("+p.netdev+")"
		}
	}
	s.Seconds = time.Since(start).Seconds()
	r.add(s)
}

// bandwidth measures RDMA write bandwidth with ib_write_bw for 2 seconds.
func (r *run) bandwidth(ctx context.Context, p port, gid int) {
	start := time.Now()
	s := Step{Subject: p.String(), Name: "bandwidth"}
	tcp := strconv.Itoa(r.freePort())
	args := []string{"-d", p.dev, "-i", strconv.Itoa(p.num), "-p", tcp, "-D", "2", "--report_gbits", "-F", "-s", "65536"}
	if gid >= 0 {
		args = append(args, "-x", strconv.Itoa(gid))
	}
	t := &toolRun{server: append([]string{"ib_write_bw"}, args...), client: append(append([]string{"ib_write_bw"}, args...), "127.0.0.1")}
	if err := r.pair(ctx, t); err != nil {
		toolFailure(&s, "ib_write_bw", err, ctx, r.o.Timeout)
	} else if bw, ok := parseBandwidth(t.out); !ok {
		s.Result, s.Detail, s.Cause, s.Fix = Fail, "ib_write_bw printed no bandwidth", tail([]byte(t.out)), "run ib_write_bw by hand"
	} else if bw < r.o.MinBandwidth {
		s.Result = Fail
		s.Detail = fmt.Sprintf("%s Gb/s, below the %s asked for", fmtGbps(bw), fmtGbps(r.o.MinBandwidth))
		s.Cause = "RDMA write bandwidth on this host's loopback is low"
		s.Fix = "rdmactl doctor (the port's rate, the PCIe link, counters); a host-local loopback measures the adapter and PCIe, not the fabric"
	} else {
		s.Result, s.Detail = OK, fmt.Sprintf("%s Gb/s RDMA write, at least %s", fmtGbps(bw), fmtGbps(r.o.MinBandwidth))
	}
	s.Seconds = time.Since(start).Seconds()
	r.add(s)
}

func fmtGbps(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// parseBandwidth reads ib_write_bw's result line: "#bytes #iterations BW
// peak BW average MsgRate", the average in Gb/s with --report_gbits.
func parseBandwidth(out string) (float64, bool) {
	lines := strings.Split(out, "\n")
	header := false
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) > 0 && f[0] == "#bytes" {
			header = true
			continue
		}
		if header && len(f) >= 4 {
			if _, err := strconv.Atoi(f[0]); err != nil {
				continue
			}
			v, err := strconv.ParseFloat(f[3], 64)
			return v, err == nil
		}
	}
	return 0, false
}

// ipv4Addrs are a netdev's IPv4 addresses.
func ipv4Addrs(netdev string) ([]net.IP, error) {
	ifc, err := net.InterfaceByName(netdev)
	if err != nil {
		return nil, err
	}
	as, err := ifc.Addrs()
	if err != nil {
		return nil, err
	}
	var out []net.IP
	for _, a := range as {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil {
			out = append(out, n.IP)
		}
	}
	return out, nil
}

// Failed reports whether a step failed.
func Failed(steps []Step) bool {
	for _, s := range steps {
		if s.Result == Fail {
			return true
		}
	}
	return false
}
