package config

import (
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestAPIChangesDecodes(t *testing.T) {
	for _, tc := range []struct {
		toml string
		want APIChanges
		line int // of changes; 0: not set
	}{
		{"", APIChangesAll, 0},
		{"[api]\n", APIChangesAll, 0},
		{"[api]\nchanges = \"all\"\n", APIChangesAll, 2},
		{"# site policy\n[api]\nchanges = \"runtime\"\n", APIChangesRuntime, 3},
		{"[api]\n\nchanges = \"none\"\n", APIChangesNone, 3},
	} {
		p, err := Parse("/etc/rdma/rdmad.toml", []byte(tc.toml))
		if err != nil {
			t.Fatalf("%q: %v", tc.toml, err)
		}
		if p.API.Changes != tc.want || p.API.Source.Line != tc.line {
			t.Errorf("%q: changes %q at %v, want %q at line %d", tc.toml, p.API.Changes, p.API.Source, tc.want, tc.line)
		}
	}
}

func TestAPIChangesRejectsBadInput(t *testing.T) {
	const file = "/etc/rdma/rdmad.d/50-site.toml"
	for _, tc := range []struct {
		toml string
		line int
		want []string
	}{
		{"[api]\nchanges = \"some\"\n", 2, []string{"api.changes", `"some" is not an [api] changes value`, `"all", "runtime" or "none"`}},
		{"[api]\nchanges = false\n", 2, []string{"api.changes", "must be a string"}},
		{"[api]\nchange = \"none\"\n", 2, []string{"api.change: unknown key", "[api] accepts changes"}},
		{"[[api]]\nchanges = \"none\"\n", 1, []string{"api: must be a single table"}},
		{"api = \"none\"\n", 1, []string{"api: must be a table"}},
	} {
		_, err := Parse(file, []byte(tc.toml))
		var ce *Error
		if !errors.As(err, &ce) {
			t.Errorf("%q: error %v, want a config error", tc.toml, err)
			continue
		}
		if ce.Pos.File != file || ce.Pos.Line != tc.line {
			t.Errorf("%q: at %v, want %s:%d", tc.toml, ce.Pos, file, tc.line)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%q: %q lacks %q", tc.toml, err, w)
			}
		}
	}
}

// A later file's changes wins, and every [api] table is listed for
// doctor, including one that sets nothing.
func TestAPIAcrossFiles(t *testing.T) {
	root := t.TempDir()
	main := writeFile(t, root, MainFile, "[modules]\nenable = false\n\n[api]\nchanges = \"none\"\n")
	site := writeFile(t, root, filepath.Join(DropInDir, "50-site.toml"), "[api]\nchanges = \"runtime\"\n")
	empty := writeFile(t, root, filepath.Join(DropInDir, "60-empty.toml"), "# nothing to say\n[api]\n")
	p, err := load(root)
	if err != nil {
		t.Fatal(err)
	}
	if p.API.Changes != APIChangesRuntime || p.API.Source != (Position{site, 2}) {
		t.Errorf("changes %q at %v, want runtime at %s:2", p.API.Changes, p.API.Source, site)
	}
	want := []Position{{main, 4}, {site, 1}, {empty, 2}}
	if !reflect.DeepEqual(p.API.Tables, want) {
		t.Errorf("Tables = %v, want %v", p.API.Tables, want)
	}
}

func TestAPIAllows(t *testing.T) {
	src := Position{File: "/etc/rdma/rdmad.d/50-site.toml", Line: 7}
	for _, tc := range []struct {
		changes  APIChanges
		persist  bool
		allowed  bool
		sentence string
	}{
		{"", false, true, ""},
		{"", true, true, ""},
		{APIChangesAll, true, true, ""},
		{APIChangesRuntime, false, true, ""},
		{APIChangesRuntime, true, false, `50-site.toml:7: [api] changes = "runtime": changes over D-Bus are not persisted`},
		{APIChangesNone, false, false, `50-site.toml:7: [api] changes = "none": this host takes no declarations over D-Bus`},
		{APIChangesNone, true, false, `[api] changes = "none"`},
	} {
		err := API{Changes: tc.changes, Source: src}.Allows(tc.persist)
		var na *NotAllowedError
		switch {
		case tc.allowed && err != nil:
			t.Errorf("%q persist=%v: %v, want allowed", tc.changes, tc.persist, err)
		case !tc.allowed && !errors.As(err, &na):
			t.Errorf("%q persist=%v: %v, want a NotAllowedError", tc.changes, tc.persist, err)
		case !tc.allowed && !strings.Contains(err.Error(), tc.sentence):
			t.Errorf("%q persist=%v: %q lacks %q", tc.changes, tc.persist, err, tc.sentence)
		}
	}
}

// A fix proposes the rdmactl command only where [api] changes lets the
// call through; elsewhere it proposes the file and says which [api] line
// refuses the command.
func TestAPIDeclaring(t *testing.T) {
	src := Position{File: "/etc/rdma/rdmad.d/50-site.toml", Line: 7}
	const cmd, inFile = "rdmactl roce set mlx5_0 --tos 106 --persist", "tos = 106 in /etc/rdma/rdmad.toml"
	for _, tc := range []struct {
		changes APIChanges
		persist bool
		want    string
	}{
		{"", true, cmd},
		{APIChangesRuntime, false, cmd},
		{APIChangesRuntime, true, inFile + ` (/etc/rdma/rdmad.d/50-site.toml:7: [api] changes = "runtime" persists no change made over D-Bus)`},
		{APIChangesNone, false, inFile + ` (/etc/rdma/rdmad.d/50-site.toml:7: [api] changes = "none" takes no declaration over D-Bus)`},
	} {
		if got := (API{Changes: tc.changes, Source: src}).Declaring(cmd, tc.persist, inFile); got != tc.want {
			t.Errorf("%q persist=%v: %q, want %q", tc.changes, tc.persist, got, tc.want)
		}
	}
}

// rdmad's own drop-in holds what D-Bus declared, never [api]: a hand-edited
// one is refused before rdmad rewrites it.
func TestPersistedRefusesAPI(t *testing.T) {
	_, err := parsePersisted("/etc/rdma/rdmad.d/"+PersistedName, []byte("[api]\nchanges = \"all\"\n"))
	if err == nil || !strings.Contains(err.Error(), "api: rdmad does not persist this table") {
		t.Errorf("err = %v", err)
	}
}
