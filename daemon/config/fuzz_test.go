package config

import (
	"errors"
	"fmt"
	"github.com/rdmad/rdmad/daemon/config/value"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// FuzzLoad feeds arbitrary bytes to the per-file path of Load (TOML parse,
// line index, strict decode, merge). It must never panic; an accepted file
// must satisfy the Policy invariants; every problem must be a positioned
// *Error; and the device policy must survive Render -> Parse unchanged.
func FuzzLoad(f *testing.F) {
	if shipped, err := os.ReadFile("../../etc/rdma/rdmad.toml"); err == nil {
		f.Add(shipped)
	}
	f.Add(samplePersisted().Render())
	f.Add([]byte("[[roce]]\ndevice = \"mlx5_*\"\nport = 1\nmode = \"v2\"\ntos = 106\n"))
	f.Add([]byte("roce = [{ guid = \"0x248a070300aa5f60\", tos = 3 }, { pci = \"3b:00.*\", mode = \"v1\" }]\n"))
	f.Add([]byte("[memlock]\nsoft = \"64G\"\nhard = 'unlimited'\n[[link]]\nname = \"rxe0\"\ntype = \"rxe\"\nnetdev = \"eth0\"\n"))
	f.Add([]byte("a = \"\"\"\n[[roce]]\n\"\"\"\n[[vpi]]\ndriver = \"mlx4_core\"\ntype = \"eth\"\n"))
	f.Add([]byte("[[roce]]\ndevice = \"a\"\ntos = 300\n[x\n"))

	f.Fuzz(func(t *testing.T, data []byte) {
		indexLines(string(data)) // also on text the TOML parser rejects
		p, err := Parse("f.toml", data)
		if err != nil {
			for _, e := range flatten(err) {
				var ce *Error
				if !errors.As(e, &ce) || ce.Pos.File != "f.toml" {
					t.Fatalf("problem without position: %v", e)
				}
			}
			return
		}
		checkInvariants(t, p)
		want := Persisted{RoCE: p.RoCE, Links: p.Links, Netns: p.Netns.Mode}
		got, err := parsePersisted("p.toml", want.Render())
		if err != nil {
			t.Fatalf("accepted policy does not render back: %v\n%s", err, want.Render())
		}
		if !reflect.DeepEqual(withoutSources(got), withoutSources(want)) {
			t.Fatalf("render round trip changed the policy:\n got %+v\nwant %+v", got, want)
		}
	})
}

func flatten(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, flatten(e)...)
		}
		return out
	}
	return []error{err}
}

func checkInvariants(t *testing.T, p *Policy) {
	t.Helper()
	if !filepath.IsAbs(p.Modules.Directory) {
		t.Fatalf("modules directory %q", p.Modules.Directory)
	}
	if m := p.Memlock; m != nil && (m.Soft.above(m.Hard) || validGroupName(m.Group) != nil) {
		t.Fatalf("memlock %+v", m)
	}
	for _, r := range p.RoCE {
		if r.Selector == (Selector{}) || (r.Mode == "" && r.TOS == nil) || r.Port < 0 ||
			(r.TOS != nil && (*r.TOS < 0 || *r.TOS > 255)) || (r.Mode != "" && r.Mode.Kernel() == "") {
			t.Fatalf("roce rule %+v", r)
		}
	}
	seen := map[string]bool{}
	for _, l := range p.Links {
		if value.LinkName(l.Name) != nil || value.NetdevName(l.Netdev) != nil || (l.Type != LinkRXE && l.Type != LinkSIW) {
			t.Fatalf("link %+v", l)
		}
		if k := string(l.Type) + " " + l.Netdev; seen[k] || seen["name "+l.Name] {
			t.Fatalf("duplicate link %+v", l)
		} else {
			seen[k], seen["name "+l.Name] = true, true
		}
	}
	for _, r := range p.VPI {
		if r.Selector == (Selector{}) || (r.Type != VPIib && r.Type != VPIeth && r.Type != VPIauto) {
			t.Fatalf("vpi rule %+v", r)
		}
	}
}

// BenchmarkLoad loads a main file and 20 drop-ins, as at every reload.
func BenchmarkLoad(b *testing.B) {
	root := b.TempDir()
	shipped, err := os.ReadFile("../../etc/rdma/rdmad.toml")
	if err != nil {
		b.Fatal(err)
	}
	writeFile(b, root, MainFile, string(shipped))
	for i := 0; i < 20; i++ {
		var s strings.Builder
		fmt.Fprintf(&s, "# drop-in %d\n[memlock]\nsoft = \"%dG\"\n\n", i, i+1)
		for j := 0; j < 4; j++ {
			fmt.Fprintf(&s, "[[roce]]\ndevice = \"mlx5_%d\"\nport = %d\nmode = \"v2\"\ntos = %d\n\n", i, j+1, 4*j)
		}
		fmt.Fprintf(&s, "[[link]]\nname = \"rxe%d\"\ntype = \"rxe\"\nnetdev = \"veth%d\"\n", i, i)
		writeFile(b, root, fmt.Sprintf("%s/%02d-bench.toml", DropInDir, i), s.String())
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p, err := load(root)
		if err != nil {
			b.Fatal(err)
		}
		if len(p.Files) != 21 || len(p.RoCE) != 80 || len(p.Links) != 20 {
			b.Fatalf("loaded %d files, %d roce, %d links", len(p.Files), len(p.RoCE), len(p.Links))
		}
	}
}
