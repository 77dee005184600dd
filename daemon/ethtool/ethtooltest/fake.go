// Package ethtooltest is a fake ethtool kernel for unit tests. It sits
// behind ethtool.Netlink's seams, so every call goes through the real
// encoder and decoder: the fake reads the serialized request (or the
// tunable buffer) and answers with the bytes the kernel would. A netdev
// without pause or tunables answers EOPNOTSUPP, as veth does. Only tests
// import it; ethtool.Netlink with no seams is the real counterpart
// (tested against this host's kernel).
package ethtooltest

import (
	"fmt"
	"sync"
	"syscall"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/rdmad/rdmad/daemon/ethtool"
)

// FamilyID is the id the fake kernel gave the ethtool family.
const FamilyID = 0x15

// Netdev is one netdev of the fake kernel.
type Netdev struct {
	Index     uint32
	NoPause   bool // no get/set_pauseparam: EOPNOTSUPP
	NoTunable bool // no get/set_tunable: EOPNOTSUPP
	Pause     ethtool.Pause
	Timeout   uint16 // pfc-prevention-tout

	// Driver behaviour.
	RefusePause syscall.Errno // the SET fails with this errno
	DropPause   bool          // the SET succeeds but is not kept
	// ValidTimeout says which timeouts the driver takes; another is
	// EINVAL. nil takes any (MLX5 sets mlx5's: 0, 80..8000, 0xffff).
	ValidTimeout func(uint16) bool
}

// MLX5 makes n behave as mlx5_core does: pause autonegotiation refused
// on (rdmad never sends it), the storm timeout 0 (off), 80..8000 ms or
// automatic.
func MLX5(n *Netdev) {
	n.ValidTimeout = func(ms uint16) bool { return ms == 0 || ms == ethtool.PFCStormAuto || (ms >= 80 && ms <= 8000) }
	n.Timeout = ethtool.PFCStormAuto
}

// Fake is the kernel: netdevs by name; a name it does not hold is ENODEV.
type Fake struct {
	mu      sync.Mutex
	netdevs map[string]*Netdev
	calls   []string
	next    uint32
}

// New returns a fake kernel with no netdevs.
func New() *Fake { return &Fake{netdevs: map[string]*Netdev{}} }

// Add adds (or replaces) a netdev with pause (rx and tx on, as most
// adapters come up) and the tunable, and returns it for tuning.
func (f *Fake) Add(name string) *Netdev {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.next++
	n := &Netdev{Index: f.next, Pause: ethtool.Pause{RX: true, TX: true}}
	f.netdevs[name] = n
	return n
}

// AddVirtual adds a netdev without pause or tunables (veth, virtio).
func (f *Fake) AddVirtual(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.next++
	f.netdevs[name] = &Netdev{Index: f.next, NoPause: true, NoTunable: true}
}

// Netdev returns a copy of the named netdev's state.
func (f *Fake) Netdev(name string) (Netdev, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n, ok := f.netdevs[name]
	if !ok {
		return Netdev{}, false
	}
	return *n, true
}

// Update changes a netdev under the lock (another tool, a driver reload).
func (f *Fake) Update(name string, fn func(*Netdev)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if n, ok := f.netdevs[name]; ok {
		fn(n)
	}
}

// Calls lists the requests so far: "pause eth0", "set-pause eth0 rx off
// tx off", "timeout eth0", "set-timeout eth0 100".
func (f *Fake) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

// Writes lists the SET requests only.
func (f *Fake) Writes() []string {
	var out []string
	for _, c := range f.Calls() {
		if len(c) > 4 && c[:4] == "set-" {
			out = append(out, c)
		}
	}
	return out
}

// Kernel returns an ethtool.Kernel that talks to the fake through the
// real codec.
func (f *Fake) Kernel() ethtool.Kernel {
	return ethtool.Netlink{
		Family:    func() (uint16, error) { return FamilyID, nil },
		Transport: f.transport,
		Ioctl:     f.ioctl,
	}
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

func (f *Fake) transport(req *nl.NetlinkRequest, resType uint16) ([][]byte, error) {
	r, err := ethtool.ParseRequest(req.Serialize())
	if err != nil || r.Type != FamilyID {
		return nil, syscall.EINVAL
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.Flags&unix.NLM_F_ACK == 0 {
		return nil, fmt.Errorf("fake ethtool: request without NLM_F_ACK")
	}
	switch r.Cmd {
	case ethtool.CmdPauseGet:
		f.calls = append(f.calls, "pause "+r.Ifname)
	case ethtool.CmdPauseSet:
		c := "set-pause " + r.Ifname
		if r.Autoneg != nil {
			c += " autoneg " + onOff(*r.Autoneg)
		}
		if r.RX != nil {
			c += " rx " + onOff(*r.RX)
		}
		if r.TX != nil {
			c += " tx " + onOff(*r.TX)
		}
		f.calls = append(f.calls, c)
	default:
		return nil, syscall.EOPNOTSUPP
	}
	n, ok := f.netdevs[r.Ifname]
	if !ok {
		return nil, syscall.ENODEV
	}
	if n.NoPause {
		return nil, syscall.EOPNOTSUPP
	}
	if r.Cmd == ethtool.CmdPauseGet {
		if resType != FamilyID {
			return nil, nil
		}
		return [][]byte{ethtool.EncodePause(ethtool.CmdPauseGetReply, n.Index, r.Ifname, n.Pause)}, nil
	}
	if r.Autoneg != nil && *r.Autoneg {
		return nil, syscall.EINVAL // mlx5e_set_pauseparam refuses autoneg on
	}
	if n.RefusePause != 0 {
		return nil, n.RefusePause
	}
	if !n.DropPause {
		if r.RX != nil {
			n.Pause.RX = *r.RX
		}
		if r.TX != nil {
			n.Pause.TX = *r.TX
		}
	}
	return nil, nil
}

func (f *Fake) ioctl(ifname string, data []byte) error {
	tu, err := ethtool.ParseTunable(data)
	if err != nil {
		return syscall.EINVAL
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if tu.Set {
		f.calls = append(f.calls, fmt.Sprintf("set-timeout %s %d", ifname, tu.Value))
	} else {
		f.calls = append(f.calls, "timeout "+ifname)
	}
	n, ok := f.netdevs[ifname]
	if !ok {
		return syscall.ENODEV
	}
	if n.NoTunable {
		return syscall.EOPNOTSUPP
	}
	if !tu.Set {
		nl.NativeEndian().PutUint16(data[16:], n.Timeout)
		return nil
	}
	if n.ValidTimeout != nil && !n.ValidTimeout(tu.Value) {
		return syscall.EINVAL
	}
	n.Timeout = tu.Value
	return nil
}
