package config

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Decoding the lossless [[qos]] keys, in a rule and in a call
// (DecodeQoSSettings).

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
