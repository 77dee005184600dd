package qos

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/dcb"
)

// The DCB settings of a lossless profile beyond PFC and trust: what each
// holds as a typed value, how a declared value is judged against the
// kernel's, and what is written. Everything here is read-modify-write on
// the struct the driver reported, so a setting never changes another's
// fields (dcb ets/maxrate/buffer set do the same).

// BNXTDriver is the PCI driver of Broadcom NetXtreme-E adapters.
const BNXTDriver = "bnxt_en"

// Lacks is a DCB object the driver does not report: dcbnl leaves it out
// of the GET reply and skips it in a SET, so the setting does not apply
// to this netdev (not applicable, never drift).
type Lacks struct {
	Netdev, Driver string
	What           string // "ETS", "rate limits", "port buffers", "a PFC delay"
	Op             string // the driver operation it lacks: "ieee_getets"
}

func (e *Lacks) Error() string {
	d := e.Driver
	if d == "" {
		d = "its driver"
	}
	return fmt.Sprintf("%s (%s) has no %s: the driver has no %s", e.Netdev, d, e.What, e.Op)
}

// CableLengthValue is the PFC delay of a netdev in metres of cable, as mlx5
// reads it (mlnx_qos --cable_len). The rest of the PFC struct is what the
// driver reported, kept so that a write changes the delay alone.
type CableLengthValue struct {
	Netdev string
	Metres uint16
	PFC    dcb.PFC
}

func (c CableLengthValue) String() string { return strconv.Itoa(int(c.Metres)) + " m" }

// CableLengthHolds compares the delay only.
func CableLengthHolds(have, want CableLengthValue) bool { return have.Metres == want.Metres }

// CableLengthOf reads the delay out of a GET. Only mlx5 is known to read
// the delay as metres (others ignore it or count bit times): a delay is
// never written to a driver that would read it otherwise, and mlx5 reports
// it only while its port buffers are configurable.
func CableLengthOf(netdev, driver string, ie dcb.IEEE) (CableLengthValue, error) {
	if driver != MLX5Driver {
		return CableLengthValue{}, &Lacks{Netdev: netdev, Driver: driver, What: "cable length", Op: "PFC delay in metres (mlx5_core reads it so; other drivers read bit times or nothing)"}
	}
	if ie.PFC == nil {
		return CableLengthValue{}, &Lacks{Netdev: netdev, Driver: driver, What: "PFC", Op: "ieee_getpfc"}
	}
	if ie.PFC.Delay == 0 {
		return CableLengthValue{}, &Lacks{Netdev: netdev, Driver: driver, What: "cable length", Op: "configurable port buffers (mlx5 reports the PFC delay only where it sizes the lossless headroom)"}
	}
	return CableLengthValue{Netdev: netdev, Metres: ie.PFC.Delay, PFC: *ie.PFC}, nil
}

// NextPFCDelay is the PFC struct to write for cable length want: the
// current one with the delay changed and the enable mask as the driver
// holds it, so mlx5 does not toggle the link (it does on a mask change).
func NextPFCDelay(cur dcb.PFC, metres uint16) dcb.PFC {
	cur.Delay = metres
	return cur
}

// PrioTCValue is ETS's priority to traffic class map.
type PrioTCValue struct {
	Netdev string
	Map    [config.MaxPrio]uint8
}

func (p PrioTCValue) String() string { return formatBytes(p.Map[:]) }

// BandwidthValue is ETS's share and algorithm per traffic class, with the
// number of classes the port has (ets_cap, 0 when the driver does not
// say), which bounds what is compared.
type BandwidthValue struct {
	Netdev string
	BW     config.ETSBandwidth
	Cap    uint8
}

func (b BandwidthValue) String() string {
	parts := make([]string, 0, config.MaxPrio)
	for i := 0; i < classes(b.Cap); i++ {
		if b.BW.TSA[i] == config.TSAETS {
			parts = append(parts, fmt.Sprintf("%d%%", b.BW.Percent[i]))
		} else {
			parts = append(parts, string(b.BW.TSA[i]))
		}
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

func classes(cap uint8) int {
	if cap == 0 || cap > config.MaxPrio {
		return config.MaxPrio
	}
	return int(cap)
}

// ETSBandwidthHolds compares the classes the port has: the algorithm of
// each, and the share of each ets class (a strict class's share means
// nothing, and drivers report what they like there).
func ETSBandwidthHolds(have, want BandwidthValue) bool {
	for i := 0; i < classes(have.Cap); i++ {
		if have.BW.TSA[i] != want.BW.TSA[i] {
			return false
		}
		if want.BW.TSA[i] == config.TSAETS && have.BW.Percent[i] != want.BW.Percent[i] {
			return false
		}
	}
	return true
}

// ETSOf reads prio_tc and the bandwidth out of a GET.
func ETSOf(netdev, driver string, ie dcb.IEEE) (PrioTCValue, BandwidthValue, error) {
	if ie.ETS == nil {
		return PrioTCValue{}, BandwidthValue{}, &Lacks{Netdev: netdev, Driver: driver, What: "ETS", Op: "ieee_getets"}
	}
	e := ie.ETS
	bw := BandwidthValue{Netdev: netdev, Cap: e.Cap}
	for i := 0; i < config.MaxPrio; i++ {
		bw.BW.Percent[i] = e.TxBW[i]
		switch e.TSA[i] {
		case dcb.TSAETS:
			bw.BW.TSA[i] = config.TSAETS
		case dcb.TSAStrict:
			bw.BW.TSA[i] = config.TSAStrict
		default:
			bw.BW.TSA[i] = config.TSA(e.TSA[i].String())
		}
	}
	return PrioTCValue{Netdev: netdev, Map: e.PrioTC}, bw, nil
}

// CheckPrioTC refuses a map naming a traffic class the port does not
// have (before anything is written).
func CheckPrioTC(netdev string, cap uint8, want PrioTCValue) error {
	for p, tc := range want.Map {
		if int(tc) >= classes(cap) {
			return fmt.Errorf("%s has %d traffic classes (0..%d): prio_tc maps priority %d to class %d", netdev, classes(cap), classes(cap)-1, p, tc)
		}
	}
	return nil
}

// CheckBandwidth refuses shares on classes the port does not have.
func CheckBandwidth(netdev string, cap uint8, want config.ETSBandwidth) error {
	for i := classes(cap); i < config.MaxPrio; i++ {
		if want.TSA[i] == config.TSAETS && want.Percent[i] > 0 {
			return fmt.Errorf("%s has %d traffic classes (0..%d): tc_bandwidth gives class %d %d%%", netdev, classes(cap), classes(cap)-1, i, want.Percent[i])
		}
	}
	return nil
}

// NextETSPrioTC is the ETS struct to write for prio_tc: the current one
// with the map changed.
func NextETSPrioTC(cur dcb.ETS, want PrioTCValue) dcb.ETS {
	cur.PrioTC = want.Map
	return cur
}

// NextETSBandwidth is the ETS struct to write for tc_bandwidth: the
// current one with the transmit shares and algorithms changed. A rule
// declares ets or strict; a value put back when the rule goes may be any
// algorithm the driver reported (mlx5 starts with vendor), as ETSOf
// names it.
func NextETSBandwidth(cur dcb.ETS, want config.ETSBandwidth) dcb.ETS {
	for i := 0; i < config.MaxPrio; i++ {
		cur.TxBW[i] = want.Percent[i]
		cur.TSA[i] = tsaOf(want.TSA[i])
	}
	return cur
}

// tsaOf is the algorithm ETSOf named: ets, strict, or another's name
// (dcb.TSA's String); anything else is strict.
func tsaOf(name config.TSA) dcb.TSA {
	switch name {
	case config.TSAETS:
		return dcb.TSAETS
	case config.TSAStrict:
		return dcb.TSAStrict
	}
	for t := dcb.TSA(0); ; t++ {
		if t.String() == string(name) {
			return t
		}
		if t == 255 {
			return dcb.TSAStrict
		}
	}
}

// MaxrateValue is the transmit rate limit of each traffic class.
type MaxrateValue struct {
	Netdev string
	Rates  [config.MaxPrio]config.Rate
	// Driver rounds the comparison (mlx5 keeps 100 Mbit/s or 1 Gbit/s
	// units); not part of the value shown.
	Driver string
}

func (m MaxrateValue) String() string {
	s := make([]string, config.MaxPrio)
	for i, r := range m.Rates {
		s[i] = r.String()
	}
	return "[" + strings.Join(s, ", ") + "]"
}

// RoundRate is the rate a driver keeps for r (kbit/s): mlx5 counts in
// units of 100 Mbit/s up to 25.5 Gbit/s (at least one unit) and of 1 Gbit/s
// above (mlx5e_dcbnl_ieee_setmaxrate); others keep it as written.
func RoundRate(driver string, r config.Rate) config.Rate {
	const mbit100, gbit = 100_000, 1_000_000
	if driver != MLX5Driver || r == 0 {
		return r
	}
	if r <= 255*mbit100 {
		return max(r/mbit100, 1) * mbit100
	}
	return r / gbit * gbit
}

// MaxrateHolds compares after rounding the declared rates to the driver's
// granularity.
func MaxrateHolds(have, want MaxrateValue) bool {
	for i := range want.Rates {
		if have.Rates[i] != RoundRate(want.Driver, want.Rates[i]) {
			return false
		}
	}
	return true
}

// MaxrateOf reads the rate limits out of a GET.
func MaxrateOf(netdev, driver string, ie dcb.IEEE) (MaxrateValue, error) {
	if ie.Maxrate == nil {
		return MaxrateValue{}, &Lacks{Netdev: netdev, Driver: driver, What: "rate limits", Op: "ieee_getmaxrate"}
	}
	m := MaxrateValue{Netdev: netdev, Driver: driver}
	for i, k := range ie.Maxrate.Rate {
		m.Rates[i] = config.Rate(k)
	}
	return m, nil
}

// MaxrateStruct is what is written for want.
func MaxrateStruct(want MaxrateValue) dcb.Maxrate {
	var m dcb.Maxrate
	for i, r := range want.Rates {
		m.Rate[i] = uint64(r)
	}
	return m
}

// PrioBufferValue is the receive buffer of each priority.
type PrioBufferValue struct {
	Netdev string
	Map    [config.MaxPrio]uint8
}

func (p PrioBufferValue) String() string { return formatBytes(p.Map[:]) }

// BufferSizeValue is the size of each receive buffer in bytes.
type BufferSizeValue struct {
	Netdev string
	Sizes  [config.MaxPrio]uint32
}

func (b BufferSizeValue) String() string {
	s := make([]string, config.MaxPrio)
	for i, n := range b.Sizes {
		s[i] = config.Size(n)
	}
	return "[" + strings.Join(s, ", ") + "]"
}

// BuffersOf reads the buffers out of a GET.
func BuffersOf(netdev, driver string, ie dcb.IEEE) (PrioBufferValue, BufferSizeValue, error) {
	if ie.Buffer == nil {
		return PrioBufferValue{}, BufferSizeValue{}, &Lacks{Netdev: netdev, Driver: driver, What: "port buffers", Op: "dcbnl_getbuffer"}
	}
	return PrioBufferValue{Netdev: netdev, Map: ie.Buffer.PrioBuffer}, BufferSizeValue{Netdev: netdev, Sizes: ie.Buffer.Size}, nil
}

// NextBuffer is the buffer struct to write: the current one with the
// declared parts changed (a nil part is left as it is).
func NextBuffer(cur dcb.Buffer, prio *PrioBufferValue, size *BufferSizeValue) dcb.Buffer {
	if prio != nil {
		cur.PrioBuffer = prio.Map
	}
	if size != nil {
		cur.Size = size.Sizes
	}
	return cur
}

// BufferOwnershipWarning is what rdmad says before its first buffer write
// on an mlx5 netdev: the driver then owns the buffers instead of the
// firmware until it reloads, which removing the declaration cannot undo.
func BufferOwnershipWarning(netdev string) string {
	return fmt.Sprintf("writing the port buffers of %s: mlx5 takes buffer ownership from the firmware until the driver reloads; removing prio_buffer/buffer_size puts the sizes back, not the ownership", netdev)
}

// UDPPortPrioValue is the datagram-port APP entries of the ports a rule
// declares: UDP port -> priority.
type UDPPortPrioValue struct {
	Netdev string
	Map    map[uint16]uint8
	// Apps are the entries of those ports as the table holds them (what
	// undo puts back).
	Apps []dcb.App
}

func (d UDPPortPrioValue) String() string { return config.FormatUDPPortPrio(d.Map) }

// DgramPortsOf is the entries of the declared ports in the APP table.
// Another port's entries are not rdmad's and are left out.
func DgramPortsOf(netdev string, ie dcb.IEEE, ports map[uint16]uint8) UDPPortPrioValue {
	d := UDPPortPrioValue{Netdev: netdev, Map: map[uint16]uint8{}}
	for _, a := range ie.Apps {
		if _, ok := ports[a.Protocol]; ok && a.Selector == dcb.SelDgram {
			d.Map[a.Protocol] = a.Priority
			d.Apps = append(d.Apps, a)
		}
	}
	return d
}

// DgramPortsHolds: each declared port has exactly its declared entry.
func DgramPortsHolds(have, want UDPPortPrioValue) bool {
	del, add := PlanDgram(have.Apps, want.Map)
	return len(del)+len(add) == 0
}

// PlanDgram is what makes the entries of the declared ports the declared
// ones: entries of those ports with another priority (or repeated) to
// delete, and missing ones to add.
func PlanDgram(have []dcb.App, want map[uint16]uint8) (del, add []dcb.App) {
	seen := map[uint16]bool{}
	for _, a := range have {
		p, ok := want[a.Protocol]
		if a.Selector != dcb.SelDgram || !ok {
			continue
		}
		if a.Priority == p && !seen[a.Protocol] {
			seen[a.Protocol] = true
			continue
		}
		del = append(del, a)
	}
	ports := make([]int, 0, len(want))
	for port := range want {
		ports = append(ports, int(port))
	}
	sort.Ints(ports)
	for _, port := range ports {
		if !seen[uint16(port)] {
			add = append(add, dcb.DgramPort(uint16(port), want[uint16(port)]))
		}
	}
	return del, add
}

// CheckDgramDriver says where datagram-port entries cannot apply: mlx5
// takes DSCP entries only (its ieee_setapp refuses every other selector),
// and bnxt_en takes the RoCE v2 port only.
func CheckDgramDriver(netdev, driver string, want map[uint16]uint8) error {
	switch driver {
	case MLX5Driver:
		return fmt.Errorf("%s (mlx5_core) takes DSCP APP entries only: classify RoCE v2 by DSCP (trust = \"dscp\", dscp_prio) instead of udp_port_prio", netdev)
	case BNXTDriver:
		for port := range want {
			if port != dcb.RoCEv2Port {
				return fmt.Errorf("%s (bnxt_en) takes a datagram-port entry for UDP port %d (RoCE v2) only, not %d", netdev, dcb.RoCEv2Port, port)
			}
		}
	}
	return nil
}

// DCBXValue is the DCBX mode bits of a netdev.
type DCBXValue struct {
	Netdev string
	Caps   uint8
}

func (d DCBXValue) String() string { return fmt.Sprintf("%#02x (%s)", d.Caps, describeCaps(d.Caps)) }

// HostIEEE is the mode [[qos]] dcbx = "host" sets: `dcb dcbx set dev IF
// host ieee` (plain host drops the IEEE bit on mlx5 and is refused by
// bnxt_en).
const HostIEEE = dcb.CapHost | dcb.CapVerIEEE

// DCBXHolds: the host runs DCB with IEEE DCBX, no agent managing it.
func DCBXHolds(have, _ DCBXValue) bool {
	return !firmwareOwnsDCB(have.Caps) && have.Caps&dcb.CapVerIEEE != 0
}

// DCBXUndoMode is what puts a netdev's DCBX mode back to caps: mlx5
// returns to firmware control on mode 0 (mlx5e_dcbnl_setdcbx), and refuses
// a mode with the LLD-managed bit; a host mode is written as it was.
func DCBXUndoMode(caps uint8) uint8 {
	if firmwareOwnsDCB(caps) {
		return 0
	}
	return caps
}

func formatBytes(b []uint8) string {
	s := make([]string, len(b))
	for i, n := range b {
		s[i] = strconv.Itoa(int(n))
	}
	return "[" + strings.Join(s, ",") + "]"
}

// IsLacks reports whether err is a driver lacking the object: the setting
// does not apply to the netdev.
func IsLacks(err error) bool {
	var l *Lacks
	return errors.As(err, &l)
}
