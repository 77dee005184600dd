// Package eventstest builds the kernel's notification messages byte for
// byte, for the tests of the event sources and of the service behind
// them. Only tests import it.
package eventstest

import (
	"encoding/binary"

	"golang.org/x/sys/unix"
)

// The dcbnl commands of a notification (include/uapi/linux/dcbnl.h).
const (
	DCBCmdIEEESet = 20 // DCB_CMD_IEEE_SET
	DCBCmdIEEEDel = 27 // DCB_CMD_IEEE_DEL
)

// DCBNotification is the message net/dcb/dcbnl.c multicasts to
// RTNLGRP_DCB after `dcb pfc set dev IF prio-pfc 3:on` (dcbnl_ieee_set ->
// dcbnl_ieee_notify(dev, RTM_SETDCB, DCB_CMD_IEEE_SET, seq, 0) ->
// dcbnl_newmsg, dcbnl_ieee_fill), built byte for byte from the uapi
// (include/uapi/linux/netlink.h, rtnetlink.h, dcbnl.h) on a
// little-endian host: struct nlmsghdr, struct dcbmsg, DCB_ATTR_IFNAME
// (nla_put_string), DCB_ATTR_IEEE (nla_nest_start_noflag) holding
// DCB_ATTR_IEEE_PFC (struct ieee_pfc: pfc_cap, pfc_en, mbc, delay,
// requests[8], indications[8]; 136 bytes) and an empty
// DCB_ATTR_IEEE_APP_TABLE, then DCB_ATTR_DCBX (u8).
func DCBNotification(ifname string, cmd uint8, seq uint32) []byte {
	le := binary.LittleEndian
	var attrs []byte
	nla := func(typ uint16, payload []byte) []byte {
		h := make([]byte, 4)
		le.PutUint16(h[0:], uint16(4+len(payload)))
		le.PutUint16(h[2:], typ)
		b := append(h, payload...)
		for len(b)%4 != 0 {
			b = append(b, 0)
		}
		return b
	}
	attrs = append(attrs, nla(1, append([]byte(ifname), 0))...) // DCB_ATTR_IFNAME
	pfc := make([]byte, 136)                                    // struct ieee_pfc
	pfc[0], pfc[1] = 8, 0x08                                    // pfc_cap 8, pfc_en: priority 3
	le.PutUint16(pfc[4:], 0)                                    // delay
	ieee := append(nla(2, pfc), nla(7, nil)...)                 // DCB_ATTR_IEEE_PFC, DCB_ATTR_IEEE_APP_TABLE
	attrs = append(attrs, nla(13, ieee)...)                     // DCB_ATTR_IEEE
	attrs = append(attrs, nla(14, []byte{0x0c})...)             // DCB_ATTR_DCBX: DCB_CAP_DCBX_HOST | DCB_CAP_DCBX_VER_IEEE
	msg := make([]byte, 16+4, 16+4+len(attrs))
	le.PutUint32(msg[0:], uint32(16+4+len(attrs))) // nlmsg_len
	le.PutUint16(msg[4:], unix.RTM_SETDCB)         // nlmsg_type 79
	le.PutUint16(msg[6:], 0)                       // nlmsg_flags
	le.PutUint32(msg[8:], seq)                     // nlmsg_seq: the request's
	le.PutUint32(msg[12:], 0)                      // nlmsg_pid: 0
	msg[16], msg[17] = unix.AF_UNSPEC, cmd         // struct dcbmsg
	return append(msg, attrs...)
}
