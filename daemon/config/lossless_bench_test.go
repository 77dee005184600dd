package config

import (
	"fmt"
	"strings"
	"testing"
)

// BenchmarkParseLosslessRules parses a drop-in with a [[qos]] rule of
// every lossless key for each of 1,024 devices, as a fleet's profile
// file: the cost of decoding and holding the table-driven keys.
func BenchmarkParseLosslessRules(b *testing.B) {
	var s strings.Builder
	for i := 0; i < 1024; i++ {
		fmt.Fprintf(&s, `[[qos]]
device = "mlx5_%d"
trust = "dscp"
pfc = [3]
cable_length = 10
prio_tc = [0, 0, 0, 1, 0, 0, 0, 0]
tc_bandwidth = [50, 50, 0, 0, 0, 0, 0, 0]
tc_maxrate = ["0", "25Gbit", "0", "0", "0", "0", "0", "0"]
prio_buffer = [0, 0, 0, 1, 0, 0, 0, 0]
buffer_size = ["128K", "128K", 0, 0, 0, 0, 0, 0]
udp_port_prio = { 4791 = 3 }
pause = false
pfc_storm_timeout = 100
ecn = [3]
cnp_dscp = 48
cnp_priority = 6
dcbx = "host"

`, i)
	}
	data := []byte(s.String())
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p, err := Parse("f.toml", data)
		if err != nil {
			b.Fatal(err)
		}
		if len(p.QoS) != 1024 {
			b.Fatalf("%d rules", len(p.QoS))
		}
	}
}
