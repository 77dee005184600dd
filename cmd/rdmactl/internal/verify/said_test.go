package verify

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// A tool's output reaches the JSON and the terminal as its last three
// lines, bounded and valid UTF-8, whatever the tool printed.
func TestSaidKeepsLastLinesBoundedAndValid(t *testing.T) {
	for _, c := range []struct{ name, out, want string }{
		{"empty", "", ""},
		{"blank lines", "\n \n", ""},
		{"one", "connect error -1\n", "; rping: connect error -1"},
		{"last three", "a\nb\n\nc\nd\n", "; rping: b | c | d"},
	} {
		if got := said("rping", []byte(c.out)); got != c.want {
			t.Errorf("%s: said %q, want %q", c.name, got, c.want)
		}
	}
	long := said("rping", []byte(strings.Repeat("é", 400)+"\xff\n"))
	if body := strings.TrimPrefix(long, "; rping: "); len(body) > 300 || !utf8.ValidString(long) {
		t.Errorf("long output: %d bytes, valid UTF-8 %v", len(body), utf8.ValidString(long))
	}
}
