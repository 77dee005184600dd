// Package dcb is a small codec for DCB netlink (dcbnl: RTM_GETDCB and
// RTM_SETDCB on NETLINK_ROUTE), limited to what lossless RoCE needs from
// IEEE 802.1Qaz: Priority Flow Control (DCB_ATTR_IEEE_PFC, struct
// ieee_pfc), ETS (struct ieee_ets), the per-class rate limits (struct
// ieee_maxrate), the port buffers (struct dcbnl_buffer), APP table entries
// (DCB_ATTR_IEEE_APP_TABLE, struct dcb_app: DSCP entries give DSCP trust
// on mlx5, datagram-port entries classify RoCE v2 on bnxt_en) and the DCBX
// mode (DCB_CMD_GDCBX, which says whether the host may write at all, and
// DCB_CMD_SDCBX, sent only where the site declares host mode).
//
// The messages are byte for byte those iproute2's dcb(8) sends
// (testdata/*.hex, captured by testdata/capture.sh). Every SET carries one
// attribute, and an APP SET or DEL one entry: dcbnl applies a message's
// entries in order and stops at the first the driver refuses, leaving the
// earlier ones applied, so one entry per message is the only way to know
// which entry the refusal was about.
package dcb

import (
	"fmt"

	"github.com/vishvananda/netlink/nl"
)

// dcbnl commands (enum dcbnl_commands in linux/dcbnl.h).
const (
	CmdIEEESet uint8 = 20 // DCB_CMD_IEEE_SET
	CmdIEEEGet uint8 = 21 // DCB_CMD_IEEE_GET
	CmdGDCBX   uint8 = 22 // DCB_CMD_GDCBX
	CmdSDCBX   uint8 = 23 // DCB_CMD_SDCBX
	CmdIEEEDel uint8 = 27 // DCB_CMD_IEEE_DEL
)

// Top-level attributes (enum dcbnl_attrs).
const (
	attrIfname = 1  // DCB_ATTR_IFNAME
	attrIEEE   = 13 // DCB_ATTR_IEEE: nested in requests, the u8 status in SET replies
	attrDCBX   = 14 // DCB_ATTR_DCBX
)

// Attributes nested in DCB_ATTR_IEEE (enum ieee_attrs, ieee_attrs_app).
const (
	attrIEEEETS      = 1  // DCB_ATTR_IEEE_ETS: struct ieee_ets
	attrIEEEPFC      = 2  // DCB_ATTR_IEEE_PFC: struct ieee_pfc
	attrIEEEAppTable = 3  // DCB_ATTR_IEEE_APP_TABLE: nested DCB_ATTR_IEEE_APP
	attrIEEEMaxrate  = 7  // DCB_ATTR_IEEE_MAXRATE: struct ieee_maxrate
	attrDCBBuffer    = 10 // DCB_ATTR_DCB_BUFFER: struct dcbnl_buffer
	attrIEEEApp      = 1  // DCB_ATTR_IEEE_APP: struct dcb_app
)

// DCBX capability bits (DCB_CAP_DCBX_*).
const (
	CapHost       uint8 = 0x01 // the host (rdmad, dcb, lldpad) may set DCB
	CapLLDManaged uint8 = 0x02 // firmware or an embedded agent runs DCBX
	CapVerCEE     uint8 = 0x04
	CapVerIEEE    uint8 = 0x08
	CapStatic     uint8 = 0x10
)

// APP selectors (IEEE_8021QAZ_APP_SEL_*).
const (
	SelDgram uint8 = 3 // UDP (datagram) destination port
	SelDSCP  uint8 = 5 // DSCP of the IP header
)

// RoCEv2Port is the UDP destination port of RoCE v2 (IANA).
const RoCEv2Port = 4791

// MaxPrio is the number of 802.1p priorities (IEEE_8021QAZ_MAX_TCS).
const MaxPrio = 8

// PFC is struct ieee_pfc.
type PFC struct {
	Cap         uint8  // pfc_cap: how many priorities may have PFC on at once
	Enabled     uint8  // pfc_en: bit N = PFC on for priority N
	MBC         uint8  // mbc: MACsec bypass capability
	Delay       uint16 // delay: allowance for the cable, in bit times
	Requests    [MaxPrio]uint64
	Indications [MaxPrio]uint64
}

// sizeofPFC is sizeof(struct ieee_pfc): u8, u8, u8, pad, u16, pad to 8,
// then two arrays of 8 u64.
const sizeofPFC = 136

// Priorities lists the priorities with PFC on, ascending.
func (p PFC) Priorities() []uint8 { return Bits(p.Enabled) }

// Bits lists the bits set in a PFC mask, ascending.
func Bits(mask uint8) []uint8 {
	out := []uint8{}
	for i := uint8(0); i < MaxPrio; i++ {
		if mask&(1<<i) != 0 {
			out = append(out, i)
		}
	}
	return out
}

func (p PFC) marshal() []byte {
	b := make([]byte, sizeofPFC)
	b[0], b[1], b[2] = p.Cap, p.Enabled, p.MBC
	ne := nl.NativeEndian()
	ne.PutUint16(b[4:], p.Delay)
	for i := 0; i < MaxPrio; i++ {
		ne.PutUint64(b[8+8*i:], p.Requests[i])
		ne.PutUint64(b[72+8*i:], p.Indications[i])
	}
	return b
}

// MarshalBinary is struct ieee_pfc's bytes, as the kernel reads them.
func (p PFC) MarshalBinary() ([]byte, error) { return p.marshal(), nil }

// UnmarshalBinary reads struct ieee_pfc; fewer bytes than the struct are
// an error.
func (p *PFC) UnmarshalBinary(b []byte) error {
	v, err := unmarshalPFC(b)
	if err == nil {
		*p = v
	}
	return err
}

func unmarshalPFC(b []byte) (PFC, error) {
	if len(b) < sizeofPFC {
		return PFC{}, fmt.Errorf("DCB_ATTR_IEEE_PFC is %d bytes, want %d", len(b), sizeofPFC)
	}
	ne := nl.NativeEndian()
	p := PFC{Cap: b[0], Enabled: b[1], MBC: b[2], Delay: ne.Uint16(b[4:])}
	for i := 0; i < MaxPrio; i++ {
		p.Requests[i] = ne.Uint64(b[8+8*i:])
		p.Indications[i] = ne.Uint64(b[72+8*i:])
	}
	return p, nil
}

// App is struct dcb_app: one APP table entry.
type App struct {
	Selector uint8  // SelDSCP for DSCP entries
	Priority uint8  // 0..7
	Protocol uint16 // the DSCP value for SelDSCP
}

// DSCP is the APP entry mapping DSCP d to priority prio.
func DSCP(d, prio uint8) App { return App{Selector: SelDSCP, Priority: prio, Protocol: uint16(d)} }

// DgramPort is the APP entry mapping UDP destination port to priority
// prio (`dcb app add ... dgram-port-prio PORT:PRIO`).
func DgramPort(port uint16, prio uint8) App {
	return App{Selector: SelDgram, Priority: prio, Protocol: port}
}

func (a App) String() string {
	switch a.Selector {
	case SelDSCP:
		return fmt.Sprintf("dscp-prio %d:%d", a.Protocol, a.Priority)
	case SelDgram:
		return fmt.Sprintf("dgram-port-prio %d:%d", a.Protocol, a.Priority)
	}
	return fmt.Sprintf("selector %d protocol %d prio %d", a.Selector, a.Protocol, a.Priority)
}

// sizeofApp is sizeof(struct dcb_app): u8, u8, u16.
const sizeofApp = 4

func (a App) marshal() []byte {
	b := make([]byte, sizeofApp)
	b[0], b[1] = a.Selector, a.Priority
	nl.NativeEndian().PutUint16(b[2:], a.Protocol)
	return b
}

// MarshalBinary is struct dcb_app's bytes.
func (a App) MarshalBinary() ([]byte, error) { return a.marshal(), nil }

// UnmarshalBinary reads struct dcb_app; fewer bytes than the struct are
// an error.
func (a *App) UnmarshalBinary(b []byte) error {
	if len(b) < sizeofApp {
		return fmt.Errorf("DCB_ATTR_IEEE_APP is %d bytes, want %d", len(b), sizeofApp)
	}
	*a = App{Selector: b[0], Priority: b[1], Protocol: nl.NativeEndian().Uint16(b[2:])}
	return nil
}

// IEEE is what DCB_CMD_IEEE_GET reports for one netdev (the parts rdmad
// reads). dcbnl puts an object in the reply only when the driver has its
// get operation and it succeeds: a nil object is one the driver does not
// have (a SET of it would be skipped without an error).
type IEEE struct {
	PFC     *PFC     // nil when the driver reports no PFC
	ETS     *ETS     // nil when the driver reports no ETS
	Maxrate *Maxrate // nil when the driver has no rate limits
	Buffer  *Buffer  // nil when the driver has no port buffers
	Apps    []App    // the APP table in the order the kernel lists it
	// DCBX is DCB_ATTR_DCBX when the reply carries it (drivers with
	// getdcbx), with HasDCBX set.
	DCBX    uint8
	HasDCBX bool
}

// DSCPMap returns the DSCP entries of the APP table: DSCP -> priority.
// A DSCP listed twice keeps its last entry, as a driver applying them in
// order would.
func (ie IEEE) DSCPMap() map[uint8]uint8 {
	m := map[uint8]uint8{}
	for _, a := range ie.Apps {
		if a.Selector == SelDSCP && a.Protocol < 64 {
			m[uint8(a.Protocol)] = a.Priority
		}
	}
	return m
}

// DgramPortMap returns the datagram-port entries of the APP table: UDP
// port -> priority (the last entry of a port wins, as in DSCPMap).
func (ie IEEE) DgramPortMap() map[uint16]uint8 {
	m := map[uint16]uint8{}
	for _, a := range ie.Apps {
		if a.Selector == SelDgram {
			m[a.Protocol] = a.Priority
		}
	}
	return m
}
