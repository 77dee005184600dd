package dbusapi

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/godbus/dbus/v5"
)

// FuzzEscape: whatever bytes the host hands over, the published string is
// valid UTF-8 without NUL or other control characters, C1 included (D-Bus and JSON
// readers take it), printable text passes unchanged, and Unescape gives
// back the original bytes. EscapeStrings does the same inside a model.
func FuzzEscape(f *testing.F) {
	for _, s := range []string{"16.35.2000", "16.35\xff\x00x\\y\n", `\x41`, `\\`, "é€😀", "\xe2\x82", "\x7f\x1b[31m", "\u009b31m", "a\u0085b\u00a0c", "\xc2", `\`, `\x`, `\xZZ`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		e := Escape(s)
		if !utf8.ValidString(e) {
			t.Fatalf("Escape(%q) = %q is not UTF-8", s, e)
		}
		for _, r := range e {
			if unicode.IsControl(r) {
				t.Fatalf("Escape(%q) = %q holds control character %U", s, e, r)
			}
		}
		if got := Unescape(e); got != s {
			t.Fatalf("Unescape(Escape(%q)) = %q", s, got)
		}
		plain := utf8.ValidString(s) && !strings.ContainsRune(s, '\\') && strings.IndexFunc(s, unicode.IsControl) < 0
		if plain != (e == s) {
			t.Fatalf("Escape(%q) = %q: printable text must pass unchanged, anything else not", s, e)
		}
		m := Port{Device: s, State: s, GIDTypes: []string{s}}
		EscapeStrings(&m)
		if m.Device != e || m.State != e || m.GIDTypes[0] != e {
			t.Fatalf("EscapeStrings gave %+v, want %q everywhere", m, e)
		}
	})
}

// FuzzPathElement: every device name gives a valid object path, one per
// name (UnescapePathElement gives the name back).
func FuzzPathElement(f *testing.F) {
	for _, s := range []string{"mlx5_0", "", "_", "vf\xff \n*[..]$x", "../x", "a/b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		p := DevicePath(name)
		if !p.IsValid() {
			t.Fatalf("DevicePath(%q) = %q is not a valid object path", name, p)
		}
		if pp := PortPath(name, 1); !dbus.ObjectPath(pp).IsValid() {
			t.Fatalf("PortPath(%q) = %q", name, pp)
		}
		elem := strings.TrimPrefix(string(p), DevicesPath+"/")
		if got, err := UnescapePathElement(elem); err != nil || got != name {
			t.Fatalf("UnescapePathElement(%q) = %q, %v; want %q", elem, got, err, name)
		}
	})
}
