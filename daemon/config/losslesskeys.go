package config

import (
	"fmt"
	"maps"
	"strconv"
	"strings"

	"github.com/rdmad/rdmad/daemon/config/value"
)

// The lossless [[qos]] keys, one entry each, in the order rdmad's drop-in
// writes them, Keys lists them and the decoder names them: the key's name
// (in the files and in SetQoSSettings' settings), the ranges of its values
// (package value's, the ones the D-Bus contract publishes), how its value
// is decoded from TOML with file:line errors, how the drop-in writes it,
// and, when not "the last rule wins", how a port's rules resolve it. Each
// entry gives the typed handle the qos part reads the value through.
//
// A new key is one entry here (and its range in package value when it has
// a new one); LosslessRule, LosslessDesired and what is done with them
// follow from the table.
var (
	QoSCableLength = newLosslessKey(losslessSpec[int]{
		KeyInfo: KeyInfo{Name: "cable_length", Values: value.CableLengthRange},
		decode: func(d *decoder, k KeyInfo, p string, x any, v *int) bool {
			return d.rangedInt(p, x, k.Values, "an integer", "the PFC delay in metres of cable; mlx5 ignores 0 and 1000 or more, so they could never hold", v)
		},
		render: func(v int, put func(string, string)) { put("cable_length", strconv.Itoa(v)) },
	})
	QoSPrioTC = newLosslessKey(losslessSpec[[MaxPrio]uint8]{
		KeyInfo: KeyInfo{Name: "prio_tc", Values: value.TrafficClassRange, Count: MaxPrio},
		decode: func(d *decoder, k KeyInfo, p string, x any, v *[MaxPrio]uint8) bool {
			return d.byteArray(p, x, k.Values, fmt.Sprintf("a traffic class %s for each of the %d priorities, such as [0,0,0,1,0,0,0,0]", k.Values, MaxPrio), v)
		},
		render: func(v [MaxPrio]uint8, put func(string, string)) { put("prio_tc", intList(v[:])) },
	})
	QoSTCBandwidth = newLosslessKey(losslessSpec[ETSBandwidth]{
		KeyInfo: KeyInfo{Name: "tc_bandwidth", Values: value.PercentRange, Count: MaxPrio},
		decode: func(d *decoder, k KeyInfo, p string, x any, v *ETSBandwidth) bool {
			return d.byteArray(p, x, k.Values, fmt.Sprintf("a percentage for each of the %d traffic classes, such as [50,50,0,0,0,0,0,0]", MaxPrio), &v.Percent)
		},
		also: []alsoKey[ETSBandwidth]{{
			KeyInfo: KeyInfo{Name: "tc_tsa", Count: MaxPrio},
			decode:  decodeTSA,
		}},
		check: checkBandwidth,
		render: func(v ETSBandwidth, put func(string, string)) {
			put("tc_bandwidth", intList(v.Percent[:]))
			put("tc_tsa", stringList(v.TSA[:]))
		},
	})
	QoSTCMaxrate = newLosslessKey(losslessSpec[[MaxPrio]Rate]{
		KeyInfo: KeyInfo{Name: "tc_maxrate", Count: MaxPrio},
		decode:  decodeMaxrate,
		render:  func(v [MaxPrio]Rate, put func(string, string)) { put("tc_maxrate", stringList(v[:])) },
	})
	QoSPrioBuffer = newLosslessKey(losslessSpec[[MaxPrio]uint8]{
		KeyInfo: KeyInfo{Name: "prio_buffer", Values: value.BufferRange, Count: MaxPrio},
		decode: func(d *decoder, k KeyInfo, p string, x any, v *[MaxPrio]uint8) bool {
			return d.byteArray(p, x, k.Values, fmt.Sprintf("a buffer %s for each of the %d priorities, such as [0,0,0,1,0,0,0,0]", k.Values, MaxPrio), v)
		},
		render: func(v [MaxPrio]uint8, put func(string, string)) { put("prio_buffer", intList(v[:])) },
	})
	QoSBufferSize = newLosslessKey(losslessSpec[[MaxPrio]uint32]{
		KeyInfo: KeyInfo{Name: "buffer_size", Values: value.BufferBytesRange, Count: MaxPrio},
		decode:  decodeBufferSize,
		render:  func(v [MaxPrio]uint32, put func(string, string)) { put("buffer_size", intList(v[:])) },
	})
	QoSUDPPortPrio = newLosslessKey(losslessSpec[map[uint16]uint8]{
		KeyInfo: KeyInfo{Name: "udp_port_prio", Keys: value.UDPPortRange, Values: value.PriorityRange},
		decode:  decodeUDPPortPrio,
		render: func(v map[uint16]uint8, put func(string, string)) {
			put("udp_port_prio", FormatUDPPortPrio(v))
		},
		// Entries of every rule, the last of a port winning.
		resolve: func(prev Declared[map[uint16]uint8], v map[uint16]uint8) map[uint16]uint8 {
			m := maps.Clone(prev.Value)
			if m == nil {
				m = map[uint16]uint8{}
			}
			maps.Copy(m, v)
			return m
		},
	})
	QoSPause = newLosslessKey(losslessSpec[bool]{
		KeyInfo: KeyInfo{Name: "pause"},
		decode: func(d *decoder, _ KeyInfo, p string, x any, v *bool) bool {
			b, ok := d.boolean(p, x)
			*v = b
			return ok
		},
		render: func(v bool, put func(string, string)) { put("pause", strconv.FormatBool(v)) },
	})
	QoSPFCStormTimeout = newLosslessKey(losslessSpec[int]{
		KeyInfo: KeyInfo{Name: "pfc_storm_timeout", Values: value.PFCStormTimeoutRange},
		decode: func(d *decoder, k KeyInfo, p string, x any, v *int) bool {
			return d.rangedInt(p, x, k.Values, "an integer number of milliseconds", "milliseconds", v)
		},
		render: func(v int, put func(string, string)) { put("pfc_storm_timeout", strconv.Itoa(v)) },
	})
	QoSECN = newLosslessKey(losslessSpec[[]uint8]{
		KeyInfo: KeyInfo{Name: "ecn", Values: value.PriorityRange},
		decode: func(d *decoder, _ KeyInfo, p string, x any, v *[]uint8) bool {
			prios, ok := d.prioList(p, x, "[] turns ECN off on every priority")
			*v = prios
			return ok
		},
		render: func(v []uint8, put func(string, string)) { put("ecn", intList(v)) },
		resolve: func(_ Declared[[]uint8], v []uint8) []uint8 {
			return append([]uint8{}, v...)
		},
	})
	QoSCNPDSCP = newLosslessKey(losslessSpec[int]{
		KeyInfo: KeyInfo{Name: "cnp_dscp", Values: value.DSCPRange},
		decode: func(d *decoder, k KeyInfo, p string, x any, v *int) bool {
			return d.rangedInt(p, x, k.Values, "an integer", "", v)
		},
		render: func(v int, put func(string, string)) { put("cnp_dscp", strconv.Itoa(v)) },
	})
	QoSCNPPriority = newLosslessKey(losslessSpec[int]{
		KeyInfo: KeyInfo{Name: "cnp_priority", Values: value.PriorityRange},
		decode: func(d *decoder, k KeyInfo, p string, x any, v *int) bool {
			return d.rangedInt(p, x, k.Values, "an integer", "", v)
		},
		render: func(v int, put func(string, string)) { put("cnp_priority", strconv.Itoa(v)) },
	})
	QoSDCBX = newLosslessKey(losslessSpec[DCBXMode]{
		KeyInfo: KeyInfo{Name: "dcbx"},
		decode: func(d *decoder, _ KeyInfo, p string, x any, v *DCBXMode) bool {
			s, ok := d.stringValue(p, x, oneOf(`a DCBX mode: rdmad sets "host" (host mode with IEEE DCBX) only`, value.DCBXModes...))
			*v = DCBXMode(s)
			return ok
		},
		render: func(v DCBXMode, put func(string, string)) { put("dcbx", tomlQuote(string(v))) },
	})
)

// losslessKeys is the table, in declaration order (newLosslessKey
// appends).
var losslessKeys []*losslessDef

// losslessDef is one entry of the table, untyped: what LosslessRule,
// LosslessDesired and the decoder do with every key alike.
type losslessDef struct {
	index int
	key   Key
	info  KeyInfo
	also  []KeyInfo
	// fields appends to out the decoders of the entry's keys of one
	// rule into r; seen records the keys given.
	fields func(d *decoder, r *LosslessRule, seen map[string]bool, out []field) []field
	// check judges the entry's value once the whole rule is read.
	check   func(d *decoder, path string, r *LosslessRule, seen map[string]bool)
	render  func(v any, put func(key, text string))
	resolve func(prev Declared[any], v any) any // nil: the last rule wins
}

// losslessSpec is one lossless key, typed by its value T.
type losslessSpec[T any] struct {
	KeyInfo // Name and the ranges; the Key is "qos." + Name
	// decode reads the key's TOML value x into v, which holds what the
	// entry's other keys of the rule put there; false when it reported
	// a problem.
	decode func(d *decoder, k KeyInfo, path string, x any, v *T) bool
	// also are further keys of the files that decode into the same value
	// (tc_tsa into tc_bandwidth's).
	also []alsoKey[T]
	// check, when set, judges the value once the rule is read; given
	// says which of the rule's keys were written.
	check func(d *decoder, path string, v *T, given func(name string) bool)
	// render writes the value as the decoder reads it back, one key and
	// its TOML text at a time.
	render func(v T, put func(key, text string))
	// resolve, when set, folds a rule's value into what the rules before
	// it declared on a port; else the last rule wins.
	resolve func(prev Declared[T], v T) T
}

type alsoKey[T any] struct {
	KeyInfo
	decode func(d *decoder, k KeyInfo, path string, x any, v *T) bool
}

// LosslessKey is the handle of one lossless [[qos]] key, typed by its
// value: the qos part reads declarations through it.
type LosslessKey[T any] struct{ def *losslessDef }

func newLosslessKey[T any](s losslessSpec[T]) LosslessKey[T] {
	def := &losslessDef{index: len(losslessKeys), key: Key("qos." + s.Name), info: s.KeyInfo}
	def.info.Key = def.key
	type key struct {
		info   KeyInfo
		decode func(*decoder, KeyInfo, string, any, *T) bool
	}
	keys := []key{{def.info, s.decode}}
	for _, a := range s.also {
		a.Key = def.key
		def.also = append(def.also, a.KeyInfo)
		keys = append(keys, key{a.KeyInfo, a.decode})
	}
	def.fields = func(d *decoder, r *LosslessRule, seen map[string]bool, out []field) []field {
		for _, k := range keys {
			out = append(out, field{k.info.Name, func(p string, x any) {
				seen[k.info.Name] = true
				v, _ := r.get(def.index).(T)
				if k.decode(d, k.info, p, x, &v) {
					r.decoded(def.index, v)
				}
			}})
		}
		return out
	}
	if s.check != nil {
		def.check = func(d *decoder, path string, r *LosslessRule, seen map[string]bool) {
			if v, ok := r.get(def.index).(T); ok {
				s.check(d, path, &v, func(name string) bool { return seen[name] })
				r.decoded(def.index, v)
			}
		}
	}
	def.render = func(v any, put func(string, string)) { s.render(v.(T), put) }
	if s.resolve != nil {
		def.resolve = func(prev Declared[any], v any) any {
			p, _ := prev.Value.(T)
			return s.resolve(Declared[T]{Value: p, Source: prev.Source, Set: prev.Set}, v.(T))
		}
	}
	losslessKeys = append(losslessKeys, def)
	return LosslessKey[T]{def}
}

// Name is the key as the files write it ("cable_length").
func (k LosslessKey[T]) Name() string { return k.def.info.Name }

// Key is the key a setting of it is declared by ("qos.cable_length").
func (k LosslessKey[T]) Key() Key { return k.def.key }

// In is the value r declares for the key, if it declares one.
func (k LosslessKey[T]) In(r LosslessRule) (T, bool) {
	v, ok := r.get(k.def.index).(T)
	return v, ok
}

// Set declares v for the key in r.
func (k LosslessKey[T]) Set(r *LosslessRule, v T) { r.put(k.def.index, v) }

// Of is the key's resolved declaration on a port.
func (k LosslessKey[T]) Of(d LosslessDesired) Declared[T] {
	x := d.get(k.def.index)
	v, _ := x.Value.(T)
	return Declared[T]{Value: v, Source: x.Source, Set: x.Set}
}

// losslessFields decodes the lossless keys of one rule into r; seen
// records which were written.
func (d *decoder) losslessFields(r *LosslessRule, seen map[string]bool, out []field) []field {
	for _, k := range losslessKeys {
		out = k.fields(d, r, seen, out)
	}
	return out
}

// checkLossless checks one rule's lossless keys once all are read.
func (d *decoder) checkLossless(path string, r *LosslessRule, seen map[string]bool) {
	for _, k := range losslessKeys {
		if k.check != nil {
			k.check(d, path, r, seen)
		}
	}
}

// intList is a TOML array of integers: "[0, 0, 0, 1]".
func intList[T uint8 | uint32](a []T) string {
	s := make([]string, len(a))
	for i, n := range a {
		s[i] = strconv.FormatUint(uint64(n), 10)
	}
	return "[" + strings.Join(s, ", ") + "]"
}

// stringList is a TOML array of strings: "[\"ets\", \"strict\"]".
func stringList[T fmt.Stringer](a []T) string {
	s := make([]string, len(a))
	for i, x := range a {
		s[i] = tomlQuote(x.String())
	}
	return "[" + strings.Join(s, ", ") + "]"
}
