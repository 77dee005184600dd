package config

import (
	"strings"
	"testing"
)

// Problems on one line (an inline table's keys) are listed in the order of
// their keys, the same every time.
func TestProblemsOnOneLineInKeyOrder(t *testing.T) {
	_, err := Parse("f.toml", []byte("roce = [{ device = \"mlx5_0\", zz = 1, mm = 2, aa = 3 }]\n"))
	errs := flatten(err)
	var got []string
	for _, e := range errs {
		got = append(got, e.Error())
	}
	s := strings.Join(got, "\n")
	a, m, z := strings.Index(s, "aa"), strings.Index(s, "mm"), strings.Index(s, "zz")
	if len(errs) != 3 || !(a < m && m < z) {
		t.Errorf("problems:\n%s", s)
	}
}

// A syntax error names the key it follows, when the parser knows it.
func TestSyntaxErrorNamesTheKeyBefore(t *testing.T) {
	_, err := Parse("f.toml", []byte("[memlock]\nenable = \n"))
	if err == nil || !strings.Contains(err.Error(), `(after key "memlock.enable")`) || !strings.HasPrefix(err.Error(), "f.toml:2: TOML syntax error: ") {
		t.Errorf("syntax error: %v", err)
	}
	_, err = Parse("f.toml", []byte("[memlock\n"))
	if err == nil || strings.Contains(err.Error(), "after key") {
		t.Errorf("syntax error before any key: %v", err)
	}
}

// A quoted boolean is refused with the hint to drop the quotes, either way.
func TestQuotedBooleanHint(t *testing.T) {
	for _, v := range []string{"true", "false"} {
		_, err := Parse("f.toml", []byte("[memlock]\nenable = \""+v+"\"\n"))
		if err == nil || !strings.Contains(err.Error(), "write "+v+" without quotes") {
			t.Errorf("enable = %q: %v", v, err)
		}
	}
}

// A position without a line is its file alone.
func TestPositionWithoutLine(t *testing.T) {
	if got := (Position{File: "f.toml"}).String(); got != "f.toml" {
		t.Errorf("Position without line = %q", got)
	}
	if got := (Position{File: "f.toml", Line: 1}).String(); got != "f.toml:1" {
		t.Errorf("Position at line 1 = %q", got)
	}
}
