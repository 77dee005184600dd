package config

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
)

// The [[qos]] keys beyond trust, pfc and dscp_prio: the rest of a lossless
// RoCE profile (cable length, ETS, rate limits, buffers, datagram-port
// priority, global pause, the PFC storm timeout, ECN and CNP marking, the
// DCBX mode), and [[roce]] traffic_class. Each is decoded into a typed value
// here, with file:line errors for bad values, and resolved per port field
// by field: the last matching rule that sets a key wins.

// MaxPrio is the number of 802.1p priorities and of traffic classes.
const MaxPrio = 8

// TSA is a transmission selection algorithm of a traffic class.
type TSA string

const (
	TSAETS    TSA = "ets"    // a share of the bandwidth (tc_bandwidth)
	TSAStrict TSA = "strict" // strict priority, no share
)

// ETSBandwidth is tc_bandwidth with its tc_tsa: the share (percent) and the
// algorithm of each traffic class, declared together.
type ETSBandwidth struct {
	Percent [MaxPrio]uint8
	TSA     [MaxPrio]TSA
}

// Rate is a transmit rate limit in kbit/s (struct ieee_maxrate's unit);
// 0 is no limit.
type Rate uint64

// String renders the rate as the config writes it: "0", or the largest
// unit that holds it exactly ("25Gbit", "1500Mbit", "7kbit").
func (r Rate) String() string {
	if r == 0 {
		return "0"
	}
	for _, u := range []struct {
		name string
		kbit uint64
	}{{"Tbit", 1e9}, {"Gbit", 1e6}, {"Mbit", 1e3}} {
		if uint64(r)%u.kbit == 0 {
			return strconv.FormatUint(uint64(r)/u.kbit, 10) + u.name
		}
	}
	return strconv.FormatUint(uint64(r), 10) + "kbit"
}

// ParseRate parses a rate as tc_maxrate writes it: "0" (no limit) or a
// number, decimals allowed, with a unit of bits per second (bit, kbit,
// mbit, gbit, tbit; case does not matter; multiples of 1000, as tc and
// dcb count). The result is in whole kbit/s, at least 1.
func ParseRate(s string) (Rate, error) {
	t := strings.TrimSpace(s)
	if t == "0" {
		return 0, nil
	}
	i := 0
	for i < len(t) && ('0' <= t[i] && t[i] <= '9' || t[i] == '.') {
		i++
	}
	num, unit := t[:i], strings.ToLower(t[i:])
	var mult float64
	switch unit {
	case "bit":
		mult = 1e-3
	case "kbit":
		mult = 1
	case "mbit":
		mult = 1e3
	case "gbit":
		mult = 1e6
	case "tbit":
		mult = 1e9
	case "bps", "kbps", "mbps", "gbps", "tbps":
		return 0, fmt.Errorf("%q: write the rate in bits (%s%sit): tc and dcb read %q as bytes per second", s, t[:i], strings.TrimSuffix(t[i:], "ps"), t[i:])
	case "":
		return 0, fmt.Errorf("%q has no unit: write \"0\" (no limit) or a rate such as \"25Gbit\" or \"500Mbit\"", s)
	default:
		return 0, fmt.Errorf("%q has an unknown unit %q: use bit, kbit, mbit, gbit or tbit", s, t[i:])
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || num == "" {
		return 0, fmt.Errorf("%q is not a rate such as \"25Gbit\"", s)
	}
	k := v * mult
	if k > math.MaxUint64/2 {
		return 0, fmt.Errorf("%q is too large", s)
	}
	if k < 1 || k != math.Trunc(k) {
		return 0, fmt.Errorf("%q is not a whole number of kbit/s (the unit of the kernel's rate limits)", s)
	}
	return Rate(k), nil
}

// Size renders a buffer size as the config writes it: bytes, or K or M
// (base 1024) when exact.
func Size(n uint32) string {
	switch {
	case n != 0 && n%(1<<20) == 0:
		return strconv.FormatUint(uint64(n>>20), 10) + "M"
	case n != 0 && n%(1<<10) == 0:
		return strconv.FormatUint(uint64(n>>10), 10) + "K"
	}
	return strconv.FormatUint(uint64(n), 10)
}

// ParseSize parses a buffer size: a number of bytes with an optional K or
// M suffix (base 1024, as dcb buffer set), below 4 GiB.
func ParseSize(s string) (uint32, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && '0' <= t[i] && t[i] <= '9' {
		i++
	}
	if i == 0 {
		return 0, fmt.Errorf("%q is not a size: write bytes, or a number with K or M, such as \"256K\"", s)
	}
	n, err := strconv.ParseUint(t[:i], 10, 32)
	if err != nil {
		return 0, fmt.Errorf("%q is too large", s)
	}
	var shift uint
	switch strings.ToUpper(strings.TrimSuffix(strings.TrimSuffix(strings.TrimSpace(t[i:]), "B"), "b")) {
	case "":
	case "K", "KI":
		shift = 10
	case "M", "MI":
		shift = 20
	default:
		return 0, fmt.Errorf("%q has an unknown unit %q: use K or M (base 1024)", s, t[i:])
	}
	if n > math.MaxUint32>>shift {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return uint32(n << shift), nil
}

// DCBXMode is who runs DCBX on the port, as [[qos]] dcbx declares it.
type DCBXMode string

// DCBXHost is host mode with IEEE DCBX (`dcb dcbx set dev IF host ieee`):
// the host, not the adapter's firmware, owns DCB.
const DCBXHost DCBXMode = "host"

// Pause timeouts of pfc_storm_timeout: off, or this range of milliseconds.
const (
	PFCStormOff = 0
	PFCStormMin = 80
	PFCStormMax = 8000
)

// LosslessRule is what one [[qos]] rule declares beyond trust, pfc and
// dscp_prio. A nil pointer (nil map) is a key the rule does not set.
type LosslessRule struct {
	CableLength     *int             // metres, 1..999: the IEEE PFC delay
	PrioTC          *[MaxPrio]uint8  // ETS: the traffic class of each priority
	TCBandwidth     *ETSBandwidth    // ETS: tc_bandwidth and its tc_tsa
	TCMaxrate       *[MaxPrio]Rate   // per traffic class
	PrioBuffer      *[MaxPrio]uint8  // the receive buffer of each priority
	BufferSize      *[MaxPrio]uint32 // bytes per buffer
	UDPPortPrio     map[uint16]uint8 // datagram (UDP destination) port -> priority
	Pause           *bool            // global 802.3x pause
	PFCStormTimeout *int             // ms: 0 or 80..8000
	ECN             *[]uint8         // priorities with ECN on, ascending; [] all off
	CNPDSCP         *int             // 0..63
	CNPPriority     *int             // 0..7
	DCBX            DCBXMode         // "": not declared
}

// declaresAny reports whether the rule sets any of these keys.
func (r LosslessRule) declaresAny() bool {
	return r.CableLength != nil || r.PrioTC != nil || r.TCBandwidth != nil || r.TCMaxrate != nil ||
		r.PrioBuffer != nil || r.BufferSize != nil || r.UDPPortPrio != nil || r.Pause != nil ||
		r.PFCStormTimeout != nil || r.ECN != nil || r.CNPDSCP != nil || r.CNPPriority != nil || r.DCBX != ""
}

// Declared is a resolved setting: its value and where it was declared.
// Set is false when no rule declares it.
type Declared[T any] struct {
	Value  T
	Source Position
	Set    bool
}

func declare[T any](d *Declared[T], v T, src Position) {
	*d = Declared[T]{Value: v, Source: src, Set: true}
}

// LosslessDesired is the resolved LosslessRule of one port.
type LosslessDesired struct {
	CableLength     Declared[int]
	PrioTC          Declared[[MaxPrio]uint8]
	TCBandwidth     Declared[ETSBandwidth]
	TCMaxrate       Declared[[MaxPrio]Rate]
	PrioBuffer      Declared[[MaxPrio]uint8]
	BufferSize      Declared[[MaxPrio]uint32]
	UDPPortPrio     Declared[map[uint16]uint8] // entries of every rule, the last of a port winning
	Pause           Declared[bool]
	PFCStormTimeout Declared[int]
	ECN             Declared[[]uint8]
	CNPDSCP         Declared[int]
	CNPPriority     Declared[int]
	DCBX            Declared[DCBXMode]
}

// Empty reports whether nothing is declared.
func (d LosslessDesired) Empty() bool {
	return !d.CableLength.Set && !d.PrioTC.Set && !d.TCBandwidth.Set && !d.TCMaxrate.Set && !d.PrioBuffer.Set &&
		!d.BufferSize.Set && !d.UDPPortPrio.Set && !d.Pause.Set && !d.PFCStormTimeout.Set && !d.ECN.Set &&
		!d.CNPDSCP.Set && !d.CNPPriority.Set && !d.DCBX.Set
}

// FirstSource is where the first declared of these settings was declared.
func (d LosslessDesired) FirstSource() Position {
	for _, s := range []struct {
		set bool
		pos Position
	}{{d.CableLength.Set, d.CableLength.Source}, {d.PrioTC.Set, d.PrioTC.Source}, {d.TCBandwidth.Set, d.TCBandwidth.Source},
		{d.TCMaxrate.Set, d.TCMaxrate.Source}, {d.PrioBuffer.Set, d.PrioBuffer.Source}, {d.BufferSize.Set, d.BufferSize.Source},
		{d.UDPPortPrio.Set, d.UDPPortPrio.Source}, {d.Pause.Set, d.Pause.Source}, {d.PFCStormTimeout.Set, d.PFCStormTimeout.Source},
		{d.ECN.Set, d.ECN.Source}, {d.CNPDSCP.Set, d.CNPDSCP.Source}, {d.CNPPriority.Set, d.CNPPriority.Source}, {d.DCBX.Set, d.DCBX.Source}} {
		if s.set {
			return s.pos
		}
	}
	return Position{}
}

// resolve lays rule r, declared at src, over d.
func (d *LosslessDesired) resolve(r LosslessRule, src Position) {
	at := func(string) Position { return src }
	if r.CableLength != nil {
		declare(&d.CableLength, *r.CableLength, at("cable_length"))
	}
	if r.PrioTC != nil {
		declare(&d.PrioTC, *r.PrioTC, at("prio_tc"))
	}
	if r.TCBandwidth != nil {
		declare(&d.TCBandwidth, *r.TCBandwidth, at("tc_bandwidth"))
	}
	if r.TCMaxrate != nil {
		declare(&d.TCMaxrate, *r.TCMaxrate, at("tc_maxrate"))
	}
	if r.PrioBuffer != nil {
		declare(&d.PrioBuffer, *r.PrioBuffer, at("prio_buffer"))
	}
	if r.BufferSize != nil {
		declare(&d.BufferSize, *r.BufferSize, at("buffer_size"))
	}
	if r.UDPPortPrio != nil {
		m := map[uint16]uint8{}
		for k, v := range d.UDPPortPrio.Value {
			m[k] = v
		}
		for k, v := range r.UDPPortPrio {
			m[k] = v
		}
		declare(&d.UDPPortPrio, m, at("udp_port_prio"))
	}
	if r.Pause != nil {
		declare(&d.Pause, *r.Pause, at("pause"))
	}
	if r.PFCStormTimeout != nil {
		declare(&d.PFCStormTimeout, *r.PFCStormTimeout, at("pfc_storm_timeout"))
	}
	if r.ECN != nil {
		declare(&d.ECN, append([]uint8{}, (*r.ECN)...), at("ecn"))
	}
	if r.CNPDSCP != nil {
		declare(&d.CNPDSCP, *r.CNPDSCP, at("cnp_dscp"))
	}
	if r.CNPPriority != nil {
		declare(&d.CNPPriority, *r.CNPPriority, at("cnp_priority"))
	}
	if r.DCBX != "" {
		declare(&d.DCBX, r.DCBX, at("dcbx"))
	}
}

// PrioMask is the bit mask of priorities (bit N = priority N).
func PrioMask(prios []uint8) uint8 {
	var m uint8
	for _, p := range prios {
		m |= 1 << (p & 7)
	}
	return m
}

// losslessFields decodes the keys into r; seen records which were written.
func (d *decoder) losslessFields(r *LosslessRule, seen map[string]bool) []field {
	key := func(name string, f func(p string, v any)) field {
		return field{name, func(p string, v any) {
			seen[name] = true
			f(p, v)
		}}
	}
	return []field{
		key("cable_length", func(p string, v any) {
			if n, ok := d.integerWhy(p, v, 1, 999, "the PFC delay in metres of cable; mlx5 ignores 0 and 1000 or more, so they could never hold"); ok {
				r.CableLength = &n
			}
		}),
		key("prio_tc", func(p string, v any) {
			if a, ok := d.byteArray8(p, v, 0, MaxPrio-1, "a traffic class 0..7 for each of the 8 priorities, such as [0,0,0,1,0,0,0,0]"); ok {
				r.PrioTC = &a
			}
		}),
		key("tc_bandwidth", func(p string, v any) {
			if a, ok := d.byteArray8(p, v, 0, 100, "a percentage for each of the 8 traffic classes, such as [50,50,0,0,0,0,0,0]"); ok {
				if r.TCBandwidth == nil {
					r.TCBandwidth = &ETSBandwidth{}
				}
				r.TCBandwidth.Percent = a
			}
		}),
		key("tc_tsa", func(p string, v any) {
			a, ok := d.stringArray8(p, v, `"ets" or "strict" for each of the 8 traffic classes`)
			if !ok {
				return
			}
			var tsa [MaxPrio]TSA
			for i, s := range a {
				switch TSA(s) {
				case TSAETS, TSAStrict:
					tsa[i] = TSA(s)
				default:
					d.failf(indexPath(p, i), "%q is not a transmission selection: use \"ets\" or \"strict\"", s)
					return
				}
			}
			if r.TCBandwidth == nil {
				r.TCBandwidth = &ETSBandwidth{}
			}
			r.TCBandwidth.TSA = tsa
		}),
		key("tc_maxrate", func(p string, v any) {
			a, ok := d.stringArray8(p, v, `a rate for each of the 8 traffic classes, such as ["0","25Gbit","0","0","0","0","0","0"] ("0": no limit)`)
			if !ok {
				return
			}
			var rates [MaxPrio]Rate
			for i, s := range a {
				rt, err := ParseRate(s)
				if err != nil {
					d.failf(indexPath(p, i), "%v", err)
					return
				}
				rates[i] = rt
			}
			r.TCMaxrate = &rates
		}),
		key("prio_buffer", func(p string, v any) {
			if a, ok := d.byteArray8(p, v, 0, MaxPrio-1, "a buffer 0..7 for each of the 8 priorities, such as [0,0,0,1,0,0,0,0]"); ok {
				r.PrioBuffer = &a
			}
		}),
		key("buffer_size", func(p string, v any) {
			items, ok := v.([]any)
			if !ok || len(items) != MaxPrio {
				d.failf(p, "must be an array of 8 buffer sizes (bytes, or a number with K or M), such as [\"128K\",\"256K\",0,0,0,0,0,0], not %s", describeArray(v))
				return
			}
			var sizes [MaxPrio]uint32
			for i, e := range items {
				switch x := e.(type) {
				case int64:
					if x < 0 || x > math.MaxUint32 {
						d.failf(indexPath(p, i), "%d is out of range 0..%d bytes", x, uint64(math.MaxUint32))
						return
					}
					sizes[i] = uint32(x)
				case string:
					n, err := ParseSize(x)
					if err != nil {
						d.failf(indexPath(p, i), "%v", err)
						return
					}
					sizes[i] = n
				default:
					d.failf(indexPath(p, i), "must be a size in bytes or a string such as \"256K\", not %s", describe(e))
					return
				}
			}
			r.BufferSize = &sizes
		}),
		key("udp_port_prio", func(p string, v any) {
			m, ok := v.(map[string]any)
			if !ok {
				d.failf(p, "must be a table of UDP port = priority such as { 4791 = 3 }, not %s", describe(v))
				return
			}
			out := map[uint16]uint8{}
			for k, e := range m {
				kp := joinPath(p, k)
				port, err := strconv.ParseUint(k, 10, 16)
				if err != nil || port == 0 {
					d.failf(kp, "%q is not a UDP port: use 1..65535 (RoCE v2 is 4791)", k)
					continue
				}
				if n, ok := d.integer(kp, e, 0, MaxPrio-1); ok {
					out[uint16(port)] = uint8(n)
				}
			}
			r.UDPPortPrio = out
		}),
		key("pause", func(p string, v any) {
			if b, ok := d.boolean(p, v); ok {
				r.Pause = &b
			}
		}),
		key("pfc_storm_timeout", func(p string, v any) {
			n, ok := v.(int64)
			if !ok {
				d.failf(p, "must be an integer number of milliseconds, not %s", describe(v))
				return
			}
			if n != PFCStormOff && (n < PFCStormMin || n > PFCStormMax) {
				d.failf(p, "%d is out of range: 0 (off) or %d..%d milliseconds", n, PFCStormMin, PFCStormMax)
				return
			}
			ms := int(n)
			r.PFCStormTimeout = &ms
		}),
		key("ecn", func(p string, v any) {
			if prios, ok := d.prioList(p, v, "[] turns ECN off on every priority"); ok {
				r.ECN = &prios
			}
		}),
		key("cnp_dscp", func(p string, v any) {
			if n, ok := d.integer(p, v, 0, 63); ok {
				r.CNPDSCP = &n
			}
		}),
		key("cnp_priority", func(p string, v any) {
			if n, ok := d.integer(p, v, 0, MaxPrio-1); ok {
				r.CNPPriority = &n
			}
		}),
		key("dcbx", func(p string, v any) {
			if s, ok := d.stringValue(p, v, oneOf(`a DCBX mode: rdmad sets "host" (host mode with IEEE DCBX) only`, string(DCBXHost))); ok {
				r.DCBX = DCBXMode(s)
			}
		}),
	}
}

// checkLossless checks one rule's keys against each other.
func (d *decoder) checkLossless(path string, r *LosslessRule, seen map[string]bool) {
	if bw := r.TCBandwidth; bw != nil {
		if !seen["tc_bandwidth"] {
			d.failf(joinPath(path, "tc_tsa"), "needs tc_bandwidth in the same rule (the share of each ets class)")
			return
		}
		hasTSA := seen["tc_tsa"]
		sum := 0
		for i := range bw.Percent {
			if !hasTSA {
				bw.TSA[i] = TSAStrict
				if bw.Percent[i] > 0 {
					bw.TSA[i] = TSAETS
				}
			}
			switch {
			case bw.TSA[i] == TSAETS:
				sum += int(bw.Percent[i])
			case bw.Percent[i] > 0:
				d.failf(joinPath(path, "tc_bandwidth"), "traffic class %d is strict and has %d%%: a strict class takes no share (write 0, or make it \"ets\")", i, bw.Percent[i])
				return
			}
		}
		if sum != 100 && slicesContain(bw.TSA[:], TSAETS) {
			d.failf(joinPath(path, "tc_bandwidth"), "the ets classes add up to %d%%, not 100%%", sum)
		}
	}
}

func slicesContain[T comparable](s []T, v T) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// integerWhy is integer with a reason appended to the range error.
func (d *decoder) integerWhy(p string, v any, lo, hi int64, why string) (int, bool) {
	n, ok := v.(int64)
	if !ok {
		d.failf(p, "must be an integer, not %s", describe(v))
		return 0, false
	}
	if n < lo || n > hi {
		d.failf(p, "%d is out of range %d..%d: %s", n, lo, hi, why)
		return 0, false
	}
	return int(n), true
}

func describeArray(v any) string {
	if a, ok := v.([]any); ok {
		return fmt.Sprintf("an array of %d", len(a))
	}
	return describe(v)
}

// byteArray8 decodes an array of exactly 8 integers in lo..hi.
func (d *decoder) byteArray8(p string, v any, lo, hi int64, what string) ([MaxPrio]uint8, bool) {
	var out [MaxPrio]uint8
	a, ok := v.([]any)
	if !ok || len(a) != MaxPrio {
		d.failf(p, "must be %s, not %s", what, describeArray(v))
		return out, false
	}
	for i, e := range a {
		n, ok := d.integer(indexPath(p, i), e, lo, hi)
		if !ok {
			return out, false
		}
		out[i] = uint8(n)
	}
	return out, true
}

// stringArray8 decodes an array of exactly 8 strings.
func (d *decoder) stringArray8(p string, v any, what string) ([MaxPrio]string, bool) {
	var out [MaxPrio]string
	a, ok := v.([]any)
	if !ok || len(a) != MaxPrio {
		d.failf(p, "must be %s, not %s", what, describeArray(v))
		return out, false
	}
	for i, e := range a {
		s, ok := d.str(indexPath(p, i), e)
		if !ok {
			return out, false
		}
		out[i] = s
	}
	return out, true
}

// FormatUDPPortPrio renders udp_port_prio as the config writes it.
func FormatUDPPortPrio(m map[uint16]uint8) string {
	ports := make([]int, 0, len(m))
	for p := range m {
		ports = append(ports, int(p))
	}
	sort.Ints(ports)
	parts := make([]string, len(ports))
	for i, p := range ports {
		parts[i] = fmt.Sprintf("%d = %d", p, m[uint16(p)])
	}
	return "{ " + strings.Join(parts, ", ") + " }"
}

// losslessSet says, field by field, which keys of r are set.
func losslessSet(r LosslessRule) []bool {
	v := reflect.ValueOf(r)
	out := make([]bool, v.NumField())
	for i := range out {
		out[i] = !v.Field(i).IsZero()
	}
	return out
}

// without returns o without the keys r sets.
func (o LosslessRule) without(r LosslessRule) LosslessRule {
	ov := reflect.ValueOf(&o).Elem()
	for i, set := range losslessSet(r) {
		if set {
			ov.Field(i).SetZero()
		}
	}
	return o
}

// with returns o with the keys r sets taken from r.
func (o LosslessRule) with(r LosslessRule) LosslessRule {
	ov, rv := reflect.ValueOf(&o).Elem(), reflect.ValueOf(r)
	for i, set := range losslessSet(r) {
		if set {
			ov.Field(i).Set(rv.Field(i))
		}
	}
	return o
}

// shares reports whether o and r set a key in common.
func (o LosslessRule) shares(r LosslessRule) bool {
	os := losslessSet(o)
	for i, set := range losslessSet(r) {
		if set && os[i] {
			return true
		}
	}
	return false
}

// render writes the keys r sets, as the decoder reads them back.
func (r LosslessRule) render(b *bytes.Buffer) {
	ints := func(key string, a []uint8) {
		s := make([]string, len(a))
		for i, n := range a {
			s[i] = strconv.Itoa(int(n))
		}
		fmt.Fprintf(b, "%s = [%s]\n", key, strings.Join(s, ", "))
	}
	strs := func(key string, a []string) {
		s := make([]string, len(a))
		for i, x := range a {
			s[i] = tomlQuote(x)
		}
		fmt.Fprintf(b, "%s = [%s]\n", key, strings.Join(s, ", "))
	}
	if r.CableLength != nil {
		fmt.Fprintf(b, "cable_length = %d\n", *r.CableLength)
	}
	if r.PrioTC != nil {
		ints("prio_tc", r.PrioTC[:])
	}
	if bw := r.TCBandwidth; bw != nil {
		ints("tc_bandwidth", bw.Percent[:])
		tsa := make([]string, MaxPrio)
		for i, t := range bw.TSA {
			tsa[i] = string(t)
		}
		strs("tc_tsa", tsa)
	}
	if r.TCMaxrate != nil {
		rates := make([]string, MaxPrio)
		for i, rt := range r.TCMaxrate {
			rates[i] = rt.String()
		}
		strs("tc_maxrate", rates)
	}
	if r.PrioBuffer != nil {
		ints("prio_buffer", r.PrioBuffer[:])
	}
	if r.BufferSize != nil {
		s := make([]string, MaxPrio)
		for i, n := range r.BufferSize {
			s[i] = strconv.FormatUint(uint64(n), 10)
		}
		fmt.Fprintf(b, "buffer_size = [%s]\n", strings.Join(s, ", "))
	}
	if r.UDPPortPrio != nil {
		fmt.Fprintf(b, "udp_port_prio = %s\n", FormatUDPPortPrio(r.UDPPortPrio))
	}
	if r.Pause != nil {
		fmt.Fprintf(b, "pause = %t\n", *r.Pause)
	}
	if r.PFCStormTimeout != nil {
		fmt.Fprintf(b, "pfc_storm_timeout = %d\n", *r.PFCStormTimeout)
	}
	if r.ECN != nil {
		ints("ecn", *r.ECN)
	}
	if r.CNPDSCP != nil {
		fmt.Fprintf(b, "cnp_dscp = %d\n", *r.CNPDSCP)
	}
	if r.CNPPriority != nil {
		fmt.Fprintf(b, "cnp_priority = %d\n", *r.CNPPriority)
	}
	if r.DCBX != "" {
		writeKey(b, "dcbx", string(r.DCBX))
	}
}

// SetQoSSettings persists the lossless settings r declares for one device
// (port 0: every port), as SetQoS does for trust and PFC.
func (p *Persisted) SetQoSSettings(sel Selector, port int, r LosslessRule) {
	if !r.declaresAny() {
		return
	}
	p.QoS = MergeRule(p.QoS, QoSRule{Selector: sel, Port: port, LosslessRule: r})
}

// DecodeQoSSettings validates the settings of a mutating call (rdmactl
// qos set, SetQoSSettings) exactly as the same keys of a [[qos]] rule: m
// holds the keys as the files write them, with values of the types the
// TOML decoder gives (int64, bool, string, []any, map[string]any). It
// returns the rule they declare, without a selector or port, or an error
// naming each bad key ("cable_length: 0 is out of range 1..999: ...").
func DecodeQoSSettings(m map[string]any) (QoSRule, error) {
	d := &decoder{}
	var r QoSRule
	seen := map[string]bool{}
	d.table("", m, "the settings", d.qosFields(&r, seen))
	if len(d.errs) == 0 {
		d.checkQoS("", &r, seen)
	}
	if len(d.errs) == 0 {
		return r, nil
	}
	msgs := make([]string, len(d.errs))
	for i, e := range d.errs {
		ce := e.(*Error)
		msgs[i] = ce.Msg
		if ce.Key != "" {
			msgs[i] = ce.Key + ": " + ce.Msg
		}
	}
	return QoSRule{}, errors.New(strings.Join(msgs, "; "))
}

// Keys lists the keys a [[qos]] rule declares (what a call that declares
// it must find holding after its pass).
func (r QoSRule) Keys() []Key {
	var out []Key
	add := func(set bool, k Key) {
		if set {
			out = append(out, k)
		}
	}
	add(r.Trust != "" || r.DSCPPrio != nil, KeyQoSTrust)
	add(r.HasPFC, KeyQoSPFC)
	l := r.LosslessRule
	add(l.CableLength != nil, KeyQoSCableLength)
	add(l.PrioTC != nil, KeyQoSPrioTC)
	add(l.TCBandwidth != nil, KeyQoSTCBandwidth)
	add(l.TCMaxrate != nil, KeyQoSTCMaxrate)
	add(l.PrioBuffer != nil, KeyQoSPrioBuffer)
	add(l.BufferSize != nil, KeyQoSBufferSize)
	add(l.UDPPortPrio != nil, KeyQoSUDPPortPrio)
	add(l.Pause != nil, KeyQoSPause)
	add(l.PFCStormTimeout != nil, KeyQoSPFCStormTimeout)
	add(l.ECN != nil, KeyQoSECN)
	add(l.CNPDSCP != nil, KeyQoSCNPDSCP)
	add(l.CNPPriority != nil, KeyQoSCNPPriority)
	add(l.DCBX != "", KeyQoSDCBX)
	return out
}

// Values is each key the rule sets and its value as the files write it
// ("cable_length": "10", "tc_maxrate": "[\"0\", \"25Gbit\", ...]").
func (r LosslessRule) Values() map[string]string {
	var b bytes.Buffer
	r.render(&b)
	out := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		if k, v, ok := strings.Cut(line, " = "); ok {
			out[k] = v
		}
	}
	return out
}
