package config

import (
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

const losslessProfile = `[[qos]]
device = "mlx5_*"
trust = "dscp"
pfc = [3]
cable_length = 10
prio_tc = [0,0,0,1,0,0,0,0]
tc_bandwidth = [50,50,0,0,0,0,0,0]
tc_maxrate = ["0", "25Gbit", "0", "0", "0", "0", "0", "1.5Gbit"]
prio_buffer = [0,0,0,1,0,0,0,0]
buffer_size = ["128K", 262144, 0, 0, 0, 0, 0, 0]
pause = false
pfc_storm_timeout = 100
ecn = [3]
cnp_dscp = 48
cnp_priority = 6
dcbx = "host"

[[qos]]
driver = "bnxt_en"
udp_port_prio = { 4791 = 3 }

[[qos]]
device = "mlx5_1"
port = 1
tc_bandwidth = [0,60,0,40,0,0,0,0]
tc_tsa = ["strict","ets","strict","ets","strict","strict","strict","strict"]
ecn = []
udp_port_prio = { 4791 = 5, 4792 = 1 }

[[roce]]
device = "mlx5_*"
tos = 106
traffic_class = true
`

func TestLosslessKeysResolvePerField(t *testing.T) {
	p, err := Parse("/etc/rdma/rdmad.toml", []byte(losslessProfile))
	if err != nil {
		t.Fatal(err)
	}
	d := p.QoSFor(Target{Name: "mlx5_0"}, 1)
	if !QoSCableLength.Of(d.LosslessDesired).Set || QoSCableLength.Of(d.LosslessDesired).Value != 10 || QoSCableLength.Of(d.LosslessDesired).Source.Line != 1 {
		t.Errorf("cable_length %+v", QoSCableLength.Of(d.LosslessDesired))
	}
	if QoSPrioTC.Of(d.LosslessDesired).Value != [8]uint8{0, 0, 0, 1} {
		t.Errorf("prio_tc %+v", QoSPrioTC.Of(d.LosslessDesired))
	}
	// tc_tsa defaults to ets where the share is above 0, else strict.
	wantBW := ETSBandwidth{Percent: [8]uint8{50, 50}, TSA: [8]TSA{"ets", "ets", "strict", "strict", "strict", "strict", "strict", "strict"}}
	if QoSTCBandwidth.Of(d.LosslessDesired).Value != wantBW {
		t.Errorf("tc_bandwidth %+v", QoSTCBandwidth.Of(d.LosslessDesired).Value)
	}
	if QoSTCMaxrate.Of(d.LosslessDesired).Value != [8]Rate{0, 25_000_000, 0, 0, 0, 0, 0, 1_500_000} {
		t.Errorf("tc_maxrate %v", QoSTCMaxrate.Of(d.LosslessDesired).Value)
	}
	if QoSBufferSize.Of(d.LosslessDesired).Value != [8]uint32{131072, 262144} || QoSPrioBuffer.Of(d.LosslessDesired).Value != [8]uint8{0, 0, 0, 1} {
		t.Errorf("buffers %v %v", QoSBufferSize.Of(d.LosslessDesired).Value, QoSPrioBuffer.Of(d.LosslessDesired).Value)
	}
	if !QoSPause.Of(d.LosslessDesired).Set || QoSPause.Of(d.LosslessDesired).Value || QoSPFCStormTimeout.Of(d.LosslessDesired).Value != 100 || !reflect.DeepEqual(QoSECN.Of(d.LosslessDesired).Value, []uint8{3}) ||
		QoSCNPDSCP.Of(d.LosslessDesired).Value != 48 || QoSCNPPriority.Of(d.LosslessDesired).Value != 6 || QoSDCBX.Of(d.LosslessDesired).Value != DCBXHost {
		t.Errorf("the rest: %+v", d.LosslessDesired)
	}
	if QoSUDPPortPrio.Of(d.LosslessDesired).Set {
		t.Errorf("udp_port_prio of the bnxt_en rule reached mlx5_0: %+v", QoSUDPPortPrio.Of(d.LosslessDesired))
	}
	// A later rule for one port wins field by field.
	d1 := p.QoSFor(Target{Name: "mlx5_1"}, 1)
	if QoSTCBandwidth.Of(d1.LosslessDesired).Value.TSA[1] != TSAETS || QoSTCBandwidth.Of(d1.LosslessDesired).Value.Percent[3] != 40 || QoSTCBandwidth.Of(d1.LosslessDesired).Source.Line != 22 {
		t.Errorf("mlx5_1 tc_bandwidth %+v", QoSTCBandwidth.Of(d1.LosslessDesired))
	}
	if !QoSECN.Of(d1.LosslessDesired).Set || len(QoSECN.Of(d1.LosslessDesired).Value) != 0 || QoSCableLength.Of(d1.LosslessDesired).Value != 10 {
		t.Errorf("mlx5_1: ecn = [] is all off, cable_length kept: %+v", d1.LosslessDesired)
	}
	b := p.QoSFor(Target{Name: "bnxt_re0", Driver: "bnxt_en"}, 1)
	if !QoSUDPPortPrio.Of(b.LosslessDesired).Set || !reflect.DeepEqual(QoSUDPPortPrio.Of(b.LosslessDesired).Value, map[uint16]uint8{4791: 3}) || b.Empty() {
		t.Errorf("bnxt: %+v", QoSUDPPortPrio.Of(b.LosslessDesired))
	}
	// Entries merge across rules, the last of a port winning.
	b2 := p.QoSFor(Target{Name: "mlx5_1", Driver: "bnxt_en"}, 1)
	if !reflect.DeepEqual(QoSUDPPortPrio.Of(b2.LosslessDesired).Value, map[uint16]uint8{4791: 5, 4792: 1}) {
		t.Errorf("merged entries %v", QoSUDPPortPrio.Of(b2.LosslessDesired).Value)
	}
	r := p.RoCEFor(Target{Name: "mlx5_0"}, 1)
	if !r.TrafficClass.Set || !r.TrafficClass.Value || r.Empty() {
		t.Errorf("roce traffic_class %+v", r.TrafficClass)
	}
	if p.RoCEFor(Target{Name: "mlx4_0"}, 1).TrafficClass.Set {
		t.Error("traffic_class reached a device the rule does not select")
	}
}

func TestLosslessKeysRejectBadValues(t *testing.T) {
	const file = "/etc/rdma/rdmad.d/50-lossless.toml"
	q := "[[qos]]\ndevice = \"mlx5_*\"\n"
	tests := []struct {
		name string
		toml string
		line int
		want []string
	}{
		{"cable length 0", q + "cable_length = 0\n", 3, []string{"qos[0].cable_length", "out of range 1..999", "mlx5 ignores 0"}},
		{"cable length 1000", q + "cable_length = 1000\n", 3, []string{"qos[0].cable_length", "1000 is out of range"}},
		{"prio_tc short", q + "prio_tc = [0,0,0,1]\n", 3, []string{"qos[0].prio_tc", "8 priorities", "an array of 4"}},
		{"prio_tc class 8", q + "\nprio_tc = [0,0,0,8,0,0,0,0]\n", 4, []string{"qos[0].prio_tc[3]: 8 is out of range 0..7"}},
		{"bandwidth sum", q + "tc_bandwidth = [50,40,0,0,0,0,0,0]\n", 3, []string{"qos[0].tc_bandwidth", "add up to 90%"}},
		{"bandwidth on strict", q + "tc_bandwidth = [50,50,0,0,0,0,0,0]\ntc_tsa = [\"ets\",\"strict\",\"ets\",\"ets\",\"ets\",\"ets\",\"ets\",\"ets\"]\n", 3, []string{"qos[0].tc_bandwidth", "traffic class 1 is strict and has 50%"}},
		{"tsa without bandwidth", q + "tc_tsa = [\"ets\",\"ets\",\"ets\",\"ets\",\"ets\",\"ets\",\"ets\",\"ets\"]\n", 3, []string{"qos[0].tc_tsa", "needs tc_bandwidth"}},
		{"tsa vendor", q + "tc_bandwidth = [100,0,0,0,0,0,0,0]\ntc_tsa = [\"ets\",\"vendor\",\"strict\",\"strict\",\"strict\",\"strict\",\"strict\",\"strict\"]\n", 4, []string{"qos[0].tc_tsa[1]", `"vendor" is not a transmission selection`}},
		{"maxrate bytes", q + "tc_maxrate = [\"0\",\"25Gbps\",\"0\",\"0\",\"0\",\"0\",\"0\",\"0\"]\n", 3, []string{"qos[0].tc_maxrate[1]", "in bits (25Gbit)", "bytes per second"}},
		{"maxrate no unit", q + "tc_maxrate = [\"0\",\"25\",\"0\",\"0\",\"0\",\"0\",\"0\",\"0\"]\n", 3, []string{"qos[0].tc_maxrate[1]", "has no unit"}},
		{"maxrate fraction of kbit", q + "tc_maxrate = [\"0\",\"1500bit\",\"0\",\"0\",\"0\",\"0\",\"0\",\"0\"]\n", 3, []string{"qos[0].tc_maxrate[1]", "whole number of kbit/s"}},
		{"maxrate not strings", q + "tc_maxrate = [0,0,0,0,0,0,0,0]\n", 3, []string{"qos[0].tc_maxrate[0]: must be a string"}},
		{"buffer unit", q + "buffer_size = [\"1G\",0,0,0,0,0,0,0]\n", 3, []string{"qos[0].buffer_size[0]", `unknown unit "G"`}},
		{"buffer count", q + "buffer_size = [0,0]\n", 3, []string{"qos[0].buffer_size", "array of 8 buffer sizes"}},
		{"udp port 0", q + "udp_port_prio = { 0 = 3 }\n", 3, []string{"qos[0].udp_port_prio.0", "not a UDP port"}},
		{"udp port 70000", q + "udp_port_prio = { 70000 = 3 }\n", 3, []string{"qos[0].udp_port_prio.70000", "1..65535"}},
		{"udp prio 8", q + "udp_port_prio = { 4791 = 8 }\n", 3, []string{"qos[0].udp_port_prio.4791: 8 is out of range 0..7"}},
		{"pause string", q + "pause = \"off\"\n", 3, []string{"qos[0].pause", "true or false"}},
		{"storm timeout 50", q + "pfc_storm_timeout = 50\n", 3, []string{"qos[0].pfc_storm_timeout", "0 (off) or 80..8000"}},
		{"ecn twice", q + "ecn = [3, 3]\n", 3, []string{"qos[0].ecn", "priority 3 is listed twice"}},
		{"ecn not array", q + "ecn = true\n", 3, []string{"qos[0].ecn", "[] turns ECN off"}},
		{"cnp dscp 64", q + "cnp_dscp = 64\n", 3, []string{"qos[0].cnp_dscp: 64 is out of range 0..63"}},
		{"cnp priority 8", q + "cnp_priority = 8\n", 3, []string{"qos[0].cnp_priority: 8 is out of range 0..7"}},
		{"dcbx firmware", q + "dcbx = \"firmware\"\n", 3, []string{"qos[0].dcbx", `"host"`}},
		{"roce traffic_class string", "[[roce]]\ndevice = \"mlx5_*\"\ntos = 106\ntraffic_class = \"yes\"\n", 4, []string{"roce[0].traffic_class", "true or false"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(file, []byte(tc.toml))
			if err == nil {
				t.Fatalf("Parse accepted:\n%s", tc.toml)
			}
			msg := err.Error()
			if prefix := file + ":" + strconv.Itoa(tc.line) + ": "; !strings.HasPrefix(msg, prefix) {
				t.Errorf("error %q does not start with %q", msg, prefix)
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not mention %q", msg, w)
				}
			}
			if strings.Contains(msg, "unknown key") {
				t.Errorf("a value error reported as an unknown key: %q", msg)
			}
			var ce *Error
			if !errors.As(err, &ce) {
				t.Errorf("not a *Error: %#v", err)
			}
		})
	}
}

func TestRatesAndSizes(t *testing.T) {
	for in, want := range map[string]Rate{"0": 0, "25Gbit": 25_000_000, "25gbit": 25_000_000, "1.5Gbit": 1_500_000, "100Mbit": 100_000,
		"7kbit": 7, "2000bit": 2, "1Tbit": 1_000_000_000} {
		got, err := ParseRate(in)
		if err != nil || got != want {
			t.Errorf("ParseRate(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for r, want := range map[Rate]string{0: "0", 25_000_000: "25Gbit", 1_500_000: "1500Mbit", 7: "7kbit", 1e9: "1Tbit"} {
		if got := r.String(); got != want {
			t.Errorf("Rate(%d) = %q, want %q", uint64(r), got, want)
		}
		if back, err := ParseRate(r.String()); err != nil || back != r {
			t.Errorf("round trip of %d: %d %v", uint64(r), back, err)
		}
	}
	for in, want := range map[string]uint32{"0": 0, "128K": 131072, "1M": 1 << 20, "256KB": 262144, "4096": 4096} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v", in, got, err)
		}
	}
	for _, bad := range []string{"", "K", "4G", "5000000K"} {
		if _, err := ParseSize(bad); err == nil {
			t.Errorf("ParseSize(%q) accepted", bad)
		}
	}
	if Size(131072) != "128K" || Size(1<<20) != "1M" || Size(1000) != "1000" || Size(0) != "0" {
		t.Error("Size")
	}
}

func TestPersistedLosslessRoundTripAndMerge(t *testing.T) {
	sel := Selector{Device: Exact("mlx5_0")}
	cable, timeout, pause := 10, 100, false
	ecn := []uint8{3}
	var p Persisted
	p.SetQoS(sel, 1, TrustDSCP, []uint8{3}, true)
	var first, second LosslessRule
	QoSCableLength.Set(&first, cable)
	QoSPause.Set(&first, pause)
	QoSECN.Set(&first, ecn)
	QoSTCBandwidth.Set(&first, ETSBandwidth{Percent: [8]uint8{50, 50}, TSA: [8]TSA{"ets", "ets", "strict", "strict", "strict", "strict", "strict", "strict"}})
	QoSTCMaxrate.Set(&first, [8]Rate{0, 25_000_000})
	QoSBufferSize.Set(&first, [8]uint32{131072})
	QoSUDPPortPrio.Set(&first, map[uint16]uint8{4791: 3})
	QoSDCBX.Set(&first, DCBXHost)
	p.SetQoSSettings(sel, 1, first)
	QoSPFCStormTimeout.Set(&second, timeout)
	p.SetQoSSettings(sel, 1, second)
	if len(p.QoS) != 1 {
		t.Fatalf("rules pile up: %+v", p.QoS)
	}
	text := string(p.Render())
	for _, w := range []string{"cable_length = 10\n", "tc_tsa = [\"ets\", \"ets\", \"strict\"", "tc_maxrate = [\"0\", \"25Gbit\"", "buffer_size = [131072, 0",
		"udp_port_prio = { 4791 = 3 }\n", "pause = false\n", "pfc_storm_timeout = 100\n", "ecn = [3]\n", "dcbx = \"host\"\n"} {
		if !strings.Contains(text, w) {
			t.Errorf("rendered drop-in lacks %q:\n%s", w, text)
		}
	}
	back, err := parsePersisted(PersistedName, []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	back.QoS[0].Source = Position{}
	if !reflect.DeepEqual(back.QoS, p.QoS) {
		t.Errorf("round trip:\n got %+v\nwant %+v", back.QoS, p.QoS)
	}
	// A rule for every port after it: the port rule loses the keys the
	// new rule sets, keeps the others.
	other := 20
	var third LosslessRule
	QoSCableLength.Set(&third, other)
	p.SetQoSSettings(sel, 0, third)
	_, cable0 := QoSCableLength.In(p.QoS[0].LosslessRule)
	_, pause0 := QoSPause.In(p.QoS[0].LosslessRule)
	if cable1, _ := QoSCableLength.In(p.QoS[1].LosslessRule); len(p.QoS) != 2 || cable0 || !pause0 || cable1 != 20 {
		t.Errorf("merge: %+v", p.QoS)
	}
	if d := mustPolicy(t, string(p.Render())).QoSFor(Target{Name: "mlx5_0"}, 1); QoSCableLength.Of(d.LosslessDesired).Value != 20 || !QoSPause.Of(d.LosslessDesired).Set {
		t.Errorf("resolved after merge: %+v", d.LosslessDesired)
	}
}

func mustPolicy(t *testing.T, text string) *Policy {
	t.Helper()
	p, err := Parse("f.toml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDecodeQoSSettingsValidatesAsTheFilesDo(t *testing.T) {
	r, err := DecodeQoSSettings(map[string]any{
		"pfc": []any{int64(3)}, "cable_length": int64(10), "pause": false,
		"tc_bandwidth":  []any{int64(50), int64(50), int64(0), int64(0), int64(0), int64(0), int64(0), int64(0)},
		"udp_port_prio": map[string]any{"4791": int64(3)}, "dcbx": "host",
	})
	if err != nil {
		t.Fatal(err)
	}
	cable, _ := QoSCableLength.In(r.LosslessRule)
	pause, _ := QoSPause.In(r.LosslessRule)
	bw, _ := QoSTCBandwidth.In(r.LosslessRule)
	dcbx, _ := QoSDCBX.In(r.LosslessRule)
	if !r.HasPFC || cable != 10 || pause || bw.TSA[0] != TSAETS || bw.TSA[2] != TSAStrict || dcbx != DCBXHost {
		t.Errorf("decoded %+v", r)
	}
	keys := r.Keys()
	if len(keys) != 6 || keys[0] != KeyQoSPFC || keys[1] != QoSCableLength.Key() || keys[5] != QoSDCBX.Key() {
		t.Errorf("keys %v", keys)
	}
	for _, c := range []struct {
		m    map[string]any
		want string
	}{
		{map[string]any{"cable_length": int64(1000)}, "cable_length: 1000 is out of range 1..999"},
		{map[string]any{"pfc_storm_timeout": int64(50)}, "pfc_storm_timeout: 50 is out of range"},
		{map[string]any{"tc_bandwidth": []any{int64(50), int64(40), int64(0), int64(0), int64(0), int64(0), int64(0), int64(0)}}, "tc_bandwidth: the ets classes add up to 90%"},
		{map[string]any{"device": "mlx5_0"}, "device: unknown key"},
		{map[string]any{}, "sets nothing"},
		{map[string]any{"trust": "pcp", "dscp_prio": map[string]any{"26": int64(3)}}, `dscp_prio: applies with trust = "dscp" only`},
	} {
		if _, err := DecodeQoSSettings(c.m); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.m, err, c.want)
		}
	}
}

// losslessSamples is a value of each lossless key as a file writes it:
// TestEveryLosslessKeyHasEachFacet fails for a key without one.
var losslessSamples = map[string]string{
	"cable_length":      "cable_length = 10",
	"prio_tc":           "prio_tc = [0, 0, 0, 1, 0, 0, 0, 0]",
	"tc_bandwidth":      "tc_bandwidth = [50, 50, 0, 0, 0, 0, 0, 0]",
	"tc_tsa":            "tc_bandwidth = [50, 50, 0, 0, 0, 0, 0, 0]\ntc_tsa = [\"ets\", \"ets\", \"strict\", \"strict\", \"strict\", \"strict\", \"strict\", \"strict\"]",
	"tc_maxrate":        "tc_maxrate = [\"0\", \"25Gbit\", \"0\", \"0\", \"0\", \"0\", \"0\", \"0\"]",
	"prio_buffer":       "prio_buffer = [0, 0, 0, 1, 0, 0, 0, 0]",
	"buffer_size":       "buffer_size = [131072, 262144, 0, 0, 0, 0, 0, 0]",
	"udp_port_prio":     "udp_port_prio = { 4791 = 3 }",
	"pause":             "pause = false",
	"pfc_storm_timeout": "pfc_storm_timeout = 100",
	"ecn":               "ecn = [3]",
	"cnp_dscp":          "cnp_dscp = 48",
	"cnp_priority":      "cnp_priority = 6",
	"dcbx":              "dcbx = \"host\"",
}

// Every entry of the table is a whole key: it decodes alone, declares its
// Key and nothing else, resolves on a port with its source, renders into
// rdmad's drop-in and reads back the same, merges away under a later rule
// that sets it, and is listed by QoSKeys with its Key.
func TestEveryLosslessKeyHasEachFacet(t *testing.T) {
	listed := map[string]Key{}
	for _, k := range QoSKeys() {
		listed[k.Name] = k.Key
	}
	for _, k := range losslessKeys {
		names := []string{k.info.Name}
		for _, a := range k.also {
			names = append(names, a.Name)
		}
		for _, name := range names {
			sample, ok := losslessSamples[name]
			if !ok {
				t.Errorf("%s: no sample value in losslessSamples", name)
				continue
			}
			if listed[name] != k.key || k.key != Key("qos."+k.info.Name) {
				t.Errorf("%s: QoSKeys lists it as %q, its entry's Key is %q", name, listed[name], k.key)
			}
			p, err := Parse("f.toml", []byte("[[qos]]\ndevice = \"mlx5_0\"\n"+sample+"\n"))
			if err != nil {
				t.Errorf("%s: %v", name, err)
				continue
			}
			r := p.QoS[0]
			if keys := r.Keys(); len(keys) != 1 || keys[0] != k.key {
				t.Errorf("%s: the rule declares %v, want [%s]", name, keys, k.key)
			}
			if d := p.QoSFor(Target{Name: "mlx5_0"}, 1).get(k.index); !d.Set || d.Source.Line != 1 || d.Value == nil {
				t.Errorf("%s: resolved as %+v", name, d)
			}
			if _, ok := r.Values()[k.info.Name]; !ok {
				t.Errorf("%s: Values %v lacks it", name, r.Values())
			}
			var per Persisted
			per.SetQoSSettings(Selector{Device: Exact("mlx5_0")}, 1, r.LosslessRule)
			back, err := parsePersisted(PersistedName, per.Render())
			if err != nil || len(back.QoS) != 1 || !back.QoS[0].LosslessRule.Equal(r.LosslessRule) {
				t.Errorf("%s: the drop-in reads back %+v, %v; want %+v\n%s", name, back.QoS, err, r.LosslessRule, per.Render())
			}
			if rest, left := r.without(r); left || rest.LosslessRule.declaresAny() {
				t.Errorf("%s: a rule that sets it again leaves %+v", name, rest)
			}
		}
	}
}
