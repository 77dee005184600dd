package dbusapi

import (
	"reflect"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Escape makes a string read from the host publishable: D-Bus strings must
// be valid UTF-8 without NUL, and one bad byte in a firmware version or a
// device name must not make GetManagedObjects fail for every client. Valid
// printable text passes unchanged; a backslash becomes `\\`, and every byte
// that is not valid UTF-8, and every byte of a character Hidden reports,
// becomes `\xNN`, so nothing is lost: Unescape gives back the original
// bytes.
func Escape(s string) string {
	if isPlain(s) {
		return s
	}
	const hex = "0123456789abcdef"
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == '\\':
			b.WriteString(`\\`)
		case (r == utf8.RuneError && size == 1) || Hidden(r):
			for j := i; j < i+size; j++ {
				c := s[j]
				b.WriteString(`\x`)
				b.WriteByte(hex[c>>4])
				b.WriteByte(hex[c&0xf])
			}
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// Hidden reports whether a character acts on a display instead of showing
// as itself, so nothing rdmad or rdmactl prints may hold it raw: control
// characters (C0, DEL, and C1, U+0080..U+009F, whose CSI a terminal acts
// on as on the C0 one), Unicode format characters (category Cf: the bidi
// embeddings, overrides and isolates U+202A..U+202E and U+2066..U+2069,
// the marks U+200E/U+200F, zero-width characters, U+FEFF; with them a
// device name displays as another one) and the line and paragraph
// separators U+2028/U+2029.
func Hidden(r rune) bool {
	switch {
	case r < 0x20 || (r >= 0x7f && r <= 0x9f):
		return true
	case r < 0xad:
		return false
	case r == 0x2028 || r == 0x2029:
		return true
	}
	return unicode.Is(unicode.Cf, r)
}

// isPlain reports whether s needs no escaping: the fast path of nearly
// every published string.
func isPlain(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c == 0x7f || c == '\\' {
			return false
		}
		if c >= 0x80 {
			return plainRunes(s[i:])
		}
	}
	return true
}

func plainRunes(s string) bool {
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && size == 1) || r == '\\' || Hidden(r) {
			return false
		}
		i += size
	}
	return true
}

// Unescape reverses Escape.
func Unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch {
		case s[i+1] == '\\':
			b.WriteByte('\\')
			i++
		case s[i+1] == 'x' && i+3 < len(s) && isHex(s[i+2]) && isHex(s[i+3]):
			b.WriteByte(unhex(s[i+2])<<4 | unhex(s[i+3]))
			i += 3
		default:
			b.WriteByte(s[i])
		}
	}
	return b.String()
}

func isHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

func unhex(c byte) byte {
	switch {
	case c >= 'a':
		return c - 'a' + 10
	case c >= 'A':
		return c - 'A' + 10
	}
	return c - '0'
}

// EscapeStrings escapes every string reachable through pointers, structs,
// slices and arrays from v: the published model goes through it whole, so no
// field read from the host can be forgotten. Strings in v's own fields are
// replaced in place, but a slice is copied before its elements are
// escaped: a model shares slices with the state it was built from (the
// policy's file names, a device's netdevs), and escaping those in place
// would escape them again on every call. A slice with nothing to escape is
// left as it is, shared, not copied (the GID types of 2,048 ports, copied
// each, held 0.7 MB). Map entries are not settable and are left alone; the
// published model has no maps.
func EscapeStrings(v any) {
	escapeValue(reflect.ValueOf(v))
}

func escapeValue(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			escapeValue(v.Elem())
		}
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				escapeValue(v.Field(i))
			}
		}
	case reflect.Slice, reflect.Array:
		if v.Kind() == reflect.Slice && v.Len() > 0 && v.CanSet() {
			if plainValue(v) {
				return
			}
			v.Set(reflect.AppendSlice(reflect.MakeSlice(v.Type(), 0, v.Len()), v))
		}
		for i := 0; i < v.Len(); i++ {
			escapeValue(v.Index(i))
		}
	case reflect.String:
		if v.CanSet() {
			if s := v.String(); !isPlain(s) {
				v.SetString(Escape(s))
			}
		}
	}
}

// plainValue reports whether every string escapeValue would reach from v
// is plain already.
func plainValue(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		return v.IsNil() || plainValue(v.Elem())
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() && !plainValue(v.Field(i)) {
				return false
			}
		}
	case reflect.Slice, reflect.Array:
		for i := 0; i < v.Len(); i++ {
			if !plainValue(v.Index(i)) {
				return false
			}
		}
	case reflect.String:
		return isPlain(v.String())
	}
	return true
}
