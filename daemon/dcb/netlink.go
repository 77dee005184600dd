package dcb

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// Reader reads the IEEE DCB state of a netdev: what doctor needs.
type Reader interface {
	Get(ifname string) (IEEE, error)
}

// Kernel is the DCB side of the kernel as the qos part uses it. Netlink is
// the real one; dcbtest.Fake the unit tests'.
type Kernel interface {
	// Get reads the IEEE state of ifname (DCB_CMD_IEEE_GET).
	Get(ifname string) (IEEE, error)
	// DCBX reads the DCBX capability bits of ifname (DCB_CMD_GDCBX).
	DCBX(ifname string) (uint8, error)
	// SetPFC writes struct ieee_pfc; a refusal in the status byte is a
	// *StatusError. SetETS, SetMaxrate and SetBuffer write theirs alike.
	SetPFC(ifname string, p PFC) error
	SetETS(ifname string, e ETS) error
	SetMaxrate(ifname string, m Maxrate) error
	SetBuffer(ifname string, b Buffer) error
	// SetApp adds one APP entry, DelApp removes one, each in a message of
	// its own.
	SetApp(ifname string, a App) error
	DelApp(ifname string, a App) error
	// SetDCBX sets the DCBX mode bits (DCB_CMD_SDCBX); a refusal is a
	// *DCBXRefusedError.
	SetDCBX(ifname string, mode uint8) error
}

// Netlink talks dcbnl in the calling goroutine's network namespace.
type Netlink struct {
	// Transport sends one request and returns the payloads of its reply
	// messages of type resType, or the errno of the kernel's error
	// message. nil: a NETLINK_ROUTE socket (nl.NetlinkRequest.Execute);
	// dcbtest.Fake plugs in a kernel of its own here.
	Transport func(req *nl.NetlinkRequest, resType uint16) ([][]byte, error)
}

func (n Netlink) exec(req *nl.NetlinkRequest, resType uint16) ([]byte, error) {
	send := n.Transport
	if send == nil {
		send = func(req *nl.NetlinkRequest, resType uint16) ([][]byte, error) {
			return req.Execute(unix.NETLINK_ROUTE, resType)
		}
	}
	msgs, err := send(req, resType)
	if err != nil {
		return nil, err
	}
	if len(msgs) == 0 {
		return nil, errors.New("the kernel sent no reply")
	}
	return msgs[0], nil
}

// Get implements Kernel.
func (n Netlink) Get(ifname string) (IEEE, error) {
	msg, err := n.exec(GetRequest(ifname), unix.RTM_GETDCB)
	if err != nil {
		return IEEE{}, wrap("get IEEE DCB of", ifname, err)
	}
	ie, err := ParseGet(msg)
	if err != nil {
		return IEEE{}, wrap("get IEEE DCB of", ifname, err)
	}
	return ie, nil
}

// DCBX implements Kernel.
func (n Netlink) DCBX(ifname string) (uint8, error) {
	msg, err := n.exec(DCBXRequest(ifname), unix.RTM_GETDCB)
	if err != nil {
		return 0, wrap("get DCBX mode of", ifname, err)
	}
	caps, err := ParseDCBX(msg)
	if err != nil {
		return 0, wrap("get DCBX mode of", ifname, err)
	}
	return caps, nil
}

func (n Netlink) set(what, ifname string, req *nl.NetlinkRequest, cmd uint8) error {
	msg, err := n.exec(req, unix.RTM_SETDCB)
	if err == nil {
		err = ParseSetStatus(msg, cmd)
	}
	if err != nil {
		return wrap(what, ifname, err)
	}
	return nil
}

// SetPFC implements Kernel.
func (n Netlink) SetPFC(ifname string, p PFC) error {
	return n.set("set PFC of", ifname, PFCRequest(ifname, p), CmdIEEESet)
}

// SetETS implements Kernel.
func (n Netlink) SetETS(ifname string, e ETS) error {
	return n.set("set ETS of", ifname, ETSRequest(ifname, e), CmdIEEESet)
}

// SetMaxrate implements Kernel.
func (n Netlink) SetMaxrate(ifname string, m Maxrate) error {
	return n.set("set the rate limits of", ifname, MaxrateRequest(ifname, m), CmdIEEESet)
}

// SetBuffer implements Kernel.
func (n Netlink) SetBuffer(ifname string, b Buffer) error {
	return n.set("set the port buffers of", ifname, BufferRequest(ifname, b), CmdIEEESet)
}

// SetApp implements Kernel.
func (n Netlink) SetApp(ifname string, a App) error {
	return n.set("add APP entry "+a.String()+" to", ifname, AppRequest(ifname, false, a), CmdIEEESet)
}

// DelApp implements Kernel.
func (n Netlink) DelApp(ifname string, a App) error {
	return n.set("delete APP entry "+a.String()+" of", ifname, AppRequest(ifname, true, a), CmdIEEEDel)
}

// SetDCBX implements Kernel.
func (n Netlink) SetDCBX(ifname string, mode uint8) error {
	msg, err := n.exec(DCBXSetRequest(ifname, mode), unix.RTM_SETDCB)
	if err == nil {
		err = ParseSDCBXStatus(msg, mode)
	}
	if err != nil {
		return wrap("set the DCBX mode of", ifname, err)
	}
	return nil
}

func wrap(what, ifname string, err error) error {
	return fmt.Errorf("%s %s: %w", what, ifname, err)
}

// Unsupported reports whether err says the netdev has no DCB at all
// (EOPNOTSUPP: veth, virtio, a driver without dcbnl_ops).
func Unsupported(err error) bool { return errors.Is(err, syscall.EOPNOTSUPP) }
