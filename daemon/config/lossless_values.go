package config

import (
	"fmt"

	"github.com/rdmad/rdmad/daemon/config/value"
	"math"
	"sort"
	"strconv"
	"strings"
)

// The typed values of the lossless [[qos]] keys and their text forms.

// MaxPrio is the number of 802.1p priorities and of traffic classes.
const MaxPrio = value.PriorityCount

// TSA is a transmission selection algorithm of a traffic class.
type TSA string

const (
	TSAETS    TSA = "ets"    // a share of the bandwidth (tc_bandwidth)
	TSAStrict TSA = "strict" // strict priority, no share
)

func (t TSA) String() string { return string(t) }

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

// PrioMask is the bit mask of priorities (bit N = priority N).
func PrioMask(prios []uint8) uint8 {
	var m uint8
	for _, p := range prios {
		m |= 1 << (p & 7)
	}
	return m
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
