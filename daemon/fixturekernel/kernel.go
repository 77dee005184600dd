package fixturekernel

import (
	"errors"
	"fmt"
	"sync"
	"syscall"

	"github.com/rdmad/rdmad/daemon/dcb"
	"github.com/rdmad/rdmad/daemon/ethtool"
	"github.com/rdmad/rdmad/daemon/host"
)

// Kernel serves dcb.Kernel and ethtool.Kernel from the state file of the
// fixture at Host's root: every call reads the file (another process may
// have changed it), and a change is written back atomically before the
// call returns. Errors read as the real codecs' do ("set PFC of
// ens1f0np0: ..."): a driver's refusal of a DCB SET is a
// *dcb.StatusError, as in the reply's status byte, the rest an errno.
type Kernel struct {
	Host *host.Host

	mu sync.Mutex // one read-modify-write at a time
}

// New returns the kernel of the fixture at h's root.
func New(h *host.Host) *Kernel { return &Kernel{Host: h} }

// Present reports whether the fixture at h's root carries a state file.
func Present(h *host.Host) bool { return h.Exists(File) }

// ErrNotListed is a netdev the state file does not list.
var ErrNotListed = errors.New("not listed in the fixture's " + File)

// Read reads and checks the state file.
func (k *Kernel) Read() (*State, error) {
	b, err := k.Host.ReadFile(File)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", File, err)
	}
	return Parse(File, b)
}

// netdev finds ifname in s and answers a refusal of verb the file names.
func netdev(s *State, ifname, verb string) (*Netdev, error) {
	n, ok := s.Netdevs[ifname]
	if !ok {
		return nil, ErrNotListed
	}
	if name, ok := n.Refuse[verb]; ok {
		e, _ := Errno(name) // checked by Parse
		return n, e
	}
	return n, nil
}

// view runs fn on ifname's state for a read.
func (k *Kernel) view(ifname, verb string, fn func(n *Netdev) error) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	s, err := k.Read()
	if err != nil {
		return err
	}
	n, err := netdev(s, ifname, verb)
	if err != nil {
		return err
	}
	return fn(n)
}

// update runs fn on ifname's state and writes the file when fn changed it.
// A refusal the file names comes back as refused makes it.
func (k *Kernel) update(ifname, verb string, refused func(syscall.Errno) error, fn func(n *Netdev) error) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	s, err := k.Read()
	if err != nil {
		return err
	}
	n, err := netdev(s, ifname, verb)
	var errno syscall.Errno
	switch {
	case errors.As(err, &errno):
		return refused(errno)
	case err != nil:
		return err
	}
	before, err := Marshal(s)
	if err != nil {
		return err
	}
	if err := fn(n); err != nil {
		return err
	}
	after, err := Marshal(s)
	if err != nil {
		return err
	}
	if string(after) == string(before) {
		return nil
	}
	if err := k.Host.WriteFileAtomic(File, after, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", File, err)
	}
	return nil
}

func wrap(what, ifname string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s %s: %w", what, ifname, err)
}

// plain is a refusal as the netlink error or ioctl return it is.
func plain(e syscall.Errno) error { return e }

// status is a DCB SET's refusal as dcbnl reports it: the message is
// acknowledged, the driver's return value is in the reply's status byte.
func status(cmd uint8) func(syscall.Errno) error {
	return func(e syscall.Errno) error {
		if e == 0 {
			return nil
		}
		return &dcb.StatusError{Cmd: cmd, Status: -int8(e)}
	}
}

// dcbOf is the netdev's DCB, or EOPNOTSUPP for a netdev without
// dcbnl_ops.
func dcbOf(n *Netdev) (*DCB, error) {
	if n.DCB == nil {
		return nil, syscall.EOPNOTSUPP
	}
	return n.DCB, nil
}

// Get implements dcb.Kernel.
func (k *Kernel) Get(ifname string) (dcb.IEEE, error) {
	var ie dcb.IEEE
	err := k.view(ifname, VerbGet, func(n *Netdev) error {
		d, err := dcbOf(n)
		if err == nil {
			ie = d.ieee()
		}
		return err
	})
	return ie, wrap("get IEEE DCB of", ifname, err)
}

// DCBX implements dcb.Kernel.
func (k *Kernel) DCBX(ifname string) (uint8, error) {
	var caps uint8
	err := k.view(ifname, VerbDCBX, func(n *Netdev) error {
		d, err := dcbOf(n)
		if err != nil {
			return err
		}
		if d.DCBX == nil {
			return syscall.EOPNOTSUPP // no getdcbx
		}
		caps, _ = dcbxBits(d.DCBX)
		return nil
	})
	return caps, wrap("get DCBX mode of", ifname, err)
}

// setIEEE runs one IEEE SET or DEL: a netdev without DCB answers
// EOPNOTSUPP, a driver's refusal is the status byte.
func (k *Kernel) setIEEE(what, ifname, verb string, cmd uint8, fn func(n *Netdev) syscall.Errno) error {
	err := k.update(ifname, verb, status(cmd), func(n *Netdev) error {
		if _, err := dcbOf(n); err != nil {
			return err
		}
		return status(cmd)(fn(n))
	})
	return wrap(what, ifname, err)
}

// SetPFC implements dcb.Kernel. A driver without PFC skips it, as
// dcbnl_ieee_set skips an attribute without its driver operation.
func (k *Kernel) SetPFC(ifname string, p dcb.PFC) error {
	return k.setIEEE("set PFC of", ifname, VerbSetPFC, dcb.CmdIEEESet, func(n *Netdev) syscall.Errno {
		if n.DCB.PFC != nil {
			n.setPFC(p)
		}
		return 0
	})
}

// SetETS implements dcb.Kernel.
func (k *Kernel) SetETS(ifname string, e dcb.ETS) error {
	return k.setIEEE("set ETS of", ifname, VerbSetETS, dcb.CmdIEEESet, func(n *Netdev) syscall.Errno {
		if n.DCB.ETS == nil {
			return 0
		}
		return n.setETS(e)
	})
}

// SetMaxrate implements dcb.Kernel.
func (k *Kernel) SetMaxrate(ifname string, m dcb.Maxrate) error {
	return k.setIEEE("set the rate limits of", ifname, VerbSetMaxrate, dcb.CmdIEEESet, func(n *Netdev) syscall.Errno {
		if n.DCB.Maxrate == nil {
			return 0
		}
		return n.setMaxrate(m)
	})
}

// SetBuffer implements dcb.Kernel.
func (k *Kernel) SetBuffer(ifname string, b dcb.Buffer) error {
	return k.setIEEE("set the port buffers of", ifname, VerbSetBuffer, dcb.CmdIEEESet, func(n *Netdev) syscall.Errno {
		if n.DCB.Buffer != nil {
			n.setBuffer(b)
		}
		return 0
	})
}

// SetApp implements dcb.Kernel.
func (k *Kernel) SetApp(ifname string, a dcb.App) error {
	return k.setIEEE("add APP entry "+a.String()+" to", ifname, VerbSetApp, dcb.CmdIEEESet, func(n *Netdev) syscall.Errno {
		return n.setApp(a)
	})
}

// DelApp implements dcb.Kernel.
func (k *Kernel) DelApp(ifname string, a dcb.App) error {
	return k.setIEEE("delete APP entry "+a.String()+" of", ifname, VerbDelApp, dcb.CmdIEEEDel, func(n *Netdev) syscall.Errno {
		return n.delApp(a)
	})
}

// SetDCBX implements dcb.Kernel: a refusal is the driver's setdcbx
// status, a *dcb.DCBXRefusedError.
func (k *Kernel) SetDCBX(ifname string, mode uint8) error {
	refused := func(syscall.Errno) error { return &dcb.DCBXRefusedError{Mode: mode, Status: 1} }
	err := k.update(ifname, VerbSetDCBX, refused, func(n *Netdev) error {
		d, err := dcbOf(n)
		if err != nil {
			return err
		}
		if d.DCBX == nil {
			return syscall.EOPNOTSUPP // no setdcbx
		}
		if st := n.setDCBX(mode); st != 0 {
			return &dcb.DCBXRefusedError{Mode: mode, Status: st}
		}
		return nil
	})
	return wrap("set the DCBX mode of", ifname, err)
}

// Pause implements ethtool.Kernel.
func (k *Kernel) Pause(ifname string) (ethtool.Pause, error) {
	var p ethtool.Pause
	err := k.view(ifname, VerbPause, func(n *Netdev) error {
		if n.Pause == nil {
			return syscall.EOPNOTSUPP
		}
		p = n.Pause.value()
		return nil
	})
	return p, wrap("get pause of", ifname, err)
}

// SetPause implements ethtool.Kernel (autonegotiation is left as it is).
func (k *Kernel) SetPause(ifname string, rx, tx bool) error {
	err := k.update(ifname, VerbSetPause, plain, func(n *Netdev) error {
		if n.Pause == nil {
			return syscall.EOPNOTSUPP
		}
		n.Pause.RX, n.Pause.TX = rx, tx
		return nil
	})
	return wrap("set pause of", ifname, err)
}

// PFCStormTimeout implements ethtool.Kernel.
func (k *Kernel) PFCStormTimeout(ifname string) (uint16, error) {
	var ms uint16
	err := k.view(ifname, VerbPFCStormTimeout, func(n *Netdev) error {
		if n.PFCStormTimeout == nil {
			return syscall.EOPNOTSUPP
		}
		ms = *n.PFCStormTimeout
		return nil
	})
	return ms, wrap("get pfc-prevention-tout of", ifname, err)
}

// SetPFCStormTimeout implements ethtool.Kernel.
func (k *Kernel) SetPFCStormTimeout(ifname string, ms uint16) error {
	err := k.update(ifname, VerbSetPFCStormTimeout, plain, func(n *Netdev) error {
		if n.PFCStormTimeout == nil {
			return syscall.EOPNOTSUPP
		}
		if e := n.setStormTimeout(ms); e != 0 {
			return e
		}
		return nil
	})
	return wrap("set pfc-prevention-tout of", ifname, err)
}

var (
	_ dcb.Kernel     = (*Kernel)(nil)
	_ ethtool.Kernel = (*Kernel)(nil)
)
