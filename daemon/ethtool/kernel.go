package ethtool

import (
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// Kernel is the ethtool side of the kernel as the qos part uses it.
// Netlink is the real one; ethtooltest.Fake the unit tests'.
type Kernel interface {
	// Pause reads the global pause of ifname (ETHTOOL_MSG_PAUSE_GET).
	Pause(ifname string) (Pause, error)
	// SetPause sets rx and tx pause, autonegotiation left as it is.
	SetPause(ifname string, rx, tx bool) error
	// PFCStormTimeout reads the PFC storm prevention timeout in ms
	// (ETHTOOL_GTUNABLE); SetPFCStormTimeout sets it (ETHTOOL_STUNABLE).
	PFCStormTimeout(ifname string) (uint16, error)
	SetPFCStormTimeout(ifname string, ms uint16) error
}

// ErrNoFamily is a kernel without ethtool netlink (built without
// CONFIG_ETHTOOL_NETLINK, or older than 5.6). Unsupported counts it.
var ErrNoFamily = errors.New("the kernel has no ethtool netlink family")

// Netlink talks ethtool netlink and the SIOCETHTOOL ioctl in the calling
// goroutine's network namespace.
type Netlink struct {
	// Transport sends one request and returns the payloads of its reply
	// messages of type resType, or the errno of the kernel's error
	// message. nil: a NETLINK_GENERIC socket (nl.NetlinkRequest.Execute).
	Transport func(req *nl.NetlinkRequest, resType uint16) ([][]byte, error)
	// Family returns the id of the ethtool family. nil: asked of the
	// kernel's generic netlink controller once, then remembered (family
	// ids do not change while the kernel runs; the ethtool family is
	// never unloaded).
	Family func() (uint16, error)
	// Ioctl runs SIOCETHTOOL for ifname on the tunable buffer data, which
	// the kernel may write into. nil: the real ioctl.
	Ioctl func(ifname string, data []byte) error
}

var familyID atomic.Uint32

// KernelFamily resolves the ethtool family and its monitor group through
// the generic netlink controller.
func KernelFamily() (id uint16, monitor uint32, err error) {
	f, err := netlink.GenlFamilyGet(Family)
	if err != nil {
		if errors.Is(err, syscall.ENOENT) {
			return 0, 0, ErrNoFamily
		}
		return 0, 0, fmt.Errorf("resolve the %s family: %w", Family, err)
	}
	for _, g := range f.Groups {
		if g.Name == MonitorGroup {
			monitor = g.ID
		}
	}
	return f.ID, monitor, nil
}

func (n Netlink) family() (uint16, error) {
	if n.Family != nil {
		return n.Family()
	}
	if id := familyID.Load(); id != 0 {
		return uint16(id), nil
	}
	id, _, err := KernelFamily()
	if err != nil {
		return 0, err
	}
	familyID.Store(uint32(id))
	return id, nil
}

func (n Netlink) exec(req *nl.NetlinkRequest, resType uint16) ([][]byte, error) {
	if n.Transport != nil {
		return n.Transport(req, resType)
	}
	return req.Execute(unix.NETLINK_GENERIC, resType)
}

// Pause implements Kernel.
func (n Netlink) Pause(ifname string) (Pause, error) {
	fam, err := n.family()
	if err != nil {
		return Pause{}, wrap("get pause of", ifname, err)
	}
	msgs, err := n.exec(PauseGetRequest(fam, ifname), fam)
	if err == nil && len(msgs) == 0 {
		err = errors.New("the kernel sent no reply")
	}
	if err != nil {
		return Pause{}, wrap("get pause of", ifname, err)
	}
	m, err := ParsePause(msgs[0])
	if err != nil {
		return Pause{}, wrap("get pause of", ifname, err)
	}
	return m.Pause, nil
}

// SetPause implements Kernel.
func (n Netlink) SetPause(ifname string, rx, tx bool) error {
	fam, err := n.family()
	if err == nil {
		_, err = n.exec(PauseSetRequest(fam, ifname, rx, tx), fam)
	}
	if err != nil {
		return wrap("set pause of", ifname, err)
	}
	return nil
}

// PFCStormTimeout implements Kernel.
func (n Netlink) PFCStormTimeout(ifname string) (uint16, error) {
	b := TunableRequest(false, 0)
	if err := n.ioctl(ifname, b); err != nil {
		return 0, wrap("get pfc-prevention-tout of", ifname, err)
	}
	return TunableValue(b)
}

// SetPFCStormTimeout implements Kernel.
func (n Netlink) SetPFCStormTimeout(ifname string, ms uint16) error {
	if err := n.ioctl(ifname, TunableRequest(true, ms)); err != nil {
		return wrap("set pfc-prevention-tout of", ifname, err)
	}
	return nil
}

func (n Netlink) ioctl(ifname string, data []byte) error {
	if len(ifname) == 0 || len(ifname) >= unix.IFNAMSIZ {
		return fmt.Errorf("%q is not a netdev name", ifname)
	}
	if n.Ioctl != nil {
		return n.Ioctl(ifname, data)
	}
	return siocethtool(ifname, data)
}

// ifreqData is struct ifreq with ifr_data: the name, then the pointer,
// padded to the size of the union (24 bytes on 64-bit, 16 on 32-bit).
type ifreqData struct {
	name [unix.IFNAMSIZ]byte
	data unsafe.Pointer
	_    [24 - unsafe.Sizeof(uintptr(0))]byte
}

// siocethtool runs the ioctl on an AF_NETLINK socket: the kernel takes
// SIOCETHTOOL on a socket of any family (sock_do_ioctl falls back to
// dev_ioctl), and the unit's sandbox allows no other family than AF_UNIX
// and AF_NETLINK.
func siocethtool(ifname string, data []byte) error {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_GENERIC)
	if err != nil {
		return fmt.Errorf("socket for SIOCETHTOOL: %w", err)
	}
	defer unix.Close(fd)
	var ifr ifreqData
	copy(ifr.name[:], ifname)
	ifr.data = unsafe.Pointer(&data[0])
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr)))
	runtime.KeepAlive(data)
	if errno != 0 {
		return errno
	}
	return nil
}

func wrap(what, ifname string, err error) error {
	return fmt.Errorf("%s %s: %w", what, ifname, err)
}
