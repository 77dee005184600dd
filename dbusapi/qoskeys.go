package dbusapi

import (
	"strings"

	"github.com/rdmad/rdmad/daemon/config/value"
)

// QoSKey is one key of SetQoSSettings' settings, a [[qos]] key as a client
// sends it: the table a client needs, as data. rdmactl's qos set flags and
// their help, the web console's lossless form and the settings paragraph
// of SetQoSSettings in the contract are made from QoSKeys (`go generate
// ./dbusapi` writes the last two; a test fails when they are stale), and
// the ranges are package value's, the ones rdmad's decoder checks.
type QoSKey struct {
	Name string // the key, as the files and the settings dictionary write it
	// Type is the D-Bus signature of the value clients send: "u", "y"
	// and "q" integers, "b", "s", "ay" (an array of Count bytes, or with
	// Count 0 a set of distinct ones, empty to turn it off), "as" (Count
	// strings), "a{qy}" and "a{yy}" (tables). rdmad takes any integer type
	// for an integer.
	Type string
	// Values bounds each integer of the value: the number, each byte of
	// an array, each value of a table. Keys bounds a table's keys.
	Values, Keys value.Range
	Count        int      // the elements of an array of fixed length
	Choices      []string // the strings a string (each one, for an array) may be
	// Help is rdmactl's flag help ("" when rdmactl has no flag for the
	// key: it is written in a file), Doc the contract's words for the
	// value; in both "{values}", "{keys}" and "{choices}" stand for the
	// ranges and choices, so those are written once.
	Help, Doc string
	// Form is the label of the key's field in the web console's lossless
	// form; "" when the form does not offer it.
	Form string
}

// QoSKeys are the keys SetQoSSettings takes, in the order the contract
// lists them: trust, pfc and dscp_prio (also SetQoS's), then the rest of
// a lossless profile in the order rdmad's drop-in writes them.
var QoSKeys = []QoSKey{
	{Name: "trust", Type: "s", Choices: value.TrustModes, Help: "trust mode: dscp or pcp",
		Doc: "{choices}", Form: "Trust"},
	{Name: "pfc", Type: "ay", Values: value.PriorityRange, Help: "priorities with PFC on, such as 3 or 3,4; none turns PFC off",
		Doc: "the priorities ({values}) with PFC on; empty turns PFC off", Form: "PFC priorities"},
	{Name: "dscp_prio", Type: "a{yy}", Keys: value.DSCPRange, Values: value.PriorityRange,
		Doc: "DSCP ({keys}) to priority ({values}) entries, with trust dscp"},
	{Name: "cable_length", Type: "u", Values: value.CableLengthRange, Help: "metres of cable ({values}): mlx5's lossless headroom",
		Doc: "metres of cable, {values}", Form: "Cable length (m)"},
	{Name: "prio_tc", Type: "ay", Values: value.TrafficClassRange, Count: value.PriorityCount,
		Help: "ETS: the traffic class of each of the 8 priorities, such as 0,0,0,1,0,0,0,0",
		Doc:  "the traffic class ({values}) of each of the 8 priorities"},
	{Name: "tc_bandwidth", Type: "ay", Values: value.PercentRange, Count: value.PriorityCount,
		Help: "ETS: percent per traffic class, such as 50,50,0,0,0,0,0,0",
		Doc:  "the percentage ({values}) of each of the 8 traffic classes; the ets classes add up to 100"},
	{Name: "tc_tsa", Type: "as", Choices: value.TSAs, Count: value.PriorityCount,
		Help: "ETS: ets or strict per traffic class (default: ets where the share is above 0)",
		Doc:  "{choices} for each of the 8 traffic classes, with tc_bandwidth"},
	{Name: "tc_maxrate", Type: "as", Count: value.PriorityCount,
		Help: "rate limit per traffic class, such as 0,25Gbit,0,0,0,0,0,0 (0: none)",
		Doc:  `the rate limit of each of the 8 traffic classes, such as "25Gbit"; "0" for none`},
	{Name: "prio_buffer", Type: "ay", Values: value.BufferRange, Count: value.PriorityCount,
		Help: "the receive buffer of each of the 8 priorities",
		Doc:  "the receive buffer ({values}) of each of the 8 priorities"},
	{Name: "buffer_size", Type: "as", Values: value.BufferBytesRange, Count: value.PriorityCount,
		Help: "the size of each of the 8 buffers, such as 128K,128K,0,0,0,0,0,0 (mlx5: takes buffer ownership)",
		Doc:  `the size of each of the 8 buffers, such as "128K" (K or M, base 1024); or au, in bytes ({values})`},
	{Name: "udp_port_prio", Type: "a{qy}", Keys: value.UDPPortRange, Values: value.PriorityRange,
		Help: "datagram-port APP entries, such as 4791:3 (bnxt_en; not mlx5)",
		Doc:  "UDP destination port ({keys}) to priority ({values}) entries"},
	{Name: "pause", Type: "b", Help: "global 802.3x pause: on or off",
		Doc: "global 802.3x pause on or off", Form: "Global pause"},
	{Name: "pfc_storm_timeout", Type: "u", Values: value.PFCStormTimeoutRange, Help: "PFC storm prevention in ms: {values}",
		Doc: "milliseconds, {values}", Form: "PFC storm timeout (ms)"},
	{Name: "ecn", Type: "ay", Values: value.PriorityRange, Help: "priorities with ECN on, such as 3; none turns ECN off (MLNX_OFED drivers)",
		Doc: "the priorities ({values}) with ECN on; empty turns ECN off", Form: "ECN priorities"},
	{Name: "cnp_dscp", Type: "y", Values: value.DSCPRange, Help: "the DSCP of the CNPs the port sends ({values})",
		Doc: "the DSCP ({values}) of the CNPs the port sends"},
	{Name: "cnp_priority", Type: "y", Values: value.PriorityRange, Help: "the 802.1p priority of the CNPs the port sends ({values})",
		Doc: "the 802.1p priority ({values}) of the CNPs the port sends"},
	{Name: "dcbx", Type: "s", Choices: value.DCBXModes, Help: "host: set host DCBX mode with IEEE DCBX (dcb dcbx set ... host ieee)",
		Doc: "{choices}: host mode with IEEE DCBX"},
}

// Flag is the key as an rdmactl flag: "cable-length".
func (k QoSKey) Flag() string { return strings.ReplaceAll(k.Name, "_", "-") }

// HelpText is Help with its ranges and choices written in.
func (k QoSKey) HelpText() string { return k.fill(k.Help) }

// DocText is Doc with its ranges and choices written in.
func (k QoSKey) DocText() string { return k.fill(k.Doc) }

func (k QoSKey) fill(s string) string {
	return strings.NewReplacer("{values}", k.Values.String(), "{keys}", k.Keys.String(), "{choices}", value.OneOf(k.Choices)).Replace(s)
}
