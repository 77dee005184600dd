package dbusapi

import (
	"fmt"
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
	for _, s := range []string{"16.35.2000", "16.35\xff\x00x\\y\n", `\x41`, `\\`, "é€😀", "\xe2\x82", "\x7f\x1b[31m", "\u009b31m", "a\u0085b\u00a0c", "\xc2", `\`, `\x`, `\xZZ`, "mlx5_0\u202e1", "\u2066x\u2069", "a\u2028b", "\ufeff", "\U000e0041"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		e := Escape(s)
		if !utf8.ValidString(e) {
			t.Fatalf("Escape(%q) = %q is not UTF-8", s, e)
		}
		for _, r := range e {
			if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == 0x2028 || r == 0x2029 {
				t.Fatalf("Escape(%q) = %q holds control or format character %U", s, e, r)
			}
		}
		if got := Unescape(e); got != s {
			t.Fatalf("Unescape(Escape(%q)) = %q", s, got)
		}
		plain := utf8.ValidString(s) && !strings.ContainsRune(s, '\\') && strings.IndexFunc(s, func(r rune) bool {
			return unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == 0x2028 || r == 0x2029
		}) < 0
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

// Unicode bidi and format controls reorder or hide what is displayed (a
// device named "mlx5_0\u202e1x" shows in Cockpit as another device's
// name), and line and paragraph separators break lines: they are escaped
// byte by byte, as a byte that is not UTF-8 is.
func TestEscapeBidiAndFormatControls(t *testing.T) {
	for _, r := range []rune{0x202a, 0x202b, 0x202c, 0x202d, 0x202e, 0x2066, 0x2067, 0x2068, 0x2069,
		0x200e, 0x200f, 0x2028, 0x2029, 0x200b, 0x061c, 0xfeff} {
		s := "mlx5_0" + string(r) + "1"
		e := Escape(s)
		var want strings.Builder
		want.WriteString("mlx5_0")
		for _, c := range []byte(string(r)) {
			fmt.Fprintf(&want, `\x%02x`, c)
		}
		want.WriteString("1")
		if e != want.String() {
			t.Errorf("Escape(%q) = %q, want %q", s, e, want.String())
		}
		if Unescape(e) != s {
			t.Errorf("Unescape(Escape(%q)) = %q", s, Unescape(e))
		}
		m := Device{Name: s}
		EscapeStrings(&m)
		if m.Name != want.String() {
			t.Errorf("EscapeStrings: %q", m.Name)
		}
	}
	for _, s := range []string{"é€😀", "ensé", "网卡0", "a\u00a0b"} {
		if Escape(s) != s {
			t.Errorf("Escape(%q) = %q: printable text must pass unchanged", s, Escape(s))
		}
	}
}
