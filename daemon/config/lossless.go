package config

import (
	"bytes"
	"reflect"
	"strings"

	"github.com/rdmad/rdmad/daemon/config/value"
)

// The [[qos]] keys beyond trust, pfc and dscp_prio: the rest of a lossless
// RoCE profile (cable length, ETS, rate limits, buffers, datagram-port
// priority, global pause, the PFC storm timeout, ECN and CNP marking, the
// DCBX mode). Each is one entry of losslessKeys (losslesskeys.go): its
// name, its typed value and how it is decoded, ranged, rendered and
// resolved. A rule and a port's resolved settings hold the values by
// entry, and everything done with them (decoding, Keys, Empty, the
// drop-in's text, MergeRule, ForgetRule) walks the table, so a new key is
// one entry and nothing here.

// LosslessRule is what one [[qos]] rule declares beyond trust, pfc and
// dscp_prio: a value for each key it sets, read and set through the key's
// handle (QoSCableLength.In(r)). The zero value declares nothing.
type LosslessRule struct {
	vals []any // by entry of losslessKeys; nil: nothing set
}

func (r LosslessRule) get(i int) any {
	if i < len(r.vals) {
		return r.vals[i]
	}
	return nil
}

// put sets (v nil: clears) the value of entry i on a copy of the values,
// so rules copied by value never share what they hold.
func (r *LosslessRule) put(i int, v any) {
	vals := make([]any, len(losslessKeys))
	copy(vals, r.vals)
	vals[i] = v
	r.vals = vals
	if !r.declaresAny() {
		r.vals = nil
	}
}

// Equal reports whether r and o declare the same keys with equal values
// (go-cmp and tests compare rules through it).
func (r LosslessRule) Equal(o LosslessRule) bool {
	for _, k := range losslessKeys {
		if !reflect.DeepEqual(r.get(k.index), o.get(k.index)) {
			return false
		}
	}
	return true
}

// decoded sets the value of entry i in place: the decoder's rule is its
// own until it is returned.
func (r *LosslessRule) decoded(i int, v any) {
	if r.vals == nil {
		r.vals = make([]any, len(losslessKeys))
	}
	r.vals[i] = v
}

// declaresAny reports whether the rule sets any of these keys.
func (r LosslessRule) declaresAny() bool {
	for _, v := range r.vals {
		if v != nil {
			return true
		}
	}
	return false
}

// without returns r without the keys o sets.
func (r LosslessRule) without(o LosslessRule) LosslessRule {
	for i, v := range o.vals {
		if v != nil && r.get(i) != nil {
			r.put(i, nil)
		}
	}
	return r
}

// with returns r with the keys o sets taken from o.
func (r LosslessRule) with(o LosslessRule) LosslessRule {
	for i, v := range o.vals {
		if v != nil {
			r.put(i, v)
		}
	}
	return r
}

// shares reports whether r and o set a key in common.
func (r LosslessRule) shares(o LosslessRule) bool {
	for i, v := range o.vals {
		if v != nil && r.get(i) != nil {
			return true
		}
	}
	return false
}

// keys appends the Key of each key r sets, in table order.
func (r LosslessRule) keys(out []Key) []Key {
	for _, k := range losslessKeys {
		if r.get(k.index) != nil {
			out = append(out, k.key)
		}
	}
	return out
}

// render writes the keys r sets, as the decoder reads them back.
func (r LosslessRule) render(b *bytes.Buffer) {
	for _, k := range losslessKeys {
		if v := r.get(k.index); v != nil {
			k.render(v, func(key, text string) { b.WriteString(key + " = " + text + "\n") })
		}
	}
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

// LosslessDesired is the resolved LosslessRule of one port, read through
// the keys' handles (QoSCableLength.Of(d)).
type LosslessDesired struct {
	decl []Declared[any] // by entry of losslessKeys; nil: nothing declared
}

func (d LosslessDesired) get(i int) Declared[any] {
	if i < len(d.decl) {
		return d.decl[i]
	}
	return Declared[any]{}
}

// Equal reports whether d and o declare the same values from the same
// places.
func (d LosslessDesired) Equal(o LosslessDesired) bool {
	for _, k := range losslessKeys {
		if !reflect.DeepEqual(d.get(k.index), o.get(k.index)) {
			return false
		}
	}
	return true
}

// Empty reports whether nothing is declared.
func (d LosslessDesired) Empty() bool {
	for _, x := range d.decl {
		if x.Set {
			return false
		}
	}
	return true
}

// FirstSource is where the first declared of these settings, in table
// order, was declared.
func (d LosslessDesired) FirstSource() Position {
	for _, x := range d.decl {
		if x.Set {
			return x.Source
		}
	}
	return Position{}
}

// resolve lays rule r, declared at src, over d: each key r sets wins, or
// merges with what the rules before declared where its entry says so
// (udp_port_prio's entries).
func (d *LosslessDesired) resolve(r LosslessRule, src Position) {
	if !r.declaresAny() {
		return
	}
	if d.decl == nil {
		d.decl = make([]Declared[any], len(losslessKeys))
	}
	for _, k := range losslessKeys {
		v := r.get(k.index)
		if v == nil {
			continue
		}
		if k.resolve != nil {
			v = k.resolve(d.decl[k.index], v)
		}
		declare(&d.decl[k.index], v, src)
	}
}

// Keys lists the keys a [[qos]] rule declares (what a call that declares
// it must find holding after its pass).
func (r QoSRule) Keys() []Key {
	var out []Key
	if r.Trust != "" || r.DSCPPrio != nil {
		out = append(out, KeyQoSTrust)
	}
	if r.HasPFC {
		out = append(out, KeyQoSPFC)
	}
	return r.LosslessRule.keys(out)
}

// KeyInfo is what a [[qos]] key says of itself outside the decoder: its
// name in the files (and in SetQoSSettings' settings), its Key, and the
// ranges of its values, the same the decoder checks. The D-Bus contract's
// table of keys (dbusapi.QoSKeys) is tested against these.
type KeyInfo struct {
	Name string
	Key  Key
	// Values bounds each integer of the value: the number, each element
	// of an array, each value of a table; zero when it holds none.
	Values value.Range
	Keys   value.Range // a table's keys; zero when it is not a table
	// Count is the number of elements of an array of fixed length.
	Count int
}

// QoSKeys lists every key a [[qos]] rule takes beyond its selector and
// port: trust, pfc and dscp_prio, then the lossless keys in table order.
func QoSKeys() []KeyInfo {
	out := []KeyInfo{
		{Name: "trust", Key: KeyQoSTrust},
		{Name: "pfc", Key: KeyQoSPFC, Values: value.PriorityRange},
		{Name: "dscp_prio", Key: KeyQoSTrust, Keys: value.DSCPRange, Values: value.PriorityRange},
	}
	for _, k := range losslessKeys {
		out = append(out, k.info)
		out = append(out, k.also...)
	}
	return out
}
