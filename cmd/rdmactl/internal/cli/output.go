package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/rdmad/rdmad/dbusapi"
)

// rdmactl trusts nothing it prints (anything can own org.rdmad1 on a
// private bus; a future bug; a compromised daemon): every string from the
// bus has the characters that act on a display escaped before it reaches a
// terminal (dbusapi.Hidden: control characters, bidi and other format
// characters, line and paragraph separators).
//
// Text: those characters and bytes that are not UTF-8 become \xNN, as
// rdmad's dbusapi.Escape writes them. A backslash is left as is: rdmad
// already publishes names escaped (a backslash doubled), and doubling it
// again would print a name that cannot be pasted back.
//
// JSON: encoding/json writes C0 as \u00NN; DEL, C1 and the other hidden
// characters are written \u escapes too, and bytes that are not UTF-8
// \ufffd.

// escapeText escapes the hidden characters of s.
func escapeText(s string) string {
	if plainText(s) {
		return s
	}
	const hex = "0123456789abcdef"
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && size == 1) || dbusapi.Hidden(r) {
			for j := i; j < i+size; j++ {
				b.WriteString(`\x`)
				b.WriteByte(hex[s[j]>>4])
				b.WriteByte(hex[s[j]&0xf])
			}
		} else {
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

func plainText(s string) bool {
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && size == 1) || dbusapi.Hidden(r) {
			return false
		}
		i += size
	}
	return true
}

// escaped returns a copy of *v with every string reachable through
// structs, pointers and slices escaped for a terminal; v itself and the
// slices it shares are not changed.
func escaped[T any](v T) T {
	rv := reflect.New(reflect.TypeOf(&v).Elem()).Elem()
	rv.Set(reflect.ValueOf(&v).Elem())
	escapeValue(rv)
	return rv.Interface().(T)
}

func escapeValue(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() && v.CanSet() {
			c := reflect.New(v.Elem().Type())
			c.Elem().Set(v.Elem())
			v.Set(c)
			escapeValue(c.Elem())
		}
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				escapeValue(v.Field(i))
			}
		}
	case reflect.Slice:
		if v.Len() > 0 && v.CanSet() {
			v.Set(reflect.AppendSlice(reflect.MakeSlice(v.Type(), 0, v.Len()), v))
			for i := 0; i < v.Len(); i++ {
				escapeValue(v.Index(i))
			}
		}
	case reflect.String:
		if v.CanSet() {
			v.SetString(escapeText(v.String()))
		}
	}
}

// escapeJSON rewrites the raw hidden characters (DEL, C1, format
// characters and separators) and the bytes that are not UTF-8 inside the strings of a valid JSON document as \u escapes;
// everything else is kept byte for byte (rdmad's documents print as rdmad
// wrote them).
func escapeJSON(doc []byte) []byte {
	var b bytes.Buffer
	inString := false
	for i := 0; i < len(doc); {
		c := doc[i]
		if !inString {
			if c == '"' {
				inString = true
			}
			b.WriteByte(c)
			i++
			continue
		}
		switch {
		case c == '\\' && i+1 < len(doc):
			b.Write(doc[i : i+2])
			i += 2
			continue
		case c == '"':
			inString = false
		case c < 0x20 || c == 0x7f:
			fmt.Fprintf(&b, `\u%04x`, c)
			i++
			continue
		case c >= 0x80:
			r, size := utf8.DecodeRune(doc[i:])
			switch {
			case r == utf8.RuneError && size == 1:
				b.WriteString(`\ufffd`)
			case dbusapi.Hidden(r) && r > 0xffff:
				r1, r2 := utf16.EncodeRune(r)
				fmt.Fprintf(&b, `\u%04x\u%04x`, r1, r2)
			case dbusapi.Hidden(r):
				fmt.Fprintf(&b, `\u%04x`, r)
			default:
				b.Write(doc[i : i+size])
			}
			i += size
			continue
		}
		b.WriteByte(c)
		i++
	}
	return b.Bytes()
}

// printJSON prints v as the JSON mode asks: one line (-j, --json=short),
// indented (--json=pretty, -o json).
func (e *env) printJSON(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return failf("rdmactl could not encode its JSON output: %v", err)
	}
	return e.printDoc("", b)
}

// printDoc prints a JSON document rdmad returned: -o json prints it as
// rdmad wrote it, -j on one line, --json=pretty indented.
func (e *env) printDoc(what string, doc []byte) error {
	if !json.Valid(doc) {
		return &documentError{what: what, err: errors.New("not JSON")}
	}
	var b bytes.Buffer
	switch mode := e.jsonMode(); {
	case mode == "short":
		_ = json.Compact(&b, doc)
	case mode == "output" && what != "":
		b.Write(bytes.TrimRight(doc, "\n"))
	default:
		_ = json.Indent(&b, doc, "", "  ")
	}
	b.WriteByte('\n')
	_, err := e.stdout.Write(escapeJSON(b.Bytes()))
	return err
}

// table prints rows under a header, then a footer, as systemctl and
// networkctl do; --no-legend leaves header and footer out. An empty table
// prints empty instead (one line, also left out by --no-legend).
func (e *env) table(header []string, rows [][]string, footer, empty string) error {
	if len(rows) == 0 {
		if !e.noLegend && empty != "" {
			fmt.Fprintln(e.stdout, empty)
		}
		return nil
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	if !e.noLegend {
		fmt.Fprintln(tw, strings.Join(header, "\t"))
	}
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if !e.noLegend && footer != "" {
		fmt.Fprintf(e.stdout, "\n%s\n", footer)
	}
	return nil
}

// timestamp is a time as systemd tools show it: local time with its zone.
func (e *env) timestamp(usec uint64) string {
	if usec == 0 {
		return "never"
	}
	return time.UnixMicro(int64(usec)).In(e.loc).Format("Mon 2006-01-02 15:04:05 MST")
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func plural(n int, one, many string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, one)
	}
	return fmt.Sprintf("%d %s", n, many)
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
