package bus

import (
	"strings"
	"testing"

	"github.com/godbus/dbus/v5"
)

// An audit line names each argument as the contract does; a string that
// is not one word of printable text is quoted, escaped; an a{sv} is
// sorted; the text is bounded.
func TestArgsText(t *testing.T) {
	for _, tc := range []struct {
		method string
		body   []any
		want   string
	}{
		{"SetRoCE", []any{"mlx5_0", uint32(1), "v2", int32(106), true}, `device=mlx5_0 port=1 mode=v2 tos=106 persist=true`},
		{"SetRoCE", []any{"a b\n\x1b[31m", uint32(0), "", int32(-1), false}, `device="a b\n\x1b[31m" port=0 mode="" tos=-1 persist=false`},
		{"SetQoS", []any{"mlx5_0", uint32(1), "dscp", []byte{3, 4}, false}, `device=mlx5_0 port=1 trust=dscp pfc=[3 4] persist=false`},
		{"SetQoSSettings", []any{"mlx5_0", uint32(0), map[string]dbus.Variant{"pfc": dbus.MakeVariant([]byte{3}), "cable_length": dbus.MakeVariant(uint32(10)), "dcbx": dbus.MakeVariant("host")}, true},
			`device=mlx5_0 port=0 settings={cable_length=10 dcbx=host pfc=[3]} persist=true`},
		{"Withdraw", []any{"qos", "mlx5_0", uint32(0), true}, `kind=qos device=mlx5_0 port=0 persist=true`},
	} {
		if got := argsText(tc.method, tc.body); got != tc.want {
			t.Errorf("%s %v:\n got %s\nwant %s", tc.method, tc.body, got, tc.want)
		}
	}
	long := argsText("SetRoCE", []any{strings.Repeat("x", 5000), uint32(1), "v2", int32(1), true})
	if len(long) != maxArgsText+3 || !strings.HasSuffix(long, "...") {
		t.Errorf("a long argument gives %d bytes", len(long))
	}
}
