package value

import (
	"fmt"
	"math"
	"strconv"
)

// Range is the integers a value takes, Min..Max; with Off, 0 is valid too
// and turns the setting off. It is data as well as a rule: the decoder,
// the service's argument checks, rdmactl's flags and the parts' writers
// call Check, and the D-Bus contract, rdmactl's help and the web console
// print String, so a key's range is written once, here.
type Range struct {
	Min, Max int64
	Off      bool
}

// PriorityCount is the number of 802.1p priorities, and of the traffic
// classes and receive buffers of a port: the length of the arrays that
// give one value each.
const PriorityCount = MaxPriority + 1

// The ranges of the values a policy takes. A new key with a range of its
// own adds it here.
var (
	TOSRange      = Range{Min: 0, Max: MaxTOS}
	PriorityRange = Range{Min: 0, Max: MaxPriority}
	DSCPRange     = Range{Min: 0, Max: MaxDSCP}
	// TrafficClassRange is the ETS traffic class of a priority (prio_tc).
	TrafficClassRange = Range{Min: 0, Max: MaxPriority}
	// BufferRange is the receive buffer of a priority (prio_buffer).
	BufferRange = Range{Min: 0, Max: MaxPriority}
	// PercentRange is an ETS share of the bandwidth (tc_bandwidth).
	PercentRange = Range{Min: 0, Max: 100}
	// CableLengthRange is the IEEE PFC delay in metres of cable: mlx5
	// ignores 0 and 1000 or more, so they could never hold.
	CableLengthRange = Range{Min: 1, Max: 999}
	// PFCStormTimeoutRange is ethtool's pfc-prevention-tout in
	// milliseconds, as mlx5 takes it.
	PFCStormTimeoutRange = Range{Min: 80, Max: 8000, Off: true}
	// UDPPortRange is a datagram (UDP destination) port of the APP table.
	UDPPortRange = Range{Min: 1, Max: math.MaxUint16}
	// BufferBytesRange is the size of a port's receive buffer in bytes
	// (struct dcbnl_buffer's u32).
	BufferBytesRange = Range{Min: 0, Max: math.MaxUint32}
)

// IsZero reports whether r bounds nothing (a value that is not an integer).
func (r Range) IsZero() bool { return r == Range{} }

// Contains reports whether n is in r.
func (r Range) Contains(n int64) bool { return n >= r.Min && n <= r.Max || r.Off && n == 0 }

// String is r as messages and documents write it: "1..999", or
// "0 (off) or 80..8000".
func (r Range) String() string {
	s := strconv.FormatInt(r.Min, 10) + ".." + strconv.FormatInt(r.Max, 10)
	if r.Off {
		return "0 (off) or " + s
	}
	return s
}

// Words is r as prose writes it ("1 to 999", "0 (off) or 80 to 8000"),
// the form of the manual pages.
func (r Range) Words() string {
	s := strconv.FormatInt(r.Min, 10) + " to " + strconv.FormatInt(r.Max, 10)
	if r.Off {
		return "0 (off) or " + s
	}
	return s
}

// Check accepts a value in r: "1000 is out of range 1..999", or
// "50 is out of range: 0 (off) or 80..8000".
func (r Range) Check(n int64) error {
	switch {
	case r.Contains(n):
		return nil
	case r.Off:
		return fmt.Errorf("%d is out of range: %s", n, r)
	}
	return fmt.Errorf("%d is out of range %s", n, r)
}

// Trust modes and DCBX modes a [[qos]] rule takes, in the order messages
// list them.
var (
	TrustModes = []string{"dscp", "pcp"}
	DCBXModes  = []string{"host"}
	// TSAs are the transmission selections of an ETS traffic class.
	TSAs = []string{"ets", "strict"}
)
