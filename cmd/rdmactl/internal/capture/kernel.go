package capture

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"sort"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/rdmad/rdmad/daemon/dcb"
	"github.com/rdmad/rdmad/daemon/ethtool"
	"github.com/rdmad/rdmad/daemon/fixturekernel"
	"github.com/rdmad/rdmad/daemon/host"
)

// Kernel is what a host keeps behind DCB netlink and ethtool, read for
// fixture/kernel.json.
type Kernel struct {
	DCB     dcb.Kernel
	Ethtool ethtool.Kernel
}

// RealKernel reads the running host's DCB and ethtool state through
// rdmad's own codecs.
func RealKernel() *Kernel { return &Kernel{DCB: dcb.Netlink{}, Ethtool: ethtool.Netlink{}} }

// kernelState writes fixture/kernel.json: the running host's DCB and
// ethtool state of each netdev of an RDMA device, read as rdmad reads
// them; under a fixture's root, the fixture's own file (a fixture has no
// other kernel; the file is written again in the form Marshal writes).
func (c *capturer) kernelState() {
	k := c.o.Kernel
	if k == nil && c.root != "/" {
		c.fixtureKernelState()
		return
	}
	if k == nil {
		k = RealKernel()
	}
	s := &fixturekernel.State{Netdevs: map[string]*fixturekernel.Netdev{}}
	for _, ifname := range c.rdmaNetdevs() {
		s.Netdevs[ifname] = c.netdevState(k, ifname)
	}
	c.writeState(s)
}

func (c *capturer) fixtureKernelState() {
	fk := fixturekernel.New(c.h)
	if !fixturekernel.Present(c.h) {
		return
	}
	s, err := fk.Read()
	if err != nil {
		c.skip(fixturekernel.File, err)
		return
	}
	c.writeState(s)
}

func (c *capturer) writeState(s *fixturekernel.State) {
	b, err := fixturekernel.Marshal(s)
	if err != nil {
		c.skip(fixturekernel.File, err)
		return
	}
	c.file(fixturekernel.File, b, 0o644, timeZero)
}

// rdmaNetdevs are the netdevs of the RDMA devices, and each port's (the
// one whose DCB rdmad sets), sorted.
func (c *capturer) rdmaNetdevs() []string {
	devs, _ := c.h.Devices() // a device that does not read has no netdev to ask about
	var out []string
	add := func(n string) {
		if n != "" && host.ValidDeviceName(n) && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	for i := range devs {
		d := &devs[i]
		for _, n := range d.Netdevs {
			add(n)
		}
		for j := range d.Ports {
			add(c.h.PortNetdev(d, &d.Ports[j]))
		}
	}
	sort.Strings(out)
	return out
}

// netdevState reads one netdev's state. What the netdev's driver does not
// have (EOPNOTSUPP: a veth has no DCB, no pause, no storm timeout) is left
// out, as the state file says it; any other errno is a refusal of that
// verb, which the fixture answers with the same errno.
func (c *capturer) netdevState(k *Kernel, ifname string) *fixturekernel.Netdev {
	n := &fixturekernel.Netdev{Driver: c.netdevDriver(ifname)}
	refuse := func(verb string, err error) {
		var errno syscall.Errno
		if errors.As(err, &errno) && unix.ErrnoName(errno) != "" {
			if n.Refuse == nil {
				n.Refuse = map[string]string{}
			}
			n.Refuse[verb] = unix.ErrnoName(errno)
			return
		}
		c.skip(path.Join(host.ClassNet, ifname), fmt.Errorf("%s: %w", verb, err))
	}
	switch ie, err := k.DCB.Get(ifname); {
	case err == nil:
		if caps, err := k.DCB.DCBX(ifname); err == nil {
			ie.DCBX, ie.HasDCBX = caps, true
		} else if !dcb.Unsupported(err) {
			refuse(fixturekernel.VerbDCBX, err)
		}
		n.DCB = fixturekernel.FromIEEE(ie)
	case dcb.Unsupported(err):
	default:
		refuse(fixturekernel.VerbGet, err)
	}
	switch p, err := k.Ethtool.Pause(ifname); {
	case err == nil:
		n.Pause = &fixturekernel.Pause{Autoneg: p.Autoneg, RX: p.RX, TX: p.TX}
	case ethtool.Unsupported(err):
	default:
		refuse(fixturekernel.VerbPause, err)
	}
	switch ms, err := k.Ethtool.PFCStormTimeout(ifname); {
	case err == nil:
		n.PFCStormTimeout = &ms
	case ethtool.Unsupported(err):
	default:
		refuse(fixturekernel.VerbPFCStormTimeout, err)
	}
	return n
}

// netdevDriver is the driver of ifname's device ("mlx5_core"), "" for a
// netdev without one (veth): its device link's, else that of the device
// whose net/ directory holds it (a tree made by hand has no device link).
func (c *capturer) netdevDriver(ifname string) string {
	if drv, err := c.resolve(path.Join(host.ClassNet, ifname, "device", "driver"), true, false); err == nil {
		return path.Base(drv)
	}
	dir, err := c.resolve(path.Join(host.ClassNet, ifname), true, false)
	if err != nil || path.Base(path.Dir(dir)) != "net" {
		return ""
	}
	if drv, err := c.resolve(path.Join(path.Dir(path.Dir(dir)), "driver"), true, false); err == nil {
		return path.Base(drv)
	}
	return ""
}
