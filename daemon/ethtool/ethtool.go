// Package ethtool is a small codec for what lossless RoCE needs from
// ethtool: the global 802.3x pause of a netdev through ethtool netlink
// (generic netlink family "ethtool": ETHTOOL_MSG_PAUSE_GET/SET, and
// ETHTOOL_MSG_PAUSE_NTF on its "monitor" group, which the kernel
// multicasts after every pause change made through netlink), and the PFC
// storm prevention timeout, an ethtool tunable (ETHTOOL_PFC_PREVENTION_TOUT)
// that exists only through the SIOCETHTOOL ioctl (ETHTOOL_GTUNABLE,
// ETHTOOL_STUNABLE) and raises no notification.
//
// The messages are byte for byte those ethtool(8) sends (testdata/*.hex,
// captured by testdata/capture.sh); the framing is vishvananda/netlink's
// nl package, the family is resolved through its generic netlink
// controller client. rdmad never sets pause autonegotiation: mlx5 refuses
// it on, and leaving it as found is what `ethtool -A IF rx off tx off`
// does.
package ethtool

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/rdmad/rdmad/daemon/nlattr"
)

// Family is the generic netlink family name and version (ETHTOOL_GENL_NAME,
// ETHTOOL_GENL_VERSION), and MonitorGroup its notification group
// (ETHTOOL_MCGRP_MONITOR_NAME).
const (
	Family       = "ethtool"
	Version      = 1
	MonitorGroup = "monitor"
)

// Message types (the ETHTOOL_MSG_* enums: user to kernel, then kernel to
// user).
const (
	CmdPauseGet      uint8 = 21 // ETHTOOL_MSG_PAUSE_GET
	CmdPauseSet      uint8 = 22 // ETHTOOL_MSG_PAUSE_SET
	CmdPauseGetReply uint8 = 22 // ETHTOOL_MSG_PAUSE_GET_REPLY
	CmdPauseNtf      uint8 = 23 // ETHTOOL_MSG_PAUSE_NTF
)

// Attributes (ETHTOOL_A_PAUSE_*, ETHTOOL_A_HEADER_*).
const (
	attrPauseHeader  = 1 // nest of ETHTOOL_A_HEADER_*
	attrPauseAutoneg = 2 // u8
	attrPauseRX      = 3 // u8
	attrPauseTX      = 4 // u8

	attrHeaderDevIndex = 1 // u32
	attrHeaderDevName  = 2 // string
)

// Pause is a netdev's global (802.3x) pause: whether it negotiates pause
// with its link partner and whether it honours (RX) and sends (TX) pause
// frames.
type Pause struct {
	Autoneg bool
	RX, TX  bool
}

// Off reports whether the netdev neither honours nor sends pause frames.
func (p Pause) Off() bool { return !p.RX && !p.TX }

func (p Pause) String() string {
	onOff := func(b bool) string {
		if b {
			return "on"
		}
		return "off"
	}
	return fmt.Sprintf("autoneg %s rx %s tx %s", onOff(p.Autoneg), onOff(p.RX), onOff(p.TX))
}

// genlmsg is struct genlmsghdr: command, version, two reserved bytes.
type genlmsg [4]byte

func (m genlmsg) Len() int          { return len(m) }
func (m genlmsg) Serialize() []byte { return m[:] }

func newRequest(family uint16, cmd uint8, ifname string) *nl.NetlinkRequest {
	req := nl.NewNetlinkRequest(int(family), unix.NLM_F_ACK)
	req.AddData(genlmsg{cmd, Version, 0, 0})
	header := nl.NewRtAttr(unix.NLA_F_NESTED|attrPauseHeader, nil)
	header.AddRtAttr(attrHeaderDevName, nl.ZeroTerminated(ifname))
	req.AddData(header)
	return req
}

// PauseGetRequest is ETHTOOL_MSG_PAUSE_GET for ifname (`ethtool -a IF`);
// family is the id the kernel gave the ethtool family.
func PauseGetRequest(family uint16, ifname string) *nl.NetlinkRequest {
	return newRequest(family, CmdPauseGet, ifname)
}

// PauseSetRequest is ETHTOOL_MSG_PAUSE_SET of rx and tx, autonegotiation
// left as it is (`ethtool -A IF rx off tx off`).
func PauseSetRequest(family uint16, ifname string, rx, tx bool) *nl.NetlinkRequest {
	req := newRequest(family, CmdPauseSet, ifname)
	req.AddData(nl.NewRtAttr(attrPauseRX, []byte{boolByte(rx)}))
	req.AddData(nl.NewRtAttr(attrPauseTX, []byte{boolByte(tx)}))
	return req
}

func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}

// PauseMessage is an ETHTOOL_MSG_PAUSE_GET_REPLY or ETHTOOL_MSG_PAUSE_NTF
// decoded.
type PauseMessage struct {
	Cmd     uint8
	Ifindex uint32
	Ifname  string
	Pause   Pause
}

// ParsePause decodes the payload (after the nlmsghdr) of a pause reply or
// notification.
func ParsePause(msg []byte) (PauseMessage, error) {
	if len(msg) < 4 {
		return PauseMessage{}, fmt.Errorf("message of %d bytes has no genlmsghdr", len(msg))
	}
	m := PauseMessage{Cmd: msg[0]}
	if m.Cmd != CmdPauseGetReply && m.Cmd != CmdPauseNtf {
		return PauseMessage{}, fmt.Errorf("message %d is not a pause reply or notification", m.Cmd)
	}
	as, err := nlattr.Parse(msg[4:])
	if err != nil {
		return PauseMessage{}, fmt.Errorf("pause attributes: %w", err)
	}
	for _, a := range as {
		switch a.Type {
		case attrPauseHeader:
			hs, err := nlattr.Parse(a.Value)
			if err != nil {
				return PauseMessage{}, fmt.Errorf("pause header: %w", err)
			}
			for _, h := range hs {
				switch h.Type {
				case attrHeaderDevIndex:
					if len(h.Value) >= 4 {
						m.Ifindex = nl.NativeEndian().Uint32(h.Value)
					}
				case attrHeaderDevName:
					m.Ifname = h.String()
				}
			}
		case attrPauseAutoneg:
			m.Pause.Autoneg = len(a.Value) > 0 && a.Value[0] != 0
		case attrPauseRX:
			m.Pause.RX = len(a.Value) > 0 && a.Value[0] != 0
		case attrPauseTX:
			m.Pause.TX = len(a.Value) > 0 && a.Value[0] != 0
		}
	}
	if m.Ifname == "" {
		return PauseMessage{}, errors.New("pause message names no netdev")
	}
	return m, nil
}

// EncodePause builds a pause reply or notification as the kernel's
// ethnl_default_doit/ethnl_default_notify do (header with index and name,
// then autoneg, rx, tx): the fake kernel and the decoder tests use it.
func EncodePause(cmd uint8, ifindex uint32, ifname string, p Pause) []byte {
	b := genlmsg{cmd, Version, 0, 0}.Serialize()
	header := nl.NewRtAttr(unix.NLA_F_NESTED|attrPauseHeader, nil)
	header.AddRtAttr(attrHeaderDevIndex, nl.Uint32Attr(ifindex))
	header.AddRtAttr(attrHeaderDevName, nl.ZeroTerminated(ifname))
	b = append(b, header.Serialize()...)
	b = append(b, nl.NewRtAttr(attrPauseAutoneg, []byte{boolByte(p.Autoneg)}).Serialize()...)
	b = append(b, nl.NewRtAttr(attrPauseRX, []byte{boolByte(p.RX)}).Serialize()...)
	return append(b, nl.NewRtAttr(attrPauseTX, []byte{boolByte(p.TX)}).Serialize()...)
}

// Request is an ethtool netlink request decoded, as the kernel reads it.
type Request struct {
	Type   uint16 // the family id
	Flags  uint16
	Cmd    uint8
	Ifname string
	// The pause attributes a SET carries (nil: absent).
	Autoneg, RX, TX *bool
}

// ParseRequest decodes one serialized request (nlmsghdr included); the
// fake kernel of ethtooltest answers from it.
func ParseRequest(b []byte) (Request, error) {
	if len(b) < unix.SizeofNlMsghdr+4 {
		return Request{}, fmt.Errorf("request of %d bytes", len(b))
	}
	ne := nl.NativeEndian()
	if int(ne.Uint32(b[0:4])) != len(b) {
		return Request{}, fmt.Errorf("nlmsg_len %d, message is %d bytes", ne.Uint32(b[0:4]), len(b))
	}
	r := Request{Type: ne.Uint16(b[4:6]), Flags: ne.Uint16(b[6:8]), Cmd: b[unix.SizeofNlMsghdr]}
	if v := b[unix.SizeofNlMsghdr+1]; v != Version {
		return Request{}, fmt.Errorf("genl version %d", v)
	}
	as, err := nlattr.Parse(b[unix.SizeofNlMsghdr+4:])
	if err != nil {
		return Request{}, fmt.Errorf("request attributes: %w", err)
	}
	flag := func(v []byte) (*bool, error) {
		if len(v) != 1 {
			return nil, fmt.Errorf("u8 attribute of %d bytes", len(v))
		}
		x := v[0] != 0
		return &x, nil
	}
	for _, a := range as {
		switch a.Type {
		case attrPauseHeader:
			hs, err := nlattr.Parse(a.Value)
			if err != nil {
				return Request{}, fmt.Errorf("header: %w", err)
			}
			for _, h := range hs {
				if h.Type == attrHeaderDevName {
					r.Ifname = h.String()
				}
			}
		case attrPauseAutoneg:
			if r.Autoneg, err = flag(a.Value); err != nil {
				return Request{}, err
			}
		case attrPauseRX:
			if r.RX, err = flag(a.Value); err != nil {
				return Request{}, err
			}
		case attrPauseTX:
			if r.TX, err = flag(a.Value); err != nil {
				return Request{}, err
			}
		}
	}
	return r, nil
}

// Unsupported reports whether err says the netdev has no such setting
// (EOPNOTSUPP: veth, virtio, a driver without the operation), or the
// kernel has no ethtool netlink.
func Unsupported(err error) bool {
	return errors.Is(err, syscall.EOPNOTSUPP) || errors.Is(err, ErrNoFamily)
}
