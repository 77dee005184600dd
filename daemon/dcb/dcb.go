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
	"errors"
	"fmt"
	"syscall"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
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

// Mask is the pfc_en mask of priorities (each 0..7).
func Mask(prios []uint8) uint8 {
	var m uint8
	for _, p := range prios {
		m |= 1 << (p & 7)
	}
	return m
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

func unmarshalPFC(b []byte) (PFC, error) {
	if len(b) < sizeofPFC {
		return PFC{}, fmt.Errorf("dcb: DCB_ATTR_IEEE_PFC is %d bytes, want %d", len(b), sizeofPFC)
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

func (a App) marshal() []byte {
	b := make([]byte, 4)
	b[0], b[1] = a.Selector, a.Priority
	nl.NativeEndian().PutUint16(b[2:], a.Protocol)
	return b
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

// Reply decoders. Each takes the payload of one reply message (after the
// nlmsghdr), as the kernel sends it.

// attrs parses the attributes after struct dcbmsg and checks its command.
func attrs(msg []byte, cmd uint8) ([]syscall.NetlinkRouteAttr, error) {
	if len(msg) < 4 {
		return nil, fmt.Errorf("dcb: reply of %d bytes has no dcbmsg", len(msg))
	}
	if msg[1] != cmd {
		return nil, fmt.Errorf("dcb: reply is for command %d, want %d", msg[1], cmd)
	}
	as, err := parseAttrs(msg[4:])
	if err != nil {
		return nil, fmt.Errorf("dcb: reply attributes: %w", err)
	}
	return as, nil
}

// ParseGet decodes a DCB_CMD_IEEE_GET reply.
func ParseGet(msg []byte) (IEEE, error) {
	as, err := attrs(msg, CmdIEEEGet)
	if err != nil {
		return IEEE{}, err
	}
	var ie IEEE
	for _, a := range as {
		switch a.Attr.Type &^ unix.NLA_F_NESTED {
		case attrDCBX:
			if len(a.Value) >= 1 {
				ie.DCBX, ie.HasDCBX = a.Value[0], true
			}
		case attrIEEE:
			nested, err := parseAttrs(a.Value)
			if err != nil {
				return IEEE{}, fmt.Errorf("dcb: DCB_ATTR_IEEE: %w", err)
			}
			for _, n := range nested {
				switch n.Attr.Type &^ unix.NLA_F_NESTED {
				case attrIEEEPFC:
					p, err := unmarshalPFC(n.Value)
					if err != nil {
						return IEEE{}, err
					}
					ie.PFC = &p
				case attrIEEEETS:
					e, err := unmarshalETS(n.Value)
					if err != nil {
						return IEEE{}, err
					}
					ie.ETS = &e
				case attrIEEEMaxrate:
					m, err := unmarshalMaxrate(n.Value)
					if err != nil {
						return IEEE{}, err
					}
					ie.Maxrate = &m
				case attrDCBBuffer:
					b, err := unmarshalBuffer(n.Value)
					if err != nil {
						return IEEE{}, err
					}
					ie.Buffer = &b
				case attrIEEEAppTable:
					apps, err := parseAttrs(n.Value)
					if err != nil {
						return IEEE{}, fmt.Errorf("dcb: DCB_ATTR_IEEE_APP_TABLE: %w", err)
					}
					for _, ap := range apps {
						if ap.Attr.Type&^unix.NLA_F_NESTED != attrIEEEApp || len(ap.Value) < 4 {
							continue
						}
						ie.Apps = append(ie.Apps, App{Selector: ap.Value[0], Priority: ap.Value[1],
							Protocol: nl.NativeEndian().Uint16(ap.Value[2:])})
					}
				}
			}
		}
	}
	return ie, nil
}

// ParseDCBX decodes a DCB_CMD_GDCBX reply: the DCBX capability bits.
func ParseDCBX(msg []byte) (uint8, error) {
	as, err := attrs(msg, CmdGDCBX)
	if err != nil {
		return 0, err
	}
	for _, a := range as {
		if a.Attr.Type == attrDCBX && len(a.Value) >= 1 {
			return a.Value[0], nil
		}
	}
	return 0, errors.New("dcb: DCB_CMD_GDCBX reply has no DCB_ATTR_DCBX")
}

// StatusError is a SET or DEL the kernel acknowledged while the driver
// refused it: the DCB_ATTR_IEEE status byte of the reply was not zero.
type StatusError struct {
	Cmd    uint8
	Status int8 // the driver's return value, a negative errno
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("driver refused the DCB setting (status %d: %v)", e.Status, e.Unwrap())
}

// DCBXRefusedError is a DCB_CMD_SDCBX the driver refused: its setdcbx
// returns 0 or 1, not an errno (mlx5 refuses a mode without the IEEE bit,
// or LLD-managed; bnxt_en one without the host bit).
type DCBXRefusedError struct {
	Mode   uint8
	Status uint8
}

func (e *DCBXRefusedError) Error() string {
	return fmt.Sprintf("driver refused DCBX mode %#02x (status %d)", e.Mode, e.Status)
}

// ParseSDCBXStatus decodes the reply to DCB_CMD_SDCBX for mode: nil when
// the driver's status is 0.
func ParseSDCBXStatus(msg []byte, mode uint8) error {
	as, err := attrs(msg, CmdSDCBX)
	if err != nil {
		return err
	}
	for _, a := range as {
		if a.Attr.Type == attrDCBX && len(a.Value) >= 1 {
			if a.Value[0] != 0 {
				return &DCBXRefusedError{Mode: mode, Status: a.Value[0]}
			}
			return nil
		}
	}
	return errors.New("dcb: DCB_CMD_SDCBX reply has no DCB_ATTR_DCBX status")
}

// Unwrap is the errno the driver returned.
func (e *StatusError) Unwrap() error {
	if e.Status < 0 {
		return syscall.Errno(-int(e.Status))
	}
	return syscall.Errno(e.Status)
}

// ParseSetStatus decodes the reply to DCB_CMD_IEEE_SET or DCB_CMD_IEEE_DEL:
// nil when the status byte is 0, a *StatusError otherwise.
func ParseSetStatus(msg []byte, cmd uint8) error {
	as, err := attrs(msg, cmd)
	if err != nil {
		return err
	}
	for _, a := range as {
		if a.Attr.Type == attrIEEE && len(a.Value) >= 1 {
			if a.Value[0] != 0 {
				return &StatusError{Cmd: cmd, Status: int8(a.Value[0])}
			}
			return nil
		}
	}
	return errors.New("dcb: reply has no DCB_ATTR_IEEE status")
}

// Reply encoders, as the kernel's dcbnl builds them: the fake kernel and
// the decoder tests use them.

func replyMsg(cmd uint8, ifname string, as ...*nl.RtAttr) []byte {
	b := []byte{unix.AF_UNSPEC, cmd, 0, 0}
	if ifname != "" {
		b = append(b, nl.NewRtAttr(attrIfname, nl.ZeroTerminated(ifname)).Serialize()...)
	}
	for _, a := range as {
		b = append(b, a.Serialize()...)
	}
	return b
}

// EncodeGetReply builds a DCB_CMD_IEEE_GET reply as dcbnl_ieee_fill does.
func EncodeGetReply(ifname string, ie IEEE) []byte {
	ieee := nl.NewRtAttr(unix.NLA_F_NESTED|attrIEEE, nil)
	if ie.ETS != nil {
		ieee.AddRtAttr(attrIEEEETS, ie.ETS.marshal())
	}
	if ie.PFC != nil {
		ieee.AddRtAttr(attrIEEEPFC, ie.PFC.marshal())
	}
	if ie.Maxrate != nil {
		ieee.AddRtAttr(attrIEEEMaxrate, ie.Maxrate.marshal())
	}
	if ie.Buffer != nil {
		ieee.AddRtAttr(attrDCBBuffer, ie.Buffer.marshal())
	}
	table := ieee.AddRtAttr(unix.NLA_F_NESTED|attrIEEEAppTable, nil)
	for _, a := range ie.Apps {
		table.AddRtAttr(attrIEEEApp, a.marshal())
	}
	as := []*nl.RtAttr{ieee}
	if ie.HasDCBX {
		as = append(as, nl.NewRtAttr(attrDCBX, []byte{ie.DCBX}))
	}
	return replyMsg(CmdIEEEGet, ifname, as...)
}

// EncodeDCBXReply builds a DCB_CMD_GDCBX reply.
func EncodeDCBXReply(caps uint8) []byte {
	return replyMsg(CmdGDCBX, "", nl.NewRtAttr(attrDCBX, []byte{caps}))
}

// EncodeSetReply builds the reply to a SET or DEL with the driver's
// return value as the status byte.
func EncodeSetReply(cmd uint8, driverErr int) []byte {
	return replyMsg(cmd, "", nl.NewRtAttr(attrIEEE, []byte{byte(int8(driverErr))}))
}

// EncodeSDCBXReply builds the reply to DCB_CMD_SDCBX with the driver's
// setdcbx return value.
func EncodeSDCBXReply(status uint8) []byte {
	return replyMsg(CmdSDCBX, "", nl.NewRtAttr(attrDCBX, []byte{status}))
}

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
		return nil, errors.New("dcb: the kernel sent no reply")
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
	return fmt.Errorf("dcb: %s %s: %w", what, ifname, err)
}

// Unsupported reports whether err says the netdev has no DCB at all
// (EOPNOTSUPP: veth, virtio, a driver without dcbnl_ops).
func Unsupported(err error) bool { return errors.Is(err, syscall.EOPNOTSUPP) }

// Request is a dcbnl request decoded: what the kernel's dcb_doit sees.
type Request struct {
	Type    uint16 // RTM_GETDCB or RTM_SETDCB
	Flags   uint16
	Cmd     uint8
	Ifname  string
	PFC     *PFC     // DCB_ATTR_IEEE_PFC of a SET
	ETS     *ETS     // DCB_ATTR_IEEE_ETS of a SET
	Maxrate *Maxrate // DCB_ATTR_IEEE_MAXRATE of a SET
	Buffer  *Buffer  // DCB_ATTR_DCB_BUFFER of a SET
	Apps    []App    // DCB_ATTR_IEEE_APP_TABLE of a SET or DEL
	// DCBX is DCB_ATTR_DCBX of a DCB_CMD_SDCBX, with HasDCBX set.
	DCBX    uint8
	HasDCBX bool
}

// ParseRequest decodes one serialized request (nlmsghdr included), as the
// kernel would read it; the fake kernel of dcbtest answers from it.
func ParseRequest(b []byte) (Request, error) {
	if len(b) < unix.SizeofNlMsghdr+4 {
		return Request{}, fmt.Errorf("dcb: request of %d bytes", len(b))
	}
	ne := nl.NativeEndian()
	if int(ne.Uint32(b[0:4])) != len(b) {
		return Request{}, fmt.Errorf("dcb: nlmsg_len %d, message is %d bytes", ne.Uint32(b[0:4]), len(b))
	}
	r := Request{Type: ne.Uint16(b[4:6]), Flags: ne.Uint16(b[6:8]), Cmd: b[unix.SizeofNlMsghdr+1]}
	as, err := parseAttrs(b[unix.SizeofNlMsghdr+4:])
	if err != nil {
		return Request{}, fmt.Errorf("dcb: request attributes: %w", err)
	}
	for _, a := range as {
		switch a.Attr.Type &^ unix.NLA_F_NESTED {
		case attrIfname:
			r.Ifname = unix.ByteSliceToString(a.Value)
		case attrDCBX:
			if len(a.Value) < 1 {
				return Request{}, errors.New("dcb: empty DCB_ATTR_DCBX")
			}
			r.DCBX, r.HasDCBX = a.Value[0], true
		case attrIEEE:
			nested, err := parseAttrs(a.Value)
			if err != nil {
				return Request{}, fmt.Errorf("dcb: DCB_ATTR_IEEE: %w", err)
			}
			for _, n := range nested {
				switch n.Attr.Type &^ unix.NLA_F_NESTED {
				case attrIEEEPFC:
					p, err := unmarshalPFC(n.Value)
					if err != nil {
						return Request{}, err
					}
					r.PFC = &p
				case attrIEEEETS:
					e, err := unmarshalETS(n.Value)
					if err != nil {
						return Request{}, err
					}
					r.ETS = &e
				case attrIEEEMaxrate:
					m, err := unmarshalMaxrate(n.Value)
					if err != nil {
						return Request{}, err
					}
					r.Maxrate = &m
				case attrDCBBuffer:
					b, err := unmarshalBuffer(n.Value)
					if err != nil {
						return Request{}, err
					}
					r.Buffer = &b
				case attrIEEEAppTable:
					apps, err := parseAttrs(n.Value)
					if err != nil {
						return Request{}, fmt.Errorf("dcb: DCB_ATTR_IEEE_APP_TABLE: %w", err)
					}
					for _, ap := range apps {
						if len(ap.Value) < 4 {
							return Request{}, errors.New("dcb: short DCB_ATTR_IEEE_APP")
						}
						r.Apps = append(r.Apps, App{Selector: ap.Value[0], Priority: ap.Value[1], Protocol: ne.Uint16(ap.Value[2:])})
					}
				}
			}
		}
	}
	return r, nil
}

// parseAttrs splits netlink attributes, refusing any that overruns b
// (nl.ParseRouteAttr panics on a short last attribute).
func parseAttrs(b []byte) ([]syscall.NetlinkRouteAttr, error) {
	var out []syscall.NetlinkRouteAttr
	ne := nl.NativeEndian()
	for len(b) >= unix.SizeofRtAttr {
		l := int(ne.Uint16(b[0:2]))
		if l < unix.SizeofRtAttr || l > len(b) {
			return nil, fmt.Errorf("attribute length %d with %d bytes left", l, len(b))
		}
		out = append(out, syscall.NetlinkRouteAttr{
			Attr:  syscall.RtAttr{Len: uint16(l), Type: ne.Uint16(b[2:4])},
			Value: b[unix.SizeofRtAttr:l],
		})
		next := (l + unix.NLA_ALIGNTO - 1) &^ (unix.NLA_ALIGNTO - 1)
		if next > len(b) {
			next = len(b)
		}
		b = b[next:]
	}
	return out, nil
}
