package dcbtest

import (
	"errors"
	"fmt"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/rdmad/rdmad/daemon/dcb"
	"github.com/rdmad/rdmad/daemon/nlattr"
)

// The kernel's side of dcbnl: the attributes of linux/dcbnl.h (enum
// dcbnl_attrs, ieee_attrs, ieee_attrs_app) that the fake reads in requests
// and writes in replies, numbered as the uapi header numbers them.
const (
	attrIfname       = 1  // DCB_ATTR_IFNAME
	attrIEEE         = 13 // DCB_ATTR_IEEE: nested in requests, the u8 status in SET replies
	attrDCBX         = 14 // DCB_ATTR_DCBX
	attrIEEEETS      = 1  // DCB_ATTR_IEEE_ETS
	attrIEEEPFC      = 2  // DCB_ATTR_IEEE_PFC
	attrIEEEAppTable = 3  // DCB_ATTR_IEEE_APP_TABLE
	attrIEEEMaxrate  = 7  // DCB_ATTR_IEEE_MAXRATE
	attrDCBBuffer    = 10 // DCB_ATTR_DCB_BUFFER
	attrIEEEApp      = 1  // DCB_ATTR_IEEE_APP
)

// ReplyMsg is a reply's payload as dcbnl builds it: struct dcbmsg for cmd,
// DCB_ATTR_IFNAME when ifname is set, then the attributes.
func ReplyMsg(cmd uint8, ifname string, as ...*nl.RtAttr) []byte {
	b := []byte{unix.AF_UNSPEC, cmd, 0, 0}
	if ifname != "" {
		b = append(b, nl.NewRtAttr(attrIfname, nl.ZeroTerminated(ifname)).Serialize()...)
	}
	for _, a := range as {
		b = append(b, a.Serialize()...)
	}
	return b
}

// IEEEAttr is DCB_ATTR_IEEE nesting one attribute of type attr (a
// malformed reply in a decoder test).
func IEEEAttr(attr int, payload []byte) *nl.RtAttr {
	ieee := nl.NewRtAttr(unix.NLA_F_NESTED|attrIEEE, nil)
	ieee.AddRtAttr(attr, payload)
	return ieee
}

// bytesOf is a uapi struct's bytes (dcb's MarshalBinary never fails).
func bytesOf(m interface{ MarshalBinary() ([]byte, error) }) []byte {
	b, _ := m.MarshalBinary()
	return b
}

// EncodeGetReply builds a DCB_CMD_IEEE_GET reply as dcbnl_ieee_fill does.
func EncodeGetReply(ifname string, ie dcb.IEEE) []byte {
	ieee := nl.NewRtAttr(unix.NLA_F_NESTED|attrIEEE, nil)
	if ie.ETS != nil {
		ieee.AddRtAttr(attrIEEEETS, bytesOf(ie.ETS))
	}
	if ie.PFC != nil {
		ieee.AddRtAttr(attrIEEEPFC, bytesOf(ie.PFC))
	}
	if ie.Maxrate != nil {
		ieee.AddRtAttr(attrIEEEMaxrate, bytesOf(ie.Maxrate))
	}
	if ie.Buffer != nil {
		ieee.AddRtAttr(attrDCBBuffer, bytesOf(ie.Buffer))
	}
	table := ieee.AddRtAttr(unix.NLA_F_NESTED|attrIEEEAppTable, nil)
	for _, a := range ie.Apps {
		table.AddRtAttr(attrIEEEApp, bytesOf(a))
	}
	as := []*nl.RtAttr{ieee}
	if ie.HasDCBX {
		as = append(as, nl.NewRtAttr(attrDCBX, []byte{ie.DCBX}))
	}
	return ReplyMsg(dcb.CmdIEEEGet, ifname, as...)
}

// EncodeDCBXReply builds a DCB_CMD_GDCBX reply.
func EncodeDCBXReply(caps uint8) []byte {
	return ReplyMsg(dcb.CmdGDCBX, "", nl.NewRtAttr(attrDCBX, []byte{caps}))
}

// EncodeSetReply builds the reply to a SET or DEL with the driver's
// return value as the status byte.
func EncodeSetReply(cmd uint8, driverErr int) []byte {
	return ReplyMsg(cmd, "", nl.NewRtAttr(attrIEEE, []byte{byte(int8(driverErr))}))
}

// EncodeSDCBXReply builds the reply to DCB_CMD_SDCBX with the driver's
// setdcbx return value.
func EncodeSDCBXReply(status uint8) []byte {
	return ReplyMsg(dcb.CmdSDCBX, "", nl.NewRtAttr(attrDCBX, []byte{status}))
}

// Request is a dcbnl request decoded: what the kernel's dcb_doit sees.
type Request struct {
	Type    uint16 // RTM_GETDCB or RTM_SETDCB
	Flags   uint16
	Cmd     uint8
	Ifname  string
	PFC     *dcb.PFC     // DCB_ATTR_IEEE_PFC of a SET
	ETS     *dcb.ETS     // DCB_ATTR_IEEE_ETS of a SET
	Maxrate *dcb.Maxrate // DCB_ATTR_IEEE_MAXRATE of a SET
	Buffer  *dcb.Buffer  // DCB_ATTR_DCB_BUFFER of a SET
	Apps    []dcb.App    // DCB_ATTR_IEEE_APP_TABLE of a SET or DEL
	// DCBX is DCB_ATTR_DCBX of a DCB_CMD_SDCBX, with HasDCBX set.
	DCBX    uint8
	HasDCBX bool
}

// ParseRequest decodes one serialized request (nlmsghdr included), as the
// kernel would read it: the fake answers from it.
func ParseRequest(b []byte) (Request, error) {
	if len(b) < unix.SizeofNlMsghdr+4 {
		return Request{}, fmt.Errorf("dcbtest: request of %d bytes", len(b))
	}
	ne := nl.NativeEndian()
	if int(ne.Uint32(b[0:4])) != len(b) {
		return Request{}, fmt.Errorf("dcbtest: nlmsg_len %d, message is %d bytes", ne.Uint32(b[0:4]), len(b))
	}
	r := Request{Type: ne.Uint16(b[4:6]), Flags: ne.Uint16(b[6:8]), Cmd: b[unix.SizeofNlMsghdr+1]}
	as, err := nlattr.Parse(b[unix.SizeofNlMsghdr+4:])
	if err != nil {
		return Request{}, fmt.Errorf("dcbtest: request attributes: %w", err)
	}
	for _, a := range as {
		switch a.Type {
		case attrIfname:
			r.Ifname = unix.ByteSliceToString(a.Value)
		case attrDCBX:
			if len(a.Value) < 1 {
				return Request{}, errors.New("dcbtest: empty DCB_ATTR_DCBX")
			}
			r.DCBX, r.HasDCBX = a.Value[0], true
		case attrIEEE:
			if err := r.parseIEEE(a.Value); err != nil {
				return Request{}, err
			}
		}
	}
	return r, nil
}

// parseIEEE reads the objects nested in a request's DCB_ATTR_IEEE.
func (r *Request) parseIEEE(b []byte) error {
	nested, err := nlattr.Parse(b)
	if err != nil {
		return fmt.Errorf("dcbtest: DCB_ATTR_IEEE: %w", err)
	}
	for _, n := range nested {
		var obj interface{ UnmarshalBinary([]byte) error }
		switch n.Type {
		case attrIEEEPFC:
			r.PFC = new(dcb.PFC)
			obj = r.PFC
		case attrIEEEETS:
			r.ETS = new(dcb.ETS)
			obj = r.ETS
		case attrIEEEMaxrate:
			r.Maxrate = new(dcb.Maxrate)
			obj = r.Maxrate
		case attrDCBBuffer:
			r.Buffer = new(dcb.Buffer)
			obj = r.Buffer
		case attrIEEEAppTable:
			apps, err := nlattr.Parse(n.Value)
			if err != nil {
				return fmt.Errorf("dcbtest: DCB_ATTR_IEEE_APP_TABLE: %w", err)
			}
			for _, ap := range apps {
				var a dcb.App
				if err := a.UnmarshalBinary(ap.Value); err != nil {
					return err
				}
				r.Apps = append(r.Apps, a)
			}
			continue
		default:
			continue
		}
		if err := obj.UnmarshalBinary(n.Value); err != nil {
			return err
		}
	}
	return nil
}
