package dcb

import (
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// Message builders. Each returns the request exactly as it is sent; the
// golden tests serialize them.

func newRequest(typ int, cmd uint8, ifname string) *nl.NetlinkRequest {
	req := nl.NewNetlinkRequest(typ, unix.NLM_F_ACK)
	req.AddData(dcbmsg{unix.AF_UNSPEC, cmd, 0, 0})
	req.AddData(nl.NewRtAttr(attrIfname, nl.ZeroTerminated(ifname)))
	return req
}

// dcbmsg is struct dcbmsg: family, command, two bytes of padding. It goes
// in Data, ahead of the attributes (RawData would follow them).
type dcbmsg [4]byte

func (m dcbmsg) Len() int          { return len(m) }
func (m dcbmsg) Serialize() []byte { return m[:] }

// GetRequest is DCB_CMD_IEEE_GET for ifname (`dcb pfc show dev IF`).
func GetRequest(ifname string) *nl.NetlinkRequest {
	return newRequest(unix.RTM_GETDCB, CmdIEEEGet, ifname)
}

// DCBXRequest is DCB_CMD_GDCBX for ifname.
func DCBXRequest(ifname string) *nl.NetlinkRequest {
	return newRequest(unix.RTM_GETDCB, CmdGDCBX, ifname)
}

// ieeeSetRequest is DCB_CMD_IEEE_SET of one object: DCB_ATTR_IEEE nesting
// attr, as dcb's dcb_set_attribute frames every IEEE SET.
func ieeeSetRequest(ifname string, attr int, payload []byte) *nl.NetlinkRequest {
	req := newRequest(unix.RTM_SETDCB, CmdIEEESet, ifname)
	ieee := nl.NewRtAttr(unix.NLA_F_NESTED|attrIEEE, nil)
	ieee.AddRtAttr(attr, payload)
	req.AddData(ieee)
	return req
}

// PFCRequest is DCB_CMD_IEEE_SET of DCB_ATTR_IEEE_PFC (`dcb pfc set`).
func PFCRequest(ifname string, p PFC) *nl.NetlinkRequest {
	return ieeeSetRequest(ifname, attrIEEEPFC, p.marshal())
}

// ETSRequest is DCB_CMD_IEEE_SET of DCB_ATTR_IEEE_ETS (`dcb ets set`).
func ETSRequest(ifname string, e ETS) *nl.NetlinkRequest {
	return ieeeSetRequest(ifname, attrIEEEETS, e.marshal())
}

// MaxrateRequest is DCB_CMD_IEEE_SET of DCB_ATTR_IEEE_MAXRATE (`dcb
// maxrate set`).
func MaxrateRequest(ifname string, m Maxrate) *nl.NetlinkRequest {
	return ieeeSetRequest(ifname, attrIEEEMaxrate, m.marshal())
}

// BufferRequest is DCB_CMD_IEEE_SET of DCB_ATTR_DCB_BUFFER (`dcb buffer
// set`).
func BufferRequest(ifname string, b Buffer) *nl.NetlinkRequest {
	return ieeeSetRequest(ifname, attrDCBBuffer, b.marshal())
}

// DCBXSetRequest is DCB_CMD_SDCBX with the DCBX mode bits (`dcb dcbx set
// dev IF host ieee` sends CapHost|CapVerIEEE).
func DCBXSetRequest(ifname string, mode uint8) *nl.NetlinkRequest {
	req := newRequest(unix.RTM_SETDCB, CmdSDCBX, ifname)
	req.AddData(nl.NewRtAttr(attrDCBX, []byte{mode}))
	return req
}

// AppRequest is DCB_CMD_IEEE_SET (add) or DCB_CMD_IEEE_DEL (del) of APP
// entries (`dcb app add|del dev IF dscp-prio D:P ...`). rdmad sends one
// entry per message (Netlink.SetApp); dcb sends all it is given in one.
func AppRequest(ifname string, del bool, apps ...App) *nl.NetlinkRequest {
	cmd := CmdIEEESet
	if del {
		cmd = CmdIEEEDel
	}
	req := newRequest(unix.RTM_SETDCB, cmd, ifname)
	ieee := nl.NewRtAttr(unix.NLA_F_NESTED|attrIEEE, nil)
	table := ieee.AddRtAttr(unix.NLA_F_NESTED|attrIEEEAppTable, nil)
	for _, a := range apps {
		table.AddRtAttr(attrIEEEApp, a.marshal())
	}
	req.AddData(ieee)
	return req
}
