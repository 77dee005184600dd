package config

import (
	"path"
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
		if validGlob(pat) != nil && !containsSlash(name) && name != "" {
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

// FuzzMergeRoCE: any sequence of runtime or persisted RoCE settings gives,
// through MergeRoCE, exactly the policy that appending every one gives,
// with at most two rules per device and port.
func FuzzMergeRoCE(f *testing.F) {
	f.Add([]byte("\x00\x00\x00\x01\x01\x10\x00\x01\x02\x00\x00\x05"))
	f.Add([]byte("\x01\x02\x01\x00\x00\x00\x01\x00\x00\x63\x01\x01\x00\x07"))
	f.Fuzz(func(t *testing.T, ops []byte) {
		devices := []string{"mlx5_0", "mlx5_1", "dev[1]"}
		modes := []RoCEMode{"", RoCEv1, RoCEv2}
		var merged, appended []RoCERule
		for len(ops) >= 3 {
			dev, port, mode := devices[int(ops[0])%3], int(ops[1])%4, modes[int(ops[2]/2)%3]
			var tos *int
			if ops[2]%2 == 1 || mode == "" {
				v := 0
				if len(ops) > 3 {
					v = int(ops[3])
				}
				tos = &v
			}
			ops = ops[3:]
			r := RoCERule{Selector: Selector{Device: Exact(dev)}, Port: port, Mode: mode, TOS: tos}
			merged = MergeRoCE(merged, r)
			appended = append(appended, r)
			count := map[string]int{}
			for _, m := range merged {
				count[m.Device.Name+"/"+string(rune('0'+m.Port))]++
			}
			for k, n := range count {
				if n > 2 {
					t.Fatalf("%d rules for %s: %+v", n, k, merged)
				}
			}
			got, want := Policy{RoCE: merged}, Policy{RoCE: appended}
			for _, d := range devices {
				for p := 1; p <= 3; p++ {
					g, w := got.RoCEFor(Target{Name: d}, p), want.RoCEFor(Target{Name: d}, p)
					if g.Mode != w.Mode || (g.TOS == nil) != (w.TOS == nil) || (g.TOS != nil && *g.TOS != *w.TOS) {
						t.Fatalf("%s/%d: merged %+v, appended %+v\nrules %+v", d, p, g, w, merged)
					}
				}
			}
		}
	})
}
