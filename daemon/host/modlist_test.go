package host_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/rdmad/rdmad/daemon/host"
)

func names(ls []host.ModuleListLine) []string {
	var out []string
	for _, l := range ls {
		out = append(out, l.Name)
	}
	return out
}

// systemd-modules-load's rules: comments only at the start of a line;
// the rest of any other line is the module name, valid or not.
func TestParseModuleList(t *testing.T) {
	in := "# comment\n; also a comment\n\n  ib_uverbs  \nrdma_ucm\n\t# indented comment\nxprtrdma\r\nmlx5_ib # inline\nib_isert;x\n"
	got := host.ParseModuleList([]byte(in))
	want := []host.ModuleListLine{{4, "ib_uverbs"}, {5, "rdma_ucm"}, {7, "xprtrdma"}, {8, "mlx5_ib # inline"}, {9, "ib_isert;x"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ParseModuleList = %+v, want %+v", got, want)
	}
	for i, valid := range []bool{true, true, true, false, false} {
		if got[i].Valid() != valid {
			t.Errorf("%q valid = %v", got[i].Name, !valid)
		}
	}
	for _, bad := range []string{"-v", "--help", "a/b", "../x", strings.Repeat("a", 65), ""} {
		if host.ValidModuleName(bad) {
			t.Errorf("ValidModuleName(%q) = true", bad)
		}
	}
}

// A comment line longer than a bufio.Scanner's 64 KiB does not hide the
// modules listed after it.
func TestParseModuleListLongLine(t *testing.T) {
	in := "ib_uverbs\n# " + strings.Repeat("x", 100<<10) + "\nrdma_ucm\n"
	if got := names(host.ParseModuleList([]byte(in))); !reflect.DeepEqual(got, []string{"ib_uverbs", "rdma_ucm"}) {
		t.Errorf("ParseModuleList = %.40q", got)
	}
}

// FuzzParseModuleList: a list read whole is the lists of its two halves,
// cut at a line end (no line can hide the ones after it), and every entry
// is a trimmed, non-comment line of the file with its line number.
func FuzzParseModuleList(f *testing.F) {
	f.Add("# comment\n; also\n\n  ib_uverbs  \n", "rdma_ucm\r\n\txprtrdma\n")
	f.Add("ib_iser", "#x\nib_isert")
	f.Add("-r\n--help\n", "a b\n\x00\n")
	f.Fuzz(func(t *testing.T, a, b string) {
		whole := host.ParseModuleList([]byte(a + "\n" + b))
		parts := append(names(host.ParseModuleList([]byte(a))), names(host.ParseModuleList([]byte(b)))...)
		if got := names(whole); len(got) != len(parts) || (len(got) > 0 && !reflect.DeepEqual(got, parts)) {
			t.Fatalf("ParseModuleList(a+b) = %q, ParseModuleList(a)+ParseModuleList(b) = %q", got, parts)
		}
		lines := strings.Split(a+"\n"+b, "\n")
		for _, l := range whole {
			m := l.Name
			if m == "" || m != strings.TrimSpace(m) || strings.ContainsRune(m, '\n') || m[0] == '#' || m[0] == ';' {
				t.Fatalf("entry %q", m)
			}
			if l.Line < 1 || l.Line > len(lines) || strings.TrimSpace(lines[l.Line-1]) != m {
				t.Fatalf("entry %q says line %d", m, l.Line)
			}
		}
	})
}
