package config

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/rdmad/rdmad/daemon/config/value"
)

// Decoding the lossless [[qos]] keys (the table's decoders share these), in
// a rule and in a call (DecodeQoSSettings).

// rangedInt decodes an integer in r into v; what says what the key takes
// when it is not an integer, why is appended to a range error
// ("milliseconds", or the reason for the range).
func (d *decoder) rangedInt(p string, x any, r value.Range, what, why string, v *int) bool {
	n, ok := x.(int64)
	if !ok {
		d.failf(p, "must be %s, not %s", what, describe(x))
		return false
	}
	if err := r.Check(n); err != nil {
		switch {
		case why == "":
			d.failf(p, "%v", err)
		case r.Off:
			d.failf(p, "%v %s", err, why)
		default:
			d.failf(p, "%v: %s", err, why)
		}
		return false
	}
	*v = int(n)
	return true
}

// ranged decodes one integer in r.
func (d *decoder) ranged(p string, x any, r value.Range) (int64, bool) {
	n, ok := x.(int64)
	if !ok {
		d.failf(p, "must be an integer, not %s", describe(x))
		return 0, false
	}
	if err := r.Check(n); err != nil {
		d.failf(p, "%v", err)
		return 0, false
	}
	return n, true
}

func describeArray(v any) string {
	if a, ok := v.([]any); ok {
		return fmt.Sprintf("an array of %d", len(a))
	}
	return describe(v)
}

// byteArray decodes an array of exactly MaxPrio integers in r into v.
func (d *decoder) byteArray(p string, x any, r value.Range, what string, v *[MaxPrio]uint8) bool {
	a, ok := x.([]any)
	if !ok || len(a) != MaxPrio {
		d.failf(p, "must be %s, not %s", what, describeArray(x))
		return false
	}
	var out [MaxPrio]uint8
	for i, e := range a {
		n, ok := d.ranged(indexPath(p, i), e, r)
		if !ok {
			return false
		}
		out[i] = uint8(n)
	}
	*v = out
	return true
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

// decodeTSA decodes tc_tsa into the TSA of tc_bandwidth's value.
func decodeTSA(d *decoder, _ KeyInfo, p string, x any, v *ETSBandwidth) bool {
	choices := value.OneOf(value.TSAs)
	a, ok := d.stringArray8(p, x, fmt.Sprintf("%s for each of the %d traffic classes", choices, MaxPrio))
	if !ok {
		return false
	}
	var tsa [MaxPrio]TSA
	for i, s := range a {
		if !slices.Contains(value.TSAs, s) {
			d.failf(indexPath(p, i), "%q is not a transmission selection: use %s", s, choices)
			return false
		}
		tsa[i] = TSA(s)
	}
	v.TSA = tsa
	return true
}

// checkBandwidth checks tc_bandwidth and tc_tsa against each other:
// tc_tsa only with tc_bandwidth, by default ets where the share is above
// 0, strict classes without a share, and the ets classes adding up to 100.
func checkBandwidth(d *decoder, path string, bw *ETSBandwidth, given func(string) bool) {
	if !given("tc_bandwidth") {
		d.failf(joinPath(path, "tc_tsa"), "needs tc_bandwidth in the same rule (the share of each ets class)")
		return
	}
	hasTSA := given("tc_tsa")
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
	if sum != 100 && slices.Contains(bw.TSA[:], TSAETS) {
		d.failf(joinPath(path, "tc_bandwidth"), "the ets classes add up to %d%%, not 100%%", sum)
	}
}

// decodeMaxrate decodes tc_maxrate: 8 rates as strings.
func decodeMaxrate(d *decoder, _ KeyInfo, p string, x any, v *[MaxPrio]Rate) bool {
	a, ok := d.stringArray8(p, x, fmt.Sprintf(`a rate for each of the %d traffic classes, such as ["0","25Gbit","0","0","0","0","0","0"] ("0": no limit)`, MaxPrio))
	if !ok {
		return false
	}
	var rates [MaxPrio]Rate
	for i, s := range a {
		rt, err := ParseRate(s)
		if err != nil {
			d.failf(indexPath(p, i), "%v", err)
			return false
		}
		rates[i] = rt
	}
	*v = rates
	return true
}

// decodeBufferSize decodes buffer_size: 8 sizes, each bytes or a string
// with K or M.
func decodeBufferSize(d *decoder, k KeyInfo, p string, x any, v *[MaxPrio]uint32) bool {
	items, ok := x.([]any)
	if !ok || len(items) != MaxPrio {
		d.failf(p, "must be an array of %d buffer sizes (bytes, or a number with K or M), such as [\"128K\",\"256K\",0,0,0,0,0,0], not %s", MaxPrio, describeArray(x))
		return false
	}
	var sizes [MaxPrio]uint32
	for i, e := range items {
		switch n := e.(type) {
		case int64:
			if err := k.Values.Check(n); err != nil {
				d.failf(indexPath(p, i), "%v bytes", err)
				return false
			}
			sizes[i] = uint32(n)
		case string:
			size, err := ParseSize(n)
			if err != nil {
				d.failf(indexPath(p, i), "%v", err)
				return false
			}
			sizes[i] = size
		default:
			d.failf(indexPath(p, i), "must be a size in bytes or a string such as \"256K\", not %s", describe(e))
			return false
		}
	}
	*v = sizes
	return true
}

// decodeUDPPortPrio decodes udp_port_prio: a table of UDP port = priority.
func decodeUDPPortPrio(d *decoder, k KeyInfo, p string, x any, v *map[uint16]uint8) bool {
	m, ok := x.(map[string]any)
	if !ok {
		d.failf(p, "must be a table of UDP port = priority such as { 4791 = 3 }, not %s", describe(x))
		return false
	}
	out := map[uint16]uint8{}
	for key, e := range m {
		kp := joinPath(p, key)
		port, err := strconv.ParseUint(key, 10, 16)
		if err != nil || !k.Keys.Contains(int64(port)) {
			d.failf(kp, "%q is not a UDP port: use %s (RoCE v2 is 4791)", key, k.Keys)
			continue
		}
		if n, ok := d.ranged(kp, e, k.Values); ok {
			out[uint16(port)] = uint8(n)
		}
	}
	*v = out
	return true
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
