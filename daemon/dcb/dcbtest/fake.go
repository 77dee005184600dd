// Package dcbtest is a fake DCB kernel for unit tests. It sits behind
// dcb.Netlink's Transport, so every call goes through the real encoder and
// decoder: the fake reads the serialized request and answers with the
// bytes dcbnl would. Its netdevs behave the way drivers do: a netdev
// without DCB answers EOPNOTSUPP, a driver may refuse a SET in the status
// byte while the message is acknowledged, drop a value it acknowledged, and
// the APP table comes back in the kernel's list order (newest first), not
// the order it was written in. Only tests import it; dcb.Netlink with no
// Transport is the real counterpart (tested against this host's kernel).
package dcbtest

import (
	"fmt"
	"sync"
	"syscall"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/rdmad/rdmad/daemon/dcb"
)

// Netdev is one netdev of the fake kernel.
type Netdev struct {
	NoDCB bool  // no dcbnl_ops: every request is EOPNOTSUPP (veth, virtio, VFs)
	DCBX  uint8 // DCB_CMD_GDCBX answer (default dcb.CapHost|dcb.CapVerIEEE)
	PFC   dcb.PFC
	Apps  []dcb.App // in the kernel's list order

	// Driver behaviour.
	RefusePFC  syscall.Errno // SET of PFC acknowledged with this status
	RefuseApps syscall.Errno // APP SET/DEL acknowledged with this status
	DropPFC    bool          // PFC SET acknowledged with status 0 but not kept
	DropApps   bool          // APP SET acknowledged with status 0 but not kept
}

// Fake is the kernel: netdevs by name; a name it does not hold is ENODEV.
type Fake struct {
	mu      sync.Mutex
	netdevs map[string]*Netdev
	calls   []string
}

// New returns a fake kernel with no netdevs.
func New() *Fake { return &Fake{netdevs: map[string]*Netdev{}} }

// Add adds (or replaces) a netdev that supports DCB, with PFC capable of
// 8 priorities, and returns it for tuning.
func (f *Fake) Add(name string) *Netdev {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := &Netdev{DCBX: dcb.CapHost | dcb.CapVerIEEE, PFC: dcb.PFC{Cap: 8}}
	f.netdevs[name] = n
	return n
}

// AddNoDCB adds a netdev without DCB (veth, virtio).
func (f *Fake) AddNoDCB(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.netdevs[name] = &Netdev{NoDCB: true}
}

// Netdev returns a copy of the named netdev's state.
func (f *Fake) Netdev(name string) (Netdev, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n, ok := f.netdevs[name]
	if !ok {
		return Netdev{}, false
	}
	c := *n
	c.Apps = append([]dcb.App(nil), n.Apps...)
	return c, true
}

// Update changes a netdev under the lock (a driver reload, another tool).
func (f *Fake) Update(name string, fn func(*Netdev)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if n, ok := f.netdevs[name]; ok {
		fn(n)
	}
}

// Calls lists the requests so far: "get eth0", "dcbx eth0",
// "set-pfc eth0 0x08", "set-app eth0 26:3 48:6", "del-app eth0 26:0".
func (f *Fake) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

// Writes lists the SET and DEL requests only.
func (f *Fake) Writes() []string {
	var out []string
	for _, c := range f.Calls() {
		if len(c) > 4 && (c[:4] == "set-" || c[:4] == "del-") {
			out = append(out, c)
		}
	}
	return out
}

// Kernel returns a dcb.Kernel that talks to the fake through the real
// codec.
func (f *Fake) Kernel() dcb.Kernel { return dcb.Netlink{Transport: f.transport} }

func (f *Fake) transport(req *nl.NetlinkRequest, resType uint16) ([][]byte, error) {
	r, err := dcb.ParseRequest(req.Serialize())
	if err != nil {
		return nil, syscall.EINVAL
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, describe(r))
	if r.Flags&unix.NLM_F_ACK == 0 {
		return nil, fmt.Errorf("fake dcb: request without NLM_F_ACK")
	}
	n, ok := f.netdevs[r.Ifname]
	if r.Ifname == "" {
		return nil, syscall.EINVAL
	}
	if !ok {
		return nil, syscall.ENODEV
	}
	if n.NoDCB {
		return nil, syscall.EOPNOTSUPP
	}
	var reply []byte
	switch {
	case r.Type == unix.RTM_GETDCB && r.Cmd == dcb.CmdIEEEGet:
		p := n.PFC
		reply = dcb.EncodeGetReply(r.Ifname, dcb.IEEE{PFC: &p, Apps: n.Apps, DCBX: n.DCBX, HasDCBX: true})
	case r.Type == unix.RTM_GETDCB && r.Cmd == dcb.CmdGDCBX:
		reply = dcb.EncodeDCBXReply(n.DCBX)
	case r.Type == unix.RTM_SETDCB && r.Cmd == dcb.CmdIEEESet:
		reply = dcb.EncodeSetReply(r.Cmd, -int(n.set(r)))
	case r.Type == unix.RTM_SETDCB && r.Cmd == dcb.CmdIEEEDel:
		reply = dcb.EncodeSetReply(r.Cmd, -int(n.del(r)))
	case r.Type == unix.RTM_SETDCB && r.Cmd == 23: // DCB_CMD_SDCBX: rdmad must never send it
		panic("fake dcb: DCB_CMD_SDCBX sent")
	default:
		return nil, syscall.EOPNOTSUPP
	}
	if resType != 0 && resType != r.Type {
		return nil, nil
	}
	return [][]byte{reply}, nil
}

// set applies an IEEE SET as dcbnl_ieee_set does: PFC first, then each
// APP entry; the first error stops it and becomes the status byte.
func (n *Netdev) set(r dcb.Request) syscall.Errno {
	if r.PFC != nil {
		if n.RefusePFC != 0 {
			return n.RefusePFC
		}
		if !n.DropPFC {
			n.PFC.Enabled = r.PFC.Enabled
			n.PFC.Delay = r.PFC.Delay
		}
	}
	for _, a := range r.Apps {
		if n.RefuseApps != 0 {
			return n.RefuseApps
		}
		if n.DropApps {
			continue
		}
		for _, o := range n.Apps {
			if o == a {
				return syscall.EEXIST // dcb_ieee_setapp refuses an exact duplicate
			}
		}
		// dcb_app_list is extended with list_add: newest first.
		n.Apps = append([]dcb.App{a}, n.Apps...)
	}
	return 0
}

// del applies an IEEE DEL: each entry must exist (ENOENT otherwise).
func (n *Netdev) del(r dcb.Request) syscall.Errno {
	for _, a := range r.Apps {
		if n.RefuseApps != 0 {
			return n.RefuseApps
		}
		i := -1
		for j, o := range n.Apps {
			if o == a {
				i = j
				break
			}
		}
		if i < 0 {
			return syscall.ENOENT
		}
		if !n.DropApps {
			n.Apps = append(n.Apps[:i:i], n.Apps[i+1:]...)
		}
	}
	return 0
}

func describe(r dcb.Request) string {
	switch {
	case r.Type == unix.RTM_GETDCB && r.Cmd == dcb.CmdIEEEGet:
		return "get " + r.Ifname
	case r.Type == unix.RTM_GETDCB && r.Cmd == dcb.CmdGDCBX:
		return "dcbx " + r.Ifname
	case r.Cmd == dcb.CmdIEEESet && r.PFC != nil:
		return fmt.Sprintf("set-pfc %s 0x%02x", r.Ifname, r.PFC.Enabled)
	case r.Cmd == dcb.CmdIEEESet:
		return "set-app " + r.Ifname + apps(r.Apps)
	case r.Cmd == dcb.CmdIEEEDel:
		return "del-app " + r.Ifname + apps(r.Apps)
	}
	return fmt.Sprintf("cmd %d %s", r.Cmd, r.Ifname)
}

func apps(as []dcb.App) string {
	s := ""
	for _, a := range as {
		s += fmt.Sprintf(" %d:%d", a.Protocol, a.Priority)
	}
	return s
}
