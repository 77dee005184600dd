package dbusapi

import (
	"bytes"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/godbus/dbus/v5"
)

func TestEscapePathElementLikeSystemd(t *testing.T) {
	for in, want := range map[string]string{
		"mlx5_0": "mlx5_5f0",
		"rxe0":   "rxe0",
		"":       "_",
		"a-b.c":  "a_2db_2ec",
		"é":      "_c3_a9",
	} {
		got := EscapePathElement(in)
		if got != want {
			t.Errorf("EscapePathElement(%q) = %q, want %q", in, got, want)
		}
		if !dbus.ObjectPath("/x/" + got).IsValid() {
			t.Errorf("%q is not a valid path element", got)
		}
		back, err := UnescapePathElement(got)
		if err != nil || back != in {
			t.Errorf("UnescapePathElement(%q) = %q, %v", got, back, err)
		}
	}
	if _, err := UnescapePathElement("a_4"); err == nil {
		t.Error("truncated escape accepted")
	}
}

func TestPropsRoundTrip(t *testing.T) {
	in := Port{Device: "mlx5_0", Number: 1, RoCETOS: -1, GIDTypes: []string{"RoCE v2"}}
	props := ToProps(in)
	if v := props["Netdevs"]; v.Signature().String() != "as" {
		t.Errorf("nil slice published as %v", v.Signature())
	}
	var out Port
	if err := FromProps(props, &out); err != nil {
		t.Fatal(err)
	}
	if out.Device != "mlx5_0" || out.Number != 1 || out.RoCETOS != -1 || len(out.GIDTypes) != 1 {
		t.Errorf("round trip: %+v", out)
	}
	props["Number"] = dbus.MakeVariant("one")
	if err := FromProps(props, &out); err == nil {
		t.Error("wrong property type accepted")
	}
}

func TestDocsUpToDate(t *testing.T) {
	have, err := os.ReadFile("../docs/dbus-api.md")
	if err != nil {
		t.Fatalf("%v (run go generate ./dbusapi)", err)
	}
	if !bytes.Equal(have, TheContract().Markdown()) {
		t.Error("docs/dbus-api.md is stale: run go generate ./dbusapi")
	}
}

func TestMarkdownSectionHeadings(t *testing.T) {
	md := string(TheContract().Markdown())
	for _, h := range []string{"\n### Methods\n", "\n### Properties\n"} {
		if !strings.Contains(md, h) {
			t.Errorf("reference lacks heading %q", strings.TrimSpace(h))
		}
	}
	if strings.Contains(md, "Propertys") {
		t.Error(`reference says "Propertys"`)
	}
}

// C1 controls (CSI U+009B among them) are escaped byte by byte, as C0 ones
// are: a terminal showing `rdmactl status` must not act on them.
func TestEscapeC1Controls(t *testing.T) {
	for in, want := range map[string]string{
		"fw\u009b31m":  `fw\xc2\x9b31m`,
		"a\u0085b":     `a\xc2\x85b`,
		"nbsp\u00a0ok": "nbsp\u00a0ok",
		"\u0080":       `\xc2\x80`,
	} {
		if got := Escape(in); got != want {
			t.Errorf("Escape(%q) = %q, want %q", in, got, want)
		}
		if got := Unescape(Escape(in)); got != in {
			t.Errorf("Unescape(Escape(%q)) = %q", in, got)
		}
	}
}

// A model shares slices with the state it was built from; escaping it must
// leave that state alone, or every call escapes the same strings again
// (`\` doubling on each Describe until the daemon runs out of memory).
func TestEscapeStringsLeavesSharedSlicesAlone(t *testing.T) {
	shared := []string{`50-a\b.toml`, "eth\x01"}
	type model struct{ Files []string }
	for i := 0; i < 3; i++ {
		m := model{Files: shared}
		EscapeStrings(&m)
		if want := []string{`50-a\\b.toml`, `eth\x01`}; !reflect.DeepEqual(m.Files, want) {
			t.Fatalf("call %d: escaped %q, want %q", i, m.Files, want)
		}
	}
	if want := []string{`50-a\b.toml`, "eth\x01"}; !reflect.DeepEqual(shared, want) {
		t.Fatalf("the shared slice was changed to %q", shared)
	}
}

// A slice with nothing to escape stays the one the model shares, not a
// copy: a model of every port of a large host would otherwise copy each
// port's GID types at every conversion. One string to escape anywhere in
// it, even in a struct in it, copies it.
func TestEscapeStringsCopiesOnlyWhatItEscapes(t *testing.T) {
	type setting struct{ Name, Why string }
	type model struct {
		Types    []string
		Settings []setting
	}
	types := []string{"RoCE v2", "", "IB/RoCE v1"}
	plain := []setting{{"roce_tos", ""}}
	m := model{Types: types, Settings: plain}
	EscapeStrings(&m)
	if &m.Types[0] != &types[0] || &m.Settings[0] != &plain[0] {
		t.Error("a slice with nothing to escape was copied")
	}
	dirty := []setting{{"roce_tos", "eth\x01 gone"}}
	m = model{Settings: dirty}
	EscapeStrings(&m)
	if &m.Settings[0] == &dirty[0] || m.Settings[0].Why != `eth\x01 gone` || dirty[0].Why != "eth\x01 gone" {
		t.Errorf("escaped %+v from %+v", m.Settings, dirty)
	}
}
