package value

import (
	"strings"
	"testing"
)

// Each rule at its bounds: the inclusive ends valid, one past them not,
// with what the refusal says.
func TestValueBounds(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want string // "" valid, else a substring of the error
	}{
		{"tos 0", TOS(0), ""},
		{"tos 255", TOS(255), ""},
		{"tos -1", TOS(-1), "-1 is out of range 0..255"},
		{"tos 256", TOS(256), "256 is out of range 0..255"},
		{"priority 0", Priority(0), ""},
		{"priority 7", Priority(7), ""},
		{"priority -1", Priority(-1), "priority -1 is out of range 0..7"},
		{"priority 8", Priority(8), "priority 8 is out of range 0..7"},
		{"priorities none", Priorities(nil), ""},
		{"priorities all", Priorities([]int{7, 6, 5, 4, 3, 2, 1, 0}), ""},
		{"priorities 8", Priorities([]int{3, 8}), "priority 8 is out of range 0..7"},
		{"priorities twice", Priorities([]int{3, 4, 3}), "priority 3 is listed twice"},
		{"dscp 0", DSCP(0), ""},
		{"dscp 63", DSCP(63), ""},
		{"dscp 64", DSCP(64), "DSCP 64 is out of range 0..63"},
		{"dscp -1", DSCP(-1), "DSCP -1 is out of range 0..63"},
		{"mode v1", RoCEMode("v1"), ""},
		{"mode v2", RoCEMode("v2"), ""},
		{"mode empty", RoCEMode(""), `"" is not a RoCE mode`},
		{"mode V2", RoCEMode("V2"), `"V2" is not a RoCE mode: use "v1" (IB/RoCE v1) or "v2" (RoCE v2)`},
		{"mode kernel v1", RoCEMode("IB/RoCE v1"), `the kernel's string: write "v1"`},
		{"mode RoCE v1", RoCEMode("RoCE v1"), `the kernel's string: write "v1"`},
		{"mode kernel v2", RoCEMode("RoCE v2"), `the kernel's string: write "v2"`},
		{"trust dscp", Trust("dscp"), ""},
		{"trust pcp", Trust("pcp"), ""},
		{"trust ip", Trust("ip"), `"ip" is not a QoS trust mode`},
		{"link rxe", LinkType("rxe"), ""},
		{"link siw", LinkType("siw"), ""},
		{"link iwarp", LinkType("iwarp"), `"iwarp" is not a soft RDMA link type`},
		{"netns shared", NetnsMode("shared"), ""},
		{"netns exclusive", NetnsMode("exclusive"), ""},
		{"netns private", NetnsMode("private"), `"private" is not an RDMA netns mode`},
		{"link name 63 bytes", LinkName(strings.Repeat("r", 63)), ""},
		{"link name 64 bytes", LinkName(strings.Repeat("r", 64)), "64 bytes long; RDMA device names have at most 63"},
		{"link name empty", LinkName(""), "must not be empty"},
		{"link name %d", LinkName("rxe%d"), "contains '%'"},
		{"link name slash", LinkName("a/b"), `contains '/'`},
		{"link name dots", LinkName(".."), "is not a device name"},
		{"netdev 15 bytes", NetdevName(strings.Repeat("e", 15)), ""},
		{"netdev 16 bytes", NetdevName(strings.Repeat("e", 16)), "16 bytes long; interface names have at most 15"},
		{"netdev colon", NetdevName("eth0:1"), `contains ':'`},
		{"netdev space", NetdevName("eth 0"), `contains ' '`},
		{"netdev empty", NetdevName(""), "must not be empty"},
	}
	for _, tc := range tests {
		switch {
		case tc.want == "" && tc.err != nil:
			t.Errorf("%s: %v, want valid", tc.name, tc.err)
		case tc.want != "" && tc.err == nil:
			t.Errorf("%s: valid, want %q", tc.name, tc.want)
		case tc.want != "" && !strings.Contains(tc.err.Error(), tc.want):
			t.Errorf("%s: %q, want it to say %q", tc.name, tc.err, tc.want)
		}
	}
}

func TestQuoteCuts(t *testing.T) {
	if q := Quote(strings.Repeat("x", 64)); q != `"`+strings.Repeat("x", 64)+`"` {
		t.Errorf("64 bytes: %s", q)
	}
	if q := Quote(strings.Repeat("x", 65)); q != `"`+strings.Repeat("x", 64)+`"...` {
		t.Errorf("65 bytes: %s", q)
	}
}
