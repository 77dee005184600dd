package config

import (
	"path"
	"slices"
	"testing"
)

// FuzzExactName: a rule for one device (Exact: a device named over D-Bus)
// selects that device and no other, whatever bytes the kernel let its name
// hold; written to a file (Text) and read back (Glob) it is the same exact
// name, and the text is a valid pattern that matches the name.
func FuzzExactName(f *testing.F) {
	for _, s := range []string{"mlx5_0", "dev[1]", `a\b`, "*", "vf\xff \n*[..]$x", "\xe2\x82", "x?y]"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		n := Exact(name)
		if !n.Match(name) || n.Match(name+"x") {
			t.Fatalf("Exact(%q) does not select exactly its name", name)
		}
		pat := n.Text()
		if ok, err := path.Match(pat, name); !ok || err != nil {
			t.Fatalf("Exact(%q).Text() = %q does not match the name (%v)", name, pat, err)
		}
		if validGlob(pat) != nil && !containsSlash(name) && name != "" && len(pat) <= MaxGlob {
			t.Fatalf("Exact(%q).Text() = %q is not a valid pattern", name, pat)
		}
		if got := Glob(pat); got != n {
			t.Fatalf("Glob(Exact(%q).Text()) = %+v", name, got)
		}
	})
}

// Glob keeps a pattern a pattern and makes a name without glob characters
// (escaped ones aside) the exact name it selects.
func TestGlob(t *testing.T) {
	for in, want := range map[string]Name{
		"mlx5_*":  {Name: "mlx5_*", Pattern: true},
		"rxe?":    {Name: "rxe?", Pattern: true},
		"dev[12]": {Name: "dev[12]", Pattern: true},
		"mlx5_0":  {Name: "mlx5_0"},
		`mlx5\*`:  {Name: "mlx5*"},
		`a\[1\]`:  {Name: "a[1]"},
		`a\[1\]*`: {Name: `a\[1\]*`, Pattern: true},
	} {
		if got := Glob(in); got != want {
			t.Errorf("Glob(%q) = %+v, want %+v", in, got, want)
		}
	}
}

func containsSlash(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == '/' {
			return true
		}
	}
	return false
}

// A persisted value for every port wins over what the drop-in said for one
// port (it used to update only the every-port entry, and the port entry
// after it kept its old TOS).
func TestPersistedSetRoCEForEveryPortOverridesPortEntries(t *testing.T) {
	var p Persisted
	p.SetRoCE(Selector{Device: Exact("mlx5_0")}, 0, "", intp(0))
	p.SetRoCE(Selector{Device: Exact("mlx5_0")}, 1, RoCEv2, intp(106))
	p.SetRoCE(Selector{Device: Exact("mlx5_0")}, 0, "", intp(99))
	pol := Policy{RoCE: p.RoCE}
	if d := pol.RoCEFor(Target{Name: "mlx5_0"}, 1); d.TOS == nil || *d.TOS != 99 || d.Mode != RoCEv2 {
		t.Errorf("port 1 = %+v, want tos 99 (the last call) and mode v2", d)
	}
}

// FuzzMergeRule: any sequence of runtime or persisted [[roce]] or [[qos]]
// settings gives, through MergeRule, exactly the policy that appending
// every one gives, with at most two rules per table, device and port; and
// ForgetRule then leaves exactly what appending, without the forgotten
// fields on the forgotten ports, gives.
func FuzzMergeRule(f *testing.F) {
	f.Add([]byte("\x00\x00\x00\x01\x01\x10\x00\x01\x02\x00\x00\x05"))
	f.Add([]byte("\x01\x02\x01\x00\x00\x00\x01\x00\x00\x63\x01\x01\x00\x07"))
	f.Add([]byte("\x80\x01\x03\x05\x81\x00\x02\x00\x82\x02\x01\x08\x00"))
	f.Fuzz(func(t *testing.T, ops []byte) {
		devices := []string{"mlx5_0", "mlx5_1", "dev[1]"}
		modes := []RoCEMode{"", RoCEv1, RoCEv2}
		trusts := []QoSTrust{"", TrustDSCP, TrustPCP}
		var merged, appended Policy
		for len(ops) >= 4 {
			qos := ops[0]&0x80 != 0
			dev, port, field, value := devices[int(ops[0]&0x7f)%3], int(ops[1])%4, ops[2], ops[3]
			ops = ops[4:]
			sel := Selector{Device: Exact(dev)}
			if qos {
				r := QoSRule{Selector: sel, Port: port, Trust: trusts[int(field/2)%3]}
				if field%2 == 1 || r.Trust == "" {
					r.HasPFC, r.PFC = true, bitsOf(value)
				}
				merged.QoS = MergeRule(merged.QoS, r)
				appended.QoS = append(appended.QoS, r)
			} else {
				r := RoCERule{Selector: sel, Port: port, Mode: modes[int(field/2)%3]}
				if field%2 == 1 || r.Mode == "" {
					v := int(value)
					r.TOS = &v
				}
				merged.RoCE = MergeRule(merged.RoCE, r)
				appended.RoCE = append(appended.RoCE, r)
			}
			count := map[string]int{}
			for _, m := range merged.RoCE {
				count["roce "+m.Device.Name+"/"+string(rune('0'+m.Port))]++
			}
			for _, m := range merged.QoS {
				count["qos "+m.Device.Name+"/"+string(rune('0'+m.Port))]++
			}
			for k, n := range count {
				if n > 2 {
					t.Fatalf("%d rules for %s: %+v %+v", n, k, merged.RoCE, merged.QoS)
				}
			}
			samePorts(t, devices, &merged, &appended)
		}
		// Forgetting what one more call would set, on one port, is
		// appending a rule that unsets it there.
		for _, dev := range devices {
			sel := Selector{Device: Exact(dev)}
			v := 0
			forgotten := merged
			forgotten.RoCE = ForgetRule(merged.RoCE, RoCERule{Selector: sel, Port: 2, TOS: &v}, []int{1, 2, 3})
			forgotten.QoS = ForgetRule(merged.QoS, QoSRule{Selector: sel, Port: 2, Trust: TrustPCP}, []int{1, 2, 3})
			for p := 1; p <= 3; p++ {
				g, w := forgotten.RoCEFor(Target{Name: dev}, p), appended.RoCEFor(Target{Name: dev}, p)
				if p == 2 && g.TOS != nil {
					t.Fatalf("%s/2: TOS %d left after ForgetRule", dev, *g.TOS)
				}
				if g.Mode != w.Mode {
					t.Fatalf("%s/%d: ForgetRule of the TOS changed the mode: %q, want %q", dev, p, g.Mode, w.Mode)
				}
				if p != 2 && !sameTOS(g.TOS, w.TOS) {
					t.Fatalf("%s/%d: ForgetRule on port 2 changed port %d's TOS", dev, p, p)
				}
				gq, wq := forgotten.QoSFor(Target{Name: dev}, p), appended.QoSFor(Target{Name: dev}, p)
				if gq.HasPFC != wq.HasPFC || !slices.Equal(gq.PFC, wq.PFC) || (p != 2 && gq.Trust != wq.Trust) || (p == 2 && gq.Trust != "") {
					t.Fatalf("%s/%d: ForgetRule of the trust on port 2 gives %+v, want %+v", dev, p, gq, wq)
				}
			}
		}
	})
}

// samePorts fails unless both policies resolve every port alike.
func samePorts(t *testing.T, devices []string, got, want *Policy) {
	t.Helper()
	for _, d := range devices {
		for p := 1; p <= 3; p++ {
			g, w := got.RoCEFor(Target{Name: d}, p), want.RoCEFor(Target{Name: d}, p)
			if g.Mode != w.Mode || !sameTOS(g.TOS, w.TOS) {
				t.Fatalf("%s/%d: merged %+v, appended %+v\nrules %+v", d, p, g, w, got.RoCE)
			}
			gq, wq := got.QoSFor(Target{Name: d}, p), want.QoSFor(Target{Name: d}, p)
			if gq.Trust != wq.Trust || gq.HasPFC != wq.HasPFC || !slices.Equal(gq.PFC, wq.PFC) {
				t.Fatalf("%s/%d: merged %+v, appended %+v\nrules %+v", d, p, gq, wq, got.QoS)
			}
		}
	}
}

func sameTOS(a, b *int) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

// bitsOf lists the bits set in mask: PFC priorities.
func bitsOf(mask byte) []uint8 {
	out := []uint8{}
	for i := uint8(0); i < 8; i++ {
		if mask&(1<<i) != 0 {
			out = append(out, i)
		}
	}
	return out
}
