package config

import (
	"bytes"
	"reflect"
	"strings"
)

// The [[qos]] keys beyond trust, pfc and dscp_prio: the rest of a lossless
// RoCE profile (cable length, ETS, rate limits, buffers, datagram-port
// priority, global pause, the PFC storm timeout, ECN and CNP marking, the
// DCBX mode), and [[roce]] traffic_class. Each is decoded into a typed value
// (lossless_values.go) with file:line errors for bad values
// (lossless_decode.go), and resolved per port field by field here: the last
// matching rule that sets a key wins.

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
