package config

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// declared is what TestParseBounds compares: the typed values a file's
// rules declare, sources included.
type declared struct {
	RoCE  []RoCERule
	QoS   []QoSRule
	Links []Link
	Netns NetnsMode
}

// Each key at the bounds of its values, through Parse: the inclusive ends
// give these typed values exactly, one past them an error naming the
// key's file:line.
func TestParseBounds(t *testing.T) {
	const file = "/etc/rdma/rdmad.toml"
	at := func(line int) Position { return Position{File: file, Line: line} }
	dev := Selector{Device: Glob("mlx5_0")}
	tos := func(n int) *int { return &n }
	tests := []struct {
		name string
		toml string
		want declared
		err  string // a substring of the error; "" when the file is valid
	}{
		{name: "tos 0 and 255, the highest port", toml: "[[roce]]\ndevice = \"mlx5_0\"\ntos = 0\n\n[[roce]]\ndevice = \"mlx5_0\"\nport = 4294967295\nmode = \"v2\"\ntos = 255\n",
			want: declared{RoCE: []RoCERule{{Source: at(1), Selector: dev, TOS: tos(0)}, {Source: at(5), Selector: dev, Port: 4294967295, Mode: RoCEv2, TOS: tos(255)}}}},
		{name: "tos 256", toml: "[[roce]]\ndevice = \"mlx5_0\"\ntos = 256\n", err: file + ":3: roce[0].tos: 256 is out of range 0..255"},
		{name: "tos -1", toml: "[[roce]]\ndevice = \"mlx5_0\"\ntos = -1\n", err: file + ":3: roce[0].tos: -1 is out of range 0..255"},
		{name: "port 0", toml: "[[roce]]\ndevice = \"mlx5_0\"\nport = 0\ntos = 1\n", err: file + ":3: roce[0].port: 0 is out of range 1..4294967295"},
		{name: "port past u32", toml: "[[roce]]\ndevice = \"mlx5_0\"\nport = 4294967296\ntos = 1\n", err: file + ":3: roce[0].port: 4294967296 is out of range"},
		{name: "mode v1", toml: "[[roce]]\ndevice = \"mlx5_0\"\nmode = \"v1\"\n",
			want: declared{RoCE: []RoCERule{{Source: at(1), Selector: dev, Mode: RoCEv1}}}},
		{name: "mode v3", toml: "[[roce]]\ndevice = \"mlx5_0\"\nmode = \"v3\"\n", err: file + `:3: roce[0].mode: "v3" is not a RoCE mode`},
		{name: "roce sets nothing", toml: "[[roce]]\ndevice = \"mlx5_0\"\nport = 1\n", err: file + ":1: roce[0]: sets nothing"},
		{name: "pfc 0 and 7, dscp 0 and 63 at 0 and 7", toml: "[[qos]]\ndevice = \"mlx5_0\"\ntrust = \"dscp\"\npfc = [7, 0]\ndscp_prio = { 0 = 0, 63 = 7 }\n",
			want: declared{QoS: []QoSRule{{Source: at(1), Selector: dev, Trust: TrustDSCP, PFC: []uint8{0, 7}, HasPFC: true,
				DSCPPrio: map[uint8]uint8{0: 0, 63: 7}}}}},
		{name: "pfc off", toml: "[[qos]]\ndevice = \"mlx5_0\"\npfc = []\n",
			want: declared{QoS: []QoSRule{{Source: at(1), Selector: dev, PFC: []uint8{}, HasPFC: true}}}},
		{name: "pfc 8", toml: "[[qos]]\ndevice = \"mlx5_0\"\npfc = [3, 8]\n", err: file + ":3: qos[0].pfc: priority 8 is out of range 0..7"},
		{name: "pfc -1", toml: "[[qos]]\ndevice = \"mlx5_0\"\npfc = [-1]\n", err: file + ":3: qos[0].pfc: priority -1 is out of range 0..7"},
		{name: "pfc twice", toml: "[[qos]]\ndevice = \"mlx5_0\"\npfc = [3, 3]\n", err: file + ":3: qos[0].pfc: priority 3 is listed twice"},
		{name: "dscp 64", toml: "[[qos]]\ndevice = \"mlx5_0\"\ntrust = \"dscp\"\ndscp_prio = { 64 = 1 }\n", err: file + ":4: qos[0].dscp_prio.64: DSCP 64 is out of range 0..63"},
		{name: "dscp priority 8", toml: "[[qos]]\ndevice = \"mlx5_0\"\ntrust = \"dscp\"\ndscp_prio = { 63 = 8 }\n", err: file + ":4: qos[0].dscp_prio.63: DSCP 63: priority 8 is out of range 0..7"},
		{name: "dscp with trust pcp", toml: "[[qos]]\ndevice = \"mlx5_0\"\ntrust = \"pcp\"\ndscp_prio = { 26 = 3 }\n", err: file + `:4: qos[0].dscp_prio: applies with trust = "dscp" only`},
		{name: "trust ip", toml: "[[qos]]\ndevice = \"mlx5_0\"\ntrust = \"ip\"\n", err: file + `:3: qos[0].trust: "ip" is not a QoS trust mode`},
		{name: "link names at their longest", toml: "[[link]]\nname = \"" + strings.Repeat("r", 63) + "\"\ntype = \"siw\"\nnetdev = \"" + strings.Repeat("e", 15) + "\"\n",
			want: declared{Links: []Link{{Source: at(1), Name: strings.Repeat("r", 63), Type: LinkSIW, Netdev: strings.Repeat("e", 15)}}}},
		{name: "link name of 64 bytes", toml: "[[link]]\nname = \"" + strings.Repeat("r", 64) + "\"\ntype = \"rxe\"\nnetdev = \"eth0\"\n", err: file + ":2: link[0].name: "},
		{name: "netdev of 16 bytes", toml: "[[link]]\nname = \"rxe0\"\ntype = \"rxe\"\nnetdev = \"" + strings.Repeat("e", 16) + "\"\n", err: file + ":4: link[0].netdev: "},
		{name: "link without netdev", toml: "[[link]]\nname = \"rxe0\"\ntype = \"rxe\"\n", err: file + ":1: link[0]: missing netdev"},
		{name: "netns exclusive", toml: "[netns]\nmode = \"exclusive\"\n", want: declared{Netns: NetnsExclusive}},
		{name: "netns private", toml: "[netns]\nmode = \"private\"\n", err: file + `:2: netns.mode: "private" is not an RDMA netns mode`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Parse(file, []byte(tc.toml))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := declared{RoCE: p.RoCE, QoS: p.QoS, Links: p.Links, Netns: p.Netns.Mode}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("declared (-want +got):\n%s", diff)
			}
		})
	}
}
