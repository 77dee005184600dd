// Package dcbtest is a fake DCB kernel for unit tests. It sits behind
// dcb.Netlink's Transport, so every call goes through the real encoder and
// decoder: the fake reads the serialized request and answers with the
// bytes dcbnl would. Its netdevs behave the way drivers do: a netdev
// without DCB answers EOPNOTSUPP, a driver may refuse a SET in the status
// byte while the message is acknowledged, drop a value it acknowledged, and
// the APP table comes back in the kernel's list order (newest first), not
// the order it was written in, an object the driver lacks is missing from
// the GET and skipped by a SET (as dcbnl_ieee_set skips an attribute
// without its driver operation). Only tests import it; dcb.Netlink with no
// Transport is the real counterpart (tested against this host's kernel).
package dcbtest

import (
	"fmt"
	"slices"
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
	// The objects a driver may lack: nil is missing from the GET, and a
	// SET of it is skipped with status 0.
	ETS     *dcb.ETS
	Maxrate *dcb.Maxrate
	Buffer  *dcb.Buffer

	// Driver behaviour.
	RefusePFC     syscall.Errno // SET of PFC acknowledged with this status
	RefuseApps    syscall.Errno // APP SET/DEL acknowledged with this status
	RefuseETS     syscall.Errno
	RefuseMaxrate syscall.Errno
	RefuseBuffer  syscall.Errno
	DropPFC       bool // PFC SET acknowledged with status 0 but not kept
	DropApps      bool // APP SET acknowledged with status 0 but not kept
	// AppSelectors are the APP selectors the driver's ieee_setapp takes;
	// another is refused with EINVAL (mlx5: DSCP only). nil takes any, as
	// the kernel's generic APP list does.
	AppSelectors []uint8
	// KeepDelay says which PFC delays the driver keeps; another is ignored
	// without an error (mlx5 keeps 1..999). nil keeps every delay.
	KeepDelay func(uint16) bool
	// RoundMaxrate is how the driver stores a rate (kbit/s): mlx5 in units
	// of 100 Mbit/s or 1 Gbit/s. nil stores it exactly.
	RoundMaxrate func(uint64) uint64
	// SetDCBX is the driver's setdcbx: the status it returns for mode (0
	// takes it, and GDCBX then answers mode). nil: no setdcbx, EOPNOTSUPP.
	SetDCBX func(mode uint8) uint8
	// ToggleLinkOnPFC counts in LinkToggles every PFC SET that changes the
	// enable mask, as mlx5 toggles the port's link then
	// (mlx5e_dcbnl_ieee_setpfc); a delay change alone does not.
	ToggleLinkOnPFC bool
	LinkToggles     int
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

// MLX5 makes n behave as mlx5_core does: ETS, rate limits and buffers,
// DSCP entries only, the cable length kept for 1..999 metres, rates
// stored in 100 Mbit/s units up to 25.5 Gbit/s and in 1 Gbit/s units
// above, and host DCBX taken only with the IEEE bit (mlx5e_dcbnl_setdcbx).
func MLX5(n *Netdev) {
	n.ETS = &dcb.ETS{Cap: 8, TSA: [8]dcb.TSA{dcb.TSAETS, dcb.TSAETS, dcb.TSAETS, dcb.TSAETS, dcb.TSAETS, dcb.TSAETS, dcb.TSAETS, dcb.TSAETS},
		TxBW: [8]uint8{13, 13, 13, 13, 12, 12, 12, 12}}
	n.Maxrate = &dcb.Maxrate{}
	n.Buffer = &dcb.Buffer{Size: [8]uint32{262016, 0, 0, 0, 0, 0, 0, 0}, Total: 524160}
	n.AppSelectors = []uint8{dcb.SelDSCP}
	n.ToggleLinkOnPFC = true
	n.PFC.Delay = 7 // MLX5E_DEFAULT_CABLE_LEN, reported while the buffers are configurable
	n.KeepDelay = func(d uint16) bool { return d > 0 && d < 1000 }
	n.RoundMaxrate = func(kbps uint64) uint64 {
		const mbit100, gbit = 100_000, 1_000_000
		switch {
		case kbps == 0:
			return 0
		case kbps <= 255*mbit100:
			return max(kbps/mbit100, 1) * mbit100
		}
		return kbps / gbit * gbit
	}
	n.SetDCBX = func(mode uint8) uint8 {
		if mode == 0 {
			return 0 // back to firmware control
		}
		if mode&dcb.CapLLDManaged != 0 || mode&dcb.CapVerCEE != 0 || mode&dcb.CapVerIEEE == 0 || mode&dcb.CapHost == 0 {
			return 1
		}
		return 0
	}
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
	c.ETS, c.Maxrate, c.Buffer = clone(n.ETS), clone(n.Maxrate), clone(n.Buffer)
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

// Remove takes a netdev away (unplugged, its driver unbound): every
// request for it is ENODEV from then on.
func (f *Fake) Remove(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.netdevs, name)
}

func clone[T any](p *T) *T {
	if p == nil {
		return nil
	}
	c := *p
	return &c
}

// Calls lists the requests so far: "get eth0", "dcbx eth0",
// "set-pfc eth0 0x08", "set-app eth0 26:3 48:6", "del-app eth0 26:0",
// "set-app eth0 dgram 4791:3", "set-ets eth0 prio-tc 0 0 0 1 0 0 0 0 ...",
// "set-maxrate eth0 0 25000000 ...", "set-buffer eth0 ...",
// "set-dcbx eth0 0x09".
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
	r, err := ParseRequest(req.Serialize())
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
		reply = EncodeGetReply(r.Ifname, dcb.IEEE{PFC: &p, ETS: clone(n.ETS), Maxrate: clone(n.Maxrate), Buffer: clone(n.Buffer),
			Apps: n.Apps, DCBX: n.DCBX, HasDCBX: true})
	case r.Type == unix.RTM_GETDCB && r.Cmd == dcb.CmdGDCBX:
		reply = EncodeDCBXReply(n.DCBX)
	case r.Type == unix.RTM_SETDCB && r.Cmd == dcb.CmdIEEESet:
		reply = EncodeSetReply(r.Cmd, -int(n.set(r)))
	case r.Type == unix.RTM_SETDCB && r.Cmd == dcb.CmdIEEEDel:
		reply = EncodeSetReply(r.Cmd, -int(n.del(r)))
	case r.Type == unix.RTM_SETDCB && r.Cmd == dcb.CmdSDCBX:
		if n.SetDCBX == nil {
			return nil, syscall.EOPNOTSUPP
		}
		if !r.HasDCBX {
			return nil, syscall.EINVAL
		}
		status := n.SetDCBX(r.DCBX)
		switch {
		case status == 0 && r.DCBX == 0:
			// Mode 0 hands DCBX to the firmware (mlx5): it reports
			// LLD-managed from then on.
			n.DCBX = dcb.CapLLDManaged | dcb.CapVerIEEE | dcb.CapVerCEE
		case status == 0:
			n.DCBX = r.DCBX
		}
		reply = EncodeSDCBXReply(status)
	default:
		return nil, syscall.EOPNOTSUPP
	}
	if resType != 0 && resType != r.Type {
		return nil, nil
	}
	return [][]byte{reply}, nil
}

// set applies an IEEE SET as dcbnl_ieee_set does: ETS, PFC, rate
// limits, buffers, then each APP entry, each skipped when the driver lacks
// it; the first error stops it and becomes the status byte.
func (n *Netdev) set(r Request) syscall.Errno {
	if r.ETS != nil && n.ETS != nil {
		if n.RefuseETS != 0 {
			return n.RefuseETS
		}
		e := *r.ETS
		e.Cap = n.ETS.Cap // read only
		*n.ETS = e
	}
	if r.PFC != nil {
		if n.RefusePFC != 0 {
			return n.RefusePFC
		}
		if !n.DropPFC {
			if n.ToggleLinkOnPFC && n.PFC.Enabled != r.PFC.Enabled {
				n.LinkToggles++
			}
			n.PFC.Enabled = r.PFC.Enabled
			if n.KeepDelay == nil || n.KeepDelay(r.PFC.Delay) {
				n.PFC.Delay = r.PFC.Delay
			}
		}
	}
	if r.Maxrate != nil && n.Maxrate != nil {
		if n.RefuseMaxrate != 0 {
			return n.RefuseMaxrate
		}
		for i, k := range r.Maxrate.Rate {
			if n.RoundMaxrate != nil {
				k = n.RoundMaxrate(k)
			}
			n.Maxrate.Rate[i] = k
		}
	}
	if r.Buffer != nil && n.Buffer != nil {
		if n.RefuseBuffer != 0 {
			return n.RefuseBuffer
		}
		n.Buffer.PrioBuffer, n.Buffer.Size = r.Buffer.PrioBuffer, r.Buffer.Size
	}
	for _, a := range r.Apps {
		if n.RefuseApps != 0 {
			return n.RefuseApps
		}
		if n.AppSelectors != nil && !slices.Contains(n.AppSelectors, a.Selector) {
			return syscall.EINVAL
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
func (n *Netdev) del(r Request) syscall.Errno {
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

func describe(r Request) string {
	switch {
	case r.Type == unix.RTM_GETDCB && r.Cmd == dcb.CmdIEEEGet:
		return "get " + r.Ifname
	case r.Type == unix.RTM_GETDCB && r.Cmd == dcb.CmdGDCBX:
		return "dcbx " + r.Ifname
	case r.Cmd == dcb.CmdIEEESet && r.PFC != nil && r.PFC.Delay != 0:
		return fmt.Sprintf("set-pfc %s 0x%02x delay %d", r.Ifname, r.PFC.Enabled, r.PFC.Delay)
	case r.Cmd == dcb.CmdIEEESet && r.PFC != nil:
		return fmt.Sprintf("set-pfc %s 0x%02x", r.Ifname, r.PFC.Enabled)
	case r.Cmd == dcb.CmdIEEESet && r.ETS != nil:
		return fmt.Sprintf("set-ets %s prio-tc %v tc-bw %v tc-tsa %v", r.Ifname, r.ETS.PrioTC, r.ETS.TxBW, r.ETS.TSA)
	case r.Cmd == dcb.CmdIEEESet && r.Maxrate != nil:
		return fmt.Sprintf("set-maxrate %s %v", r.Ifname, r.Maxrate.Rate)
	case r.Cmd == dcb.CmdIEEESet && r.Buffer != nil:
		return fmt.Sprintf("set-buffer %s prio-buffer %v size %v", r.Ifname, r.Buffer.PrioBuffer, r.Buffer.Size)
	case r.Cmd == dcb.CmdSDCBX:
		return fmt.Sprintf("set-dcbx %s 0x%02x", r.Ifname, r.DCBX)
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
		if a.Selector == dcb.SelDgram {
			s += " dgram"
		}
		s += fmt.Sprintf(" %d:%d", a.Protocol, a.Priority)
	}
	return s
}
