package modules_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/rdmad/rdmad/daemon/modules"
)

// A comment line longer than a bufio.Scanner's 64 KiB does not hide the
// modules listed after it.
func TestParseConfLongLine(t *testing.T) {
	in := "ib_uverbs\n# " + strings.Repeat("x", 100<<10) + "\nrdma_ucm\n"
	if got := modules.ParseConf([]byte(in)); !reflect.DeepEqual(got, []string{"ib_uverbs", "rdma_ucm"}) {
		t.Errorf("ParseConf = %.40q", got)
	}
}

// FuzzParseConf: a list read whole is the lists of its two halves, cut at a
// line end (no line can hide the ones after it), and every entry is a
// trimmed, non-comment line of the file.
func FuzzParseConf(f *testing.F) {
	f.Add("# comment\n; also\n\n  ib_uverbs  \n", "rdma_ucm\r\n\txprtrdma\n")
	f.Add("ib_iser", "#x\nib_isert")
	f.Add("-r\n--help\n", "a b\n\x00\n")
	f.Fuzz(func(t *testing.T, a, b string) {
		whole := modules.ParseConf([]byte(a + "\n" + b))
		parts := append(modules.ParseConf([]byte(a)), modules.ParseConf([]byte(b))...)
		if len(whole) != len(parts) || (len(whole) > 0 && !reflect.DeepEqual(whole, parts)) {
			t.Fatalf("ParseConf(a+b) = %q, ParseConf(a)+ParseConf(b) = %q", whole, parts)
		}
		for _, m := range whole {
			if m == "" || m != strings.TrimSpace(m) || strings.ContainsRune(m, '\n') || m[0] == '#' || m[0] == ';' {
				t.Fatalf("entry %q", m)
			}
		}
	})
}
