package doctor

import (
	"fmt"
	"net"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/rdmad/rdmad/daemon/host"
)

// RoCE ports and their netdevs: the path MTU the netdev allows and a RoCE
// v2 GID for each address. What a declared TOS reaches is the roce part's
// note.

// AddrReader lists the addresses of a netdev that the kernel gives RoCE
// GIDs: IPv4 and IPv6 (not link-local, not tentative).
type AddrReader interface {
	Addrs(netdev string) ([]net.IP, error)
}

// NetlinkAddrs reads them from rtnetlink (RTM_GETADDR).
type NetlinkAddrs struct{}

// Addrs implements AddrReader.
func (NetlinkAddrs) Addrs(netdev string) ([]net.IP, error) {
	l, err := netlink.LinkByName(netdev)
	if err != nil {
		return nil, err
	}
	as, err := netlink.AddrList(l, netlink.FAMILY_ALL)
	if err != nil {
		return nil, err
	}
	var out []net.IP
	for _, a := range as {
		if a.Flags&unix.IFA_F_TENTATIVE != 0 || (a.IP.To4() == nil && a.IP.IsLinkLocalUnicast()) {
			continue
		}
		out = append(out, a.IP)
	}
	return out, nil
}

// roceHeaderBytes is what a driver takes off the netdev's MTU to find the
// largest RoCE MTU that fits: iboe_get_mtu (include/rdma/ib_addr.h) takes
// the GRH, UDP, BTH, XRC, AtomicETH and ICRC headers, 96 bytes, and is
// what mlx5, mlx4, bnxt_re and qedr report; rxe takes RXE_MAX_HDR_LENGTH,
// 80. Other drivers are not judged.
var roceHeaderBytes = map[string]int{
	"mlx5_core": 96, host.DriverMLX4: 96, "bnxt_en": 96, "qede": 96,
	host.DriverRXE: 80,
}

// roceMTU is the largest IB MTU (256..4096) that fits in mtu bytes less
// the headers; 0 when none does.
func roceMTU(mtu, headers int) int {
	for _, m := range []int{4096, 2048, 1024, 512, 256} {
		if mtu-headers >= m {
			return m
		}
	}
	return 0
}

func (d *diag) checkRoCENetdevs() {
	for i := range d.devs {
		dev := &d.devs[i]
		for j := range dev.Ports {
			p := &dev.Ports[j]
			if dev.PortTransport(p) != host.TransportRoCE || !d.judged(dev.Name, p.Number) {
				continue
			}
			netdev := portNetdev(dev, p)
			if netdev == "" || p.State != "ACTIVE" {
				continue
			}
			d.checkRoCEMTU(dev, p, netdev)
			d.checkRoCEGIDs(dev, p, netdev)
		}
	}
}

func hasGIDType(p *host.Port, t string) bool {
	for _, g := range p.GIDTypes {
		if g == t {
			return true
		}
	}
	return false
}

func (d *diag) checkRoCEMTU(dev *host.Device, p *host.Port, netdev string) {
	headers, known := roceHeaderBytes[dev.Driver]
	mtu := d.netdevMTU(netdev)
	if !known || mtu == 0 {
		return
	}
	s := portSubject(dev.Name, p.Number)
	name := fmt.Sprintf("%s/%d", dev.Name, p.Number)
	r := roceMTU(mtu, headers)
	if r >= 4096 {
		d.ok("roce-mtu", s, fmt.Sprintf("%s: %s has MTU %d: RoCE MTU 4096", name, netdev, mtu))
		return
	}
	d.warn("roce-mtu-small", s,
		fmt.Sprintf("%s: %s has MTU %d, so RoCE carries at most %d bytes a packet (4096 needs a netdev MTU of at least %d)", name, netdev, mtu, r, 4096+headers),
		fmt.Sprintf("ip link set dev %s mtu 9000, and the same in its network configuration, with the switch ports and the peers at that MTU too", netdev))
}

// roceV2GIDs are the addresses of the port's RoCE v2 GIDs on netdev.
func (d *diag) roceV2GIDs(dev string, port int, netdev string) []net.IP {
	base := path.Join(host.ClassInfiniband, dev, "ports", strconv.Itoa(port))
	names, err := boundedDir(d.h, path.Join(base, "gid_attrs", "types"))
	if err != nil {
		return nil
	}
	idx := make([]int, 0, len(names))
	for _, n := range names {
		if i, err := strconv.Atoi(n); err == nil {
			idx = append(idx, i)
		}
	}
	sort.Ints(idx)
	var out []net.IP
	empty := 0
	for _, i := range idx {
		n := strconv.Itoa(i)
		typ := readAttr(d.h, path.Join(base, "gid_attrs", "types", n))
		if typ == "" {
			if empty++; empty >= 8 { // the table is filled from the start
				break
			}
			continue
		}
		empty = 0
		if typ != "RoCE v2" || readAttr(d.h, path.Join(base, "gid_attrs", "ndevs", n)) != netdev {
			continue
		}
		if ip := net.ParseIP(readAttr(d.h, path.Join(base, "gids", n))); ip != nil {
			out = append(out, ip)
		}
	}
	return out
}

// checkRoCEGIDs: every address of the netdev has its RoCE v2 GID. RDMA-CM
// in RoCE v2 resolves an IP address to the GID built from it; without it
// a connection to or from that address fails.
func (d *diag) checkRoCEGIDs(dev *host.Device, p *host.Port, netdev string) {
	if d.in.Addrs == nil || !hasGIDType(p, "RoCE v2") {
		return
	}
	addrs, err := d.in.Addrs.Addrs(netdev)
	if err != nil || len(addrs) == 0 {
		return
	}
	gids := d.roceV2GIDs(dev.Name, p.Number, netdev)
	var missing []string
	for _, a := range addrs {
		found := false
		for _, g := range gids {
			found = found || g.Equal(a)
		}
		if !found {
			missing = append(missing, a.String())
		}
	}
	s := portSubject(dev.Name, p.Number)
	name := fmt.Sprintf("%s/%d", dev.Name, p.Number)
	if len(missing) > 0 {
		d.warn("roce-gid-missing", s,
			fmt.Sprintf("%s: no RoCE v2 GID for %s of %s: RDMA-CM connections over that address fail", name, strings.Join(missing, ", "), netdev),
			fmt.Sprintf("the kernel adds a GID for each address of the netdev: check journalctl -k -g %s; removing and adding the address again (ip addr del/add ... dev %s) makes it try again", dev.Name, netdev))
		return
	}
	d.ok("roce-gids", s, fmt.Sprintf("%s: a RoCE v2 GID for each of the %d addresses of %s", name, len(addrs), netdev))
}
