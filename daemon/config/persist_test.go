package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func intp(n int) *int { return &n }

func samplePersisted() Persisted {
	var p Persisted
	p.Netns = NetnsExclusive
	p.SetRoCE(Selector{Device: Exact("mlx5_0")}, 1, RoCEv2, intp(106))
	p.SetRoCE(Selector{Device: Exact("weird*[dev]")}, 0, RoCEv1, nil)
	p.SetRoCE(Selector{Device: Exact("mlx5_1"), GUID: "248a:0703:00aa:5f60"}, 2, "", intp(0))
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
	writePersisted(t, dir, want)
	got, err := LoadPersisted(files, dir)
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
	writePersisted(t, filepath.Join(root, DropInDir), want)
	p, err := load(root)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(withoutSources(Persisted{RoCE: p.RoCE, Links: p.Links, Netns: p.Netns.Mode}), withoutSources(want)) {
		t.Errorf("Load of the persisted drop-in: %+v", p)
	}
	if pos, _ := p.LinkSource("rxe0"); !IsPersistedFile(pos) || pos.Line == 0 {
		t.Errorf("rxe0 source %v is not a line of the persisted file", pos)
	}
}

func TestPersistedEscapedDeviceMatchesOnlyThatDevice(t *testing.T) {
	p := samplePersisted()
	rule := p.RoCE[1]
	if rule.Device != Exact("weird*[dev]") {
		t.Fatalf("Device = %+v, want the exact name", rule.Device)
	}
	// The file holds it escaped, and reads back as the same exact name.
	if text := string(p.Render()); !strings.Contains(text, `device = "weird\\*\\[dev\\]"`) {
		t.Errorf("rendered:\n%s", text)
	}
	if got := Glob(rule.Device.Text()); got != rule.Device {
		t.Errorf("Glob(Text()) = %+v, want %+v", got, rule.Device)
	}
	if !rule.Matches(Target{Name: "weird*[dev]"}) || rule.Matches(Target{Name: "weirdXd"}) {
		t.Errorf("escaped selector matches the wrong devices")
	}
}

func TestPersistedSetRoCEUpdatesInPlace(t *testing.T) {
	var p Persisted
	p.SetRoCE(Selector{Device: Exact("mlx5_0")}, 1, RoCEv2, nil)
	p.SetRoCE(Selector{Device: Exact("mlx5_0")}, 2, RoCEv1, nil)
	p.SetRoCE(Selector{Device: Exact("mlx5_0")}, 1, "", intp(32)) // keeps mode v2
	p.SetRoCE(Selector{Device: Exact("mlx5_0")}, 1, RoCEv1, nil)  // keeps tos 32
	p.SetRoCE(Selector{Device: Exact("mlx5_0")}, 1, "", nil)      // nothing to set
	want := []RoCERule{
		{Selector: Selector{Device: Glob("mlx5_0")}, Port: 1, Mode: RoCEv1, TOS: intp(32)},
		{Selector: Selector{Device: Glob("mlx5_0")}, Port: 2, Mode: RoCEv1},
	}
	if !reflect.DeepEqual(p.RoCE, want) {
		t.Errorf("RoCE = %+v, want %+v", p.RoCE, want)
	}
	tos := 7
	p.SetRoCE(Selector{Device: Exact("mlx5_0")}, 2, "", &tos)
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

func TestValidateRefusesInvalidSettings(t *testing.T) {
	bad := []Persisted{
		{Links: []Link{{Name: "rxe0", Type: "roce", Netdev: "eth0"}}},
		{Links: []Link{{Name: "rxe0", Type: LinkRXE, Netdev: "eth0"}, {Name: "rxe1", Type: LinkRXE, Netdev: "eth0"}}},
		{RoCE: []RoCERule{{Selector: Selector{Device: Glob("mlx5_0")}, TOS: intp(256)}}},
		{Netns: "private"},
	}
	for _, p := range bad {
		if err := p.Validate(); err == nil {
			t.Errorf("Validate accepted %+v", p)
		}
	}
}

func TestLoadPersistedRejectsForeignTables(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, PersistedName, PersistedHeader+"\n[[roce]]\ndevice = \"a\"\nmode = \"v2\"\n\n[memlock]\nsoft = \"1G\"\n")
	_, err := LoadPersisted(files, dir)
	want := PersistedPath(dir) + ":7: memlock: rdmad does not persist this table"
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("error = %v, want prefix %q", err, want)
	}
	if p, err := LoadPersisted(files, t.TempDir()); err != nil || !p.Empty() {
		t.Errorf("missing file = %+v, %v; want empty", p, err)
	}
}

func TestAdminLinkSources(t *testing.T) {
	root := t.TempDir()
	main := writeFile(t, root, MainFile, "\n[[link]]\nname = \"rxe0\"\ntype = \"rxe\"\nnetdev = \"eth0\"\n")
	drop := writeFile(t, root, DropInDir+"/50-more.toml", "[[link]]\nname = \"rxe0\"\ntype = \"rxe\"\nnetdev = \"eth1\"\n\n[[link]]\nname = \"rxe1\"\ntype = \"rxe\"\nnetdev = \"eth2\"\n")
	var p Persisted
	p.AddLink(Link{Name: "rxe0", Type: LinkRXE, Netdev: "eth3"})
	p.AddLink(Link{Name: "rxe2", Type: LinkRXE, Netdev: "eth4"})
	writePersisted(t, filepath.Join(root, DropInDir), p)
	got, err := AdminLinkSources(files, main, "rxe0")
	want := []Position{{File: main, Line: 2}, {File: drop, Line: 1}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("rxe0: %v, %v; want %v", got, err, want)
	}
	if got, err := AdminLinkSources(files, main, "rxe2"); err != nil || len(got) != 0 {
		t.Errorf("rxe2, only in rdmad's drop-in: %v, %v", got, err)
	}
	writeFile(t, root, DropInDir+"/60-bad.toml", "[[link]]\nname = 3\n")
	if _, err := AdminLinkSources(files, main, "rxe0"); err == nil || !strings.Contains(err.Error(), "60-bad.toml") {
		t.Errorf("broken drop-in: %v", err)
	}
}

// writePersisted writes rdmad's drop-in as the service does (validated,
// with its header); the writing itself is host.WriteManaged's, tested there
// and in the service.
func writePersisted(t *testing.T, dir string, p Persisted) {
	t.Helper()
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(PersistedPath(dir), p.Render(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestPersistedValidateRefusesNamesTOMLCannotHold(t *testing.T) {
	for _, p := range []Persisted{
		{Links: []Link{{Name: "rxe\xff", Type: LinkRXE, Netdev: "eth0"}}},
		{Links: []Link{{Name: "rxe0", Type: LinkRXE, Netdev: "eth\xfe"}}},
		{RoCE: []RoCERule{{Selector: Selector{Device: Glob("mlx\xc3")}, Port: 1, Mode: RoCEv2}}},
	} {
		if err := p.Validate(); err == nil || !strings.Contains(err.Error(), "UTF-8") {
			t.Errorf("Validate(%+v) = %v, want an error naming UTF-8", p, err)
		}
	}
	ok := Persisted{Links: []Link{{Name: "rxé0", Type: LinkRXE, Netdev: "eth0"}}}
	if err := ok.Validate(); err != nil {
		t.Errorf("Validate(UTF-8 name) = %v", err)
	}
}

// Who set each entry of rdmad's drop-in, and when, is the comment line
// above it, read back when the file loads (LoadPersisted and Load): a
// rewrite keeps the notes of the entries it does not change.
func TestPersistedNotes(t *testing.T) {
	at := time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC)
	root := Note{By: "root (uid 0), pid 4242 busctl, session-3.scope", At: at}
	alice := Note{By: "alice (uid 1000), pid 77 rdmactl\nmode = \"v1\"", At: at.Add(time.Hour)}
	p := samplePersisted()
	p.NetnsNote = root
	p.RoCE[0].Note = root
	p.RoCE[2].Note = alice
	p.Links[1].Note = root
	p.SetQoS(Selector{Device: Exact("mlx5_0")}, 1, TrustDSCP, []uint8{3}, true)
	p.QoS[0].Note = alice
	text := string(p.Render())
	for _, want := range []string{
		"\n# set by root (uid 0), pid 4242 busctl, session-3.scope, at 2026-03-01T08:00:00Z\n[netns]\n",
		"\n# set by root (uid 0), pid 4242 busctl, session-3.scope, at 2026-03-01T08:00:00Z\n[[roce]]\ndevice = \"mlx5_0\"\n",
		"\n# set by alice (uid 1000), pid 77 rdmactl?mode = \"v1\", at 2026-03-01T09:00:00Z\n[[roce]]\ndevice = \"mlx5_1\"\n",
		"\n[[roce]]\ndevice = \"weird\\\\*\\\\[dev\\\\]\"\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("rendered drop-in lacks %q:\n%s", want, text)
		}
	}
	dir := t.TempDir()
	writePersisted(t, dir, p)
	got, err := LoadPersisted(files, dir)
	if err != nil {
		t.Fatal(err)
	}
	alice.By = strings.ReplaceAll(alice.By, "\n", "?")
	if got.NetnsNote != root || got.RoCE[0].Note != root || !got.RoCE[1].Note.Empty() || got.RoCE[2].Note != alice ||
		!got.Links[0].Note.Empty() || got.Links[1].Note != root || got.QoS[0].Note != alice {
		t.Errorf("notes read back: netns %+v roce %+v %+v %+v links %+v %+v qos %+v", got.NetnsNote, got.RoCE[0].Note, got.RoCE[1].Note, got.RoCE[2].Note, got.Links[0].Note, got.Links[1].Note, got.QoS[0].Note)
	}
	if string(got.Render()) != text {
		t.Errorf("a rewrite of what was read changes the file:\n%s\nwas\n%s", got.Render(), text)
	}
	// Load carries them into the policy, for what rdmactl status shows.
	r := t.TempDir()
	writePersisted(t, filepath.Join(r, DropInDir), p)
	pol, err := load(r)
	if err != nil {
		t.Fatal(err)
	}
	if pol.Netns.Note != root || pol.RoCE[2].Note != alice || pol.QoS[0].Note != alice {
		t.Errorf("policy notes: netns %+v roce %+v qos %+v", pol.Netns.Note, pol.RoCE[2].Note, pol.QoS[0].Note)
	}
	// An administrator's file keeps no notes: a comment there is theirs.
	main := filepath.Join(r, MainFile)
	if err := os.WriteFile(main, []byte("# set by mallory, at 2026-03-01T08:00:00Z\n[[roce]]\ndevice = \"x\"\ntos = 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	pol, err = load(r)
	if err != nil {
		t.Fatal(err)
	}
	if !pol.RoCE[0].Note.Empty() {
		t.Errorf("a note read from %s: %+v", main, pol.RoCE[0].Note)
	}
}
