package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
)

func intp(n int) *int { return &n }

func samplePersisted() Persisted {
	var p Persisted
	p.Netns = NetnsExclusive
	p.SetRoCE(Selector{Device: "mlx5_0"}, 1, RoCEv2, intp(106))
	p.SetRoCE(Selector{Device: "weird*[dev]"}, 0, RoCEv1, nil)
	p.SetRoCE(Selector{Device: "mlx5_1", GUID: "248a:0703:00aa:5f60"}, 2, "", intp(0))
	p.AddLink(Link{Name: "rxe0", Type: LinkRXE, Netdev: "eth1"})
	p.AddLink(Link{Name: "siw0", Type: LinkSIW, Netdev: "eth1"})
	return p
}

func withoutSources(p Persisted) Persisted {
	q := Persisted{Netns: p.Netns}
	for _, r := range p.RoCE {
		r.Source = Position{}
		q.RoCE = append(q.RoCE, r)
	}
	for _, l := range p.Links {
		l.Source = Position{}
		q.Links = append(q.Links, l)
	}
	return q
}

func TestPersistedRoundTrip(t *testing.T) {
	dir := t.TempDir()
	want := samplePersisted()
	if err := WritePersisted(dir, want); err != nil {
		t.Fatal(err)
	}
	got, err := LoadPersisted(dir)
	if err != nil {
		t.Fatalf("LoadPersisted: %v\n%s", err, want.Render())
	}
	if !reflect.DeepEqual(withoutSources(got), withoutSources(want)) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, want)
	}
	if !strings.HasPrefix(string(want.Render()), PersistedHeader) {
		t.Errorf("rendered file lacks the header:\n%s", want.Render())
	}
	// Through Load as well: the same entries, sourced from the persisted file.
	root := t.TempDir()
	if err := WritePersisted(filepath.Join(root, DropInDir), want); err != nil {
		t.Fatal(err)
	}
	p, err := Load(root, "")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(withoutSources(Persisted{RoCE: p.RoCE, Links: p.Links, Netns: p.Netns.Mode}), withoutSources(want)) {
		t.Errorf("Load of the persisted drop-in: %+v", p)
	}
	if pos, _ := p.LinkSource("rxe0"); !IsPersistedFile(pos) || pos.Line == 0 {
		t.Errorf("rxe0 source %v is not a line of the persisted file", pos)
	}
	if err := p.CheckLinkRemovable("rxe0"); err != nil {
		t.Errorf("persisted link not removable: %v", err)
	}
}

func TestPersistedEscapedDeviceMatchesOnlyThatDevice(t *testing.T) {
	p := samplePersisted()
	rule := p.RoCE[1]
	if rule.Device != `weird\*\[dev\]` {
		t.Fatalf("Device = %q, want glob characters escaped", rule.Device)
	}
	if !rule.Matches(Target{Name: "weird*[dev]"}) || rule.Matches(Target{Name: "weirdXd"}) {
		t.Errorf("escaped selector matches the wrong devices")
	}
}

func TestPersistedSetRoCEUpdatesInPlace(t *testing.T) {
	var p Persisted
	p.SetRoCE(Selector{Device: "mlx5_0"}, 1, RoCEv2, nil)
	p.SetRoCE(Selector{Device: "mlx5_0"}, 2, RoCEv1, nil)
	p.SetRoCE(Selector{Device: "mlx5_0"}, 1, "", intp(32)) // keeps mode v2
	p.SetRoCE(Selector{Device: "mlx5_0"}, 1, RoCEv1, nil)  // keeps tos 32
	p.SetRoCE(Selector{Device: "mlx5_0"}, 1, "", nil)      // nothing to set
	want := []RoCERule{
		{Selector: Selector{Device: "mlx5_0"}, Port: 1, Mode: RoCEv1, TOS: intp(32)},
		{Selector: Selector{Device: "mlx5_0"}, Port: 2, Mode: RoCEv1},
	}
	if !reflect.DeepEqual(p.RoCE, want) {
		t.Errorf("RoCE = %+v, want %+v", p.RoCE, want)
	}
	tos := 7
	p.SetRoCE(Selector{Device: "mlx5_0"}, 2, "", &tos)
	tos = 8 // the caller's variable must not alias the stored value
	if *p.RoCE[1].TOS != 7 {
		t.Errorf("stored TOS follows the caller's variable: %d", *p.RoCE[1].TOS)
	}
}

func TestPersistedLinks(t *testing.T) {
	var p Persisted
	p.AddLink(Link{Name: "rxe0", Type: LinkRXE, Netdev: "eth0", Source: Position{"x", 3}})
	p.AddLink(Link{Name: "rxe1", Type: LinkRXE, Netdev: "eth1"})
	p.AddLink(Link{Name: "rxe0", Type: LinkRXE, Netdev: "eth2"})
	want := []Link{{Name: "rxe0", Type: LinkRXE, Netdev: "eth2"}, {Name: "rxe1", Type: LinkRXE, Netdev: "eth1"}}
	if !reflect.DeepEqual(p.Links, want) {
		t.Errorf("Links = %+v", p.Links)
	}
	if !p.RemoveLink("rxe0") || p.RemoveLink("rxe0") || len(p.Links) != 1 || p.Links[0].Name != "rxe1" {
		t.Errorf("RemoveLink: %+v", p.Links)
	}
}

func inode(t *testing.T, name string) uint64 {
	t.Helper()
	st, err := os.Stat(name)
	if err != nil {
		t.Fatal(err)
	}
	return st.Sys().(*syscall.Stat_t).Ino
}

func TestWritePersistedSkipsUnchangedAndReplacesAtomically(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "rdmad.d") // created on first write
	name := PersistedPath(dir)

	if err := WritePersisted(dir, Persisted{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(name); !os.IsNotExist(err) {
		t.Fatalf("an empty Persisted created %s (err %v)", name, err)
	}

	p := samplePersisted()
	if err := WritePersisted(dir, p); err != nil {
		t.Fatal(err)
	}
	first := inode(t, name)
	if err := WritePersisted(dir, samplePersisted()); err != nil {
		t.Fatal(err)
	}
	if inode(t, name) != first {
		t.Errorf("unchanged content was rewritten")
	}

	p.SetRoCE(Selector{Device: "mlx5_0"}, 1, "", intp(0))
	if err := WritePersisted(dir, p); err != nil {
		t.Fatal(err)
	}
	if inode(t, name) == first {
		t.Errorf("changed content was written in place, not renamed over")
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Errorf("temporary files left behind: %v", ents)
	}
	st, _ := os.Stat(name)
	if st.Mode().Perm() != 0o644 {
		t.Errorf("mode = %v, want 0644", st.Mode().Perm())
	}
}

func TestWritePersistedRefusesInvalidSettings(t *testing.T) {
	dir := t.TempDir()
	bad := []Persisted{
		{Links: []Link{{Name: "rxe0", Type: "roce", Netdev: "eth0"}}},
		{Links: []Link{{Name: "rxe0", Type: LinkRXE, Netdev: "eth0"}, {Name: "rxe1", Type: LinkRXE, Netdev: "eth0"}}},
		{RoCE: []RoCERule{{Selector: Selector{Device: "mlx5_0"}, TOS: intp(256)}}},
		{Netns: "private"},
	}
	for _, p := range bad {
		if err := WritePersisted(dir, p); err == nil {
			t.Errorf("WritePersisted accepted %+v", p)
		}
	}
	if _, err := os.Stat(PersistedPath(dir)); !os.IsNotExist(err) {
		t.Errorf("an invalid Persisted was written")
	}
}

func TestLoadPersistedRejectsForeignTables(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, PersistedName, PersistedHeader+"\n[[roce]]\ndevice = \"a\"\nmode = \"v2\"\n\n[memlock]\nsoft = \"1G\"\n")
	_, err := LoadPersisted(dir)
	want := PersistedPath(dir) + ":7: memlock: rdmad does not persist this table"
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("error = %v, want prefix %q", err, want)
	}
	if p, err := LoadPersisted(t.TempDir()); err != nil || !p.Empty() {
		t.Errorf("missing file = %+v, %v; want empty", p, err)
	}
}

func TestCheckLinkRemovableNamesAdminFile(t *testing.T) {
	root := t.TempDir()
	main := writeFile(t, root, MainFile, "\n[[link]]\nname = \"rxe0\"\ntype = \"rxe\"\nnetdev = \"eth0\"\n")
	p, err := Load(root, "")
	if err != nil {
		t.Fatal(err)
	}
	err = p.CheckLinkRemovable("rxe0")
	if err == nil || !strings.Contains(err.Error(), main+":2") {
		t.Errorf("CheckLinkRemovable = %v, want it to name %s:2", err, main)
	}
	if err := p.CheckLinkRemovable("nope"); err != nil {
		t.Errorf("unknown link: %v", err)
	}
}

// rdmad never rewrites, nor removes, a file it does not own, even one with
// its drop-in's name.
func TestWritePersistedRefusesForeignFile(t *testing.T) {
	for _, content := range []string{
		"# mine\n[[roce]]\ndevice = \"mlx5_0\"\ntos = 3\n",
		"",
	} {
		dir := t.TempDir()
		name := writeFile(t, dir, PersistedName, content)
		for _, p := range []Persisted{samplePersisted(), {}} {
			err := WritePersisted(dir, p)
			if err == nil || !strings.Contains(err.Error(), name) || !errors.Is(err, ErrNotOwned) {
				t.Errorf("WritePersisted over a foreign file = %v, want an error naming %s", err, name)
			}
			b, err := os.ReadFile(name)
			if err != nil || string(b) != content {
				t.Errorf("foreign file changed: %q, %v", b, err)
			}
		}
	}
}

// Persisting nothing removes rdmad's own drop-in rather than leaving an
// empty file behind.
func TestWritePersistedEmptyRemovesOwnFile(t *testing.T) {
	dir := t.TempDir()
	if err := WritePersisted(dir, samplePersisted()); err != nil {
		t.Fatal(err)
	}
	if err := WritePersisted(dir, Persisted{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(PersistedPath(dir)); !os.IsNotExist(err) {
		t.Errorf("empty Persisted left %s (%v)", PersistedPath(dir), err)
	}
}

func TestAdminLinkSources(t *testing.T) {
	root := t.TempDir()
	main := writeFile(t, root, MainFile, "\n[[link]]\nname = \"rxe0\"\ntype = \"rxe\"\nnetdev = \"eth0\"\n")
	drop := writeFile(t, root, DropInDir+"/50-more.toml", "[[link]]\nname = \"rxe0\"\ntype = \"rxe\"\nnetdev = \"eth1\"\n\n[[link]]\nname = \"rxe1\"\ntype = \"rxe\"\nnetdev = \"eth2\"\n")
	var p Persisted
	p.AddLink(Link{Name: "rxe0", Type: LinkRXE, Netdev: "eth3"})
	p.AddLink(Link{Name: "rxe2", Type: LinkRXE, Netdev: "eth4"})
	if err := WritePersisted(filepath.Join(root, DropInDir), p); err != nil {
		t.Fatal(err)
	}
	got, err := AdminLinkSources(main, "rxe0")
	want := []Position{{File: main, Line: 2}, {File: drop, Line: 1}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("rxe0: %v, %v; want %v", got, err, want)
	}
	if got, err := AdminLinkSources(main, "rxe2"); err != nil || len(got) != 0 {
		t.Errorf("rxe2, only in rdmad's drop-in: %v, %v", got, err)
	}
	writeFile(t, root, DropInDir+"/60-bad.toml", "[[link]]\nname = 3\n")
	if _, err := AdminLinkSources(main, "rxe0"); err == nil || !strings.Contains(err.Error(), "60-bad.toml") {
		t.Errorf("broken drop-in: %v", err)
	}
}
