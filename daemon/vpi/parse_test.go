package vpi

import (
	"testing"

	"github.com/rdmad/rdmad/daemon/config"
)

// mlx4_port<N> reads ib, eth, or "auto (ib|eth)"; a declared type holds
// when the port has it, auto whatever automatic sensing found.
func TestParseAndHolds(t *testing.T) {
	cases := []struct {
		observed string
		want     config.VPIType
		ok       bool
		text     string
	}{
		{"ib", config.VPIib, true, "ib"},
		{"eth\n", config.VPIeth, true, "eth"},
		{"auto (ib)", config.VPIauto, true, "auto (ib)"},
		{"auto (eth)", config.VPIauto, true, "auto (eth)"},
		{"auto (eth)", config.VPIeth, false, "auto (eth)"},
		{"ib", config.VPIeth, false, "ib"},
		{"eth", config.VPIauto, false, "eth"},
		{"infiniband", config.VPIib, false, "infiniband"},
	}
	for _, c := range cases {
		have := parseType(c.observed)
		if got := holds(have, TypeValue{Type: c.want}); got != c.ok || have.String() != c.text {
			t.Errorf("parseType(%q) = %q, holds %s = %v", c.observed, have, c.want, got)
		}
	}
}
