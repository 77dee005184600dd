package bus

import (
	"fmt"
	"sort"
	"strconv"

	"github.com/godbus/dbus/v5"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/service"
	"github.com/rdmad/rdmad/dbusapi"
)

// SetQoSSettings declares any [[qos]] settings, named by their keys, with
// the values a rule would have: authorized as SetQoS. The settings are
// validated by the files' own decoders before anything is touched.
func (m *manager) SetQoSSettings(msg dbus.Message, device string, port uint32, settings map[string]dbus.Variant, persist bool) *dbus.Error {
	c := service.QoSSettingsChange{Device: dbusapi.Unescape(device), Port: int(port), Persist: persist}
	ctx, e := m.admit(msg, "SetQoSSettings", call{persist: persist, check: func() error {
		if err := portArg(port); err != nil {
			return err
		}
		rule, err := qosSettings(settings)
		if err != nil {
			return err
		}
		c.Settings = rule
		return m.s.svc.CheckSetQoSSettings(c)
	}})
	if e != nil {
		return e
	}
	err := m.s.svc.SetQoSSettings(ctx, c)
	m.s.flushForReply()
	return busError(err)
}

// qosSettings turns the variants of a SetQoSSettings call into the values
// the TOML decoder gives (integers as int64, arrays as []any, tables as
// map[string]any) and validates them as a [[qos]] rule's.
func qosSettings(settings map[string]dbus.Variant) (config.QoSRule, error) {
	m := map[string]any{}
	keys := make([]string, 0, len(settings))
	for k := range settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v, ok := tomlValue(settings[k].Value())
		if !ok {
			return config.QoSRule{}, &service.ArgError{Arg: "settings", Msg: fmt.Sprintf("%s: D-Bus type %s is not a [[qos]] value (integers, booleans, strings, arrays of them, and for udp_port_prio and dscp_prio a{qy} or a{yy})",
				dbusapi.Escape(k), settings[k].Signature())}
		}
		m[k] = v
	}
	r, err := config.DecodeQoSSettings(m)
	if err != nil {
		return config.QoSRule{}, &service.ArgError{Arg: "settings", Msg: dbusapi.Escape(err.Error())}
	}
	return r, nil
}

// tomlValue is v as the TOML decoder would give it.
func tomlValue(v any) (any, bool) {
	switch x := v.(type) {
	case bool, string:
		return x, true
	case byte:
		return int64(x), true
	case int16:
		return int64(x), true
	case uint16:
		return int64(x), true
	case int32:
		return int64(x), true
	case uint32:
		return int64(x), true
	case int64:
		return x, true
	case uint64:
		if x > 1<<62 {
			return nil, false
		}
		return int64(x), true
	case []byte:
		return ints(x), true
	case []uint16:
		return ints(x), true
	case []int32:
		return ints(x), true
	case []uint32:
		return ints(x), true
	case []int64:
		return ints(x), true
	case []string:
		out := make([]any, len(x))
		for i, s := range x {
			out[i] = s
		}
		return out, true
	case map[uint16]byte:
		return table(x), true
	case map[byte]byte:
		return table(x), true
	case map[uint16]uint32:
		return table(x), true
	case map[uint32]uint32:
		return table(x), true
	}
	return nil, false
}

func ints[T byte | uint16 | int32 | uint32 | int64](xs []T) []any {
	out := make([]any, len(xs))
	for i, x := range xs {
		out[i] = int64(x)
	}
	return out
}

func table[K byte | uint16 | uint32, V byte | uint32](m map[K]V) map[string]any {
	out := map[string]any{}
	for k, v := range m {
		out[strconv.FormatUint(uint64(k), 10)] = int64(v)
	}
	return out
}
