package bus

import (
	"testing"

	"github.com/godbus/dbus/v5"

	"github.com/rdmad/rdmad/dbusapi"
)

// Every key of the contract's table is read by SetQoSSettings in the
// D-Bus type the table gives it (what rdmactl and the web console send).
func TestEveryQoSKeyTypeIsRead(t *testing.T) {
	for _, k := range dbusapi.QoSKeys {
		lo := k.Values.Min
		if k.Values.Off {
			lo = 0
		}
		settings := map[string]dbus.Variant{}
		var v any
		switch k.Type {
		case "s":
			v = k.Choices[0]
		case "b":
			v = false
		case "u":
			v = uint32(lo)
		case "y":
			v = byte(lo)
		case "q":
			v = uint16(lo)
		case "ay":
			b := []byte{byte(lo)}
			for len(b) < k.Count {
				b = append(b, byte(lo))
			}
			v = b
		case "as":
			s := make([]string, k.Count)
			for i := range s {
				s[i] = "0"
				if len(k.Choices) > 0 {
					s[i] = k.Choices[len(k.Choices)-1]
				}
			}
			if k.Name == "tc_tsa" { // with its shares, none for strict classes
				settings["tc_bandwidth"] = dbus.MakeVariant(make([]byte, k.Count))
			}
			v = s
		case "a{qy}":
			v = map[uint16]byte{uint16(k.Keys.Min): byte(lo)}
		case "a{yy}":
			v = map[byte]byte{byte(k.Keys.Min): byte(lo)}
		default:
			t.Errorf("%s: no sample of type %s", k.Name, k.Type)
			continue
		}
		settings[k.Name] = dbus.MakeVariant(v)
		if sig := settings[k.Name].Signature().String(); sig != k.Type {
			t.Fatalf("%s: the sample is a %s, not a %s", k.Name, sig, k.Type)
		}
		if _, err := qosSettings(settings); err != nil {
			t.Errorf("%s as %s: %v", k.Name, k.Type, err)
		}
	}
}
