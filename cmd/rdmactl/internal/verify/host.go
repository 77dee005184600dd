package verify

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

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
		return nil, fmt.Errorf("list the RDMA devices: %w", err)
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
