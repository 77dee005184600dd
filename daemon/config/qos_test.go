package config

import (
	"reflect"
	"strings"
	"testing"
)

func TestQoSForResolvesEachFieldPerPort(t *testing.T) {
	const main = "/etc/rdma/rdmad.toml"
	p, err := Parse(main, []byte(`[[qos]]
device = "mlx5_*"
trust = "dscp"
pfc = [3]
dscp_prio = { 26 = 3, 48 = 6 }

[[qos]]
device = "mlx5_1"
port = 1
pfc = [4, 3]
dscp_prio = { 48 = 5 }

[[qos]]
device = "mlx5_1"
port = 2
pfc = []
`))
	if err != nil {
		t.Fatal(err)
	}
	m0 := p.QoSFor(Target{Name: "mlx5_0"}, 1)
	if m0.Trust != TrustDSCP || m0.TrustSource.Line != 1 || !m0.HasPFC || !reflect.DeepEqual(m0.PFC, []uint8{3}) || m0.PFCMask() != 0x08 {
		t.Errorf("mlx5_0/1: %+v", m0)
	}
	m1 := p.QoSFor(Target{Name: "mlx5_1"}, 1)
	if m1.Trust != TrustDSCP || !reflect.DeepEqual(m1.PFC, []uint8{3, 4}) || m1.PFCSource.Line != 7 || m1.PFCMask() != 0x18 {
		t.Errorf("mlx5_1/1: %+v", m1)
	}
	if m1.DSCPPrio[26] != 3 || m1.DSCPPrio[48] != 5 || m1.DSCPSource[48].Line != 7 || m1.DSCPSource[26].Line != 1 {
		t.Errorf("mlx5_1/1 dscp_prio: %v %v", m1.DSCPPrio, m1.DSCPSource)
	}
	tab := m1.DSCPTable()
	if tab[26] != 3 || tab[48] != 5 || tab[0] != 0 || tab[46] != 5 || tab[63] != 7 || tab[8] != 1 {
		t.Errorf("DSCP table %v", tab)
	}
	m2 := p.QoSFor(Target{Name: "mlx5_1"}, 2)
	if !m2.HasPFC || len(m2.PFC) != 0 || m2.PFCMask() != 0 || m2.PFCSource.Line != 13 {
		t.Errorf("mlx5_1/2: pfc = [] is PFC off: %+v", m2)
	}
	if d := p.QoSFor(Target{Name: "mlx4_0"}, 1); !d.Empty() {
		t.Errorf("mlx4_0 selected: %+v", d)
	}
}

func TestQoSAbsentPFCLeavesItAlone(t *testing.T) {
	p, err := Parse("f.toml", []byte("[[qos]]\ndevice = \"*\"\ntrust = \"pcp\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	d := p.QoSFor(Target{Name: "x"}, 1)
	if d.HasPFC || d.Trust != TrustPCP || d.Empty() {
		t.Errorf("%+v", d)
	}
}

func TestPersistedQoSRoundTrip(t *testing.T) {
	var p Persisted
	p.SetQoS(Selector{Device: Exact("mlx5_0")}, 1, TrustDSCP, []uint8{3}, true)
	p.SetQoS(Selector{Device: Exact("mlx5_0")}, 1, "", []uint8{3, 4}, true)
	p.SetQoS(Selector{Device: Exact("mlx5_[1]")}, 2, TrustPCP, nil, false)
	if len(p.QoS) != 2 {
		t.Fatalf("rules pile up: %+v", p.QoS)
	}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	text := string(p.Render())
	for _, w := range []string{"[[qos]]\ndevice = \"mlx5_0\"\nport = 1\ntrust = \"dscp\"\npfc = [3, 4]\n", `device = "mlx5_\\[1\\]"`, "trust = \"pcp\"\n"} {
		if !strings.Contains(text, w) {
			t.Errorf("rendered drop-in lacks %q:\n%s", w, text)
		}
	}
	back, err := parsePersisted(PersistedName, []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	for i := range back.QoS {
		back.QoS[i].Source = Position{}
	}
	if !reflect.DeepEqual(back.QoS, p.QoS) {
		t.Errorf("round trip:\n got %+v\nwant %+v", back.QoS, p.QoS)
	}
	// pfc = [] persists as PFC off, not as absent.
	var off Persisted
	off.SetQoS(Selector{Device: Exact("mlx5_0")}, 0, "", []uint8{}, true)
	if !strings.Contains(string(off.Render()), "pfc = []\n") {
		t.Errorf("PFC off not rendered:\n%s", off.Render())
	}
}

// FirstSource names the same place every time: trust's, else pfc's, else
// the dscp_prio entry of the lowest DSCP (a map ranged over would name any
// entry).
func TestQoSFirstSourceIsDeterministic(t *testing.T) {
	src := map[uint8]Position{}
	for dscp := uint8(10); dscp < 40; dscp++ {
		src[dscp] = Position{File: "/etc/rdma/rdmad.d/x.toml", Line: int(dscp)}
	}
	d := QoSDesired{DSCPPrio: map[uint8]uint8{}, DSCPSource: src}
	for range 200 {
		if got := d.FirstSource(); got.Line != 10 {
			t.Fatalf("FirstSource = %v, want line 10 (the lowest DSCP's)", got)
		}
	}
	d.HasPFC, d.PFCSource = true, Position{File: "f", Line: 2}
	if got := d.FirstSource(); got.Line != 2 {
		t.Errorf("with pfc: %v", got)
	}
	d.Trust, d.TrustSource = TrustDSCP, Position{File: "f", Line: 1}
	if got := d.FirstSource(); got.Line != 1 {
		t.Errorf("with trust: %v", got)
	}
	if got := (QoSDesired{}).FirstSource(); got != (Position{}) {
		t.Errorf("nothing declared: %v", got)
	}
}
