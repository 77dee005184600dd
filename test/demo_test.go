// Package test holds the fixture hosts, the demo and the harnesses; its test
// runs `make demo`'s script as a user meets it.
package test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/rdmad/rdmad/daemon/host/hosttest"
)

var (
	tableHeader = regexp.MustCompile(`^[A-Z][A-Z_/]*( +[A-Z][A-Z_/]*)+ *$`)
	columnName  = regexp.MustCompile(`[A-Z][A-Z_/]*`)
)

// misaligned returns the rows of the tables in out (a header of capitalised
// column names up to an empty line) whose cells do not start where the
// header's names start.
func misaligned(out string) []string {
	var bad []string
	var starts []int
	for _, line := range strings.Split(out, "\n") {
		switch {
		case starts == nil && tableHeader.MatchString(line):
			for _, m := range columnName.FindAllStringIndex(line, -1) {
				starts = append(starts, m[0])
			}
		case starts != nil && line == "":
			starts = nil
		case starts != nil:
			for _, s := range starts[1:] {
				// The cell before ends with a space and this one starts
				// here (every cell of these tables has text: busctl's
				// flags, a finding, rdmactl's "-").
				if len(line) <= s || line[s-1] != ' ' || line[s] == ' ' {
					bad = append(bad, line)
					break
				}
			}
		}
	}
	return bad
}

func TestMisalignedFindsAShiftedRow(t *testing.T) {
	table := "NAME  TYPE VALUE     FLAGS\n.A    p    \"x\"       e\n.B    p    \"/etc/y\" e\n"
	if bad := misaligned(table); len(bad) != 1 || !strings.Contains(bad[0], ".B") {
		t.Errorf("misaligned(%q) = %q, want the .B row", table, bad)
	}
}

// TestDemo runs test/demo.sh (make demo) on its fixture host: it ends well,
// says nothing of its temporary directory, and every table it prints
// (rdmactl's, busctl introspect's) is aligned once the fixture root is taken
// out of the paths.
func TestDemo(t *testing.T) {
	for _, tool := range []string{"dbus-daemon", "busctl"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("RDMAD_TEST_DEPS") != "" {
				t.Fatalf("%s is missing although test/install-deps.sh ran", tool)
			}
			t.Skipf("%s not installed (test/install-deps.sh installs it)", tool)
		}
	}
	repo := hosttest.RepoRoot()
	bin := t.TempDir()
	for _, cmd := range []string{"rdmad", "rdmactl"} {
		build := exec.Command("go", "build", "-o", filepath.Join(bin, cmd), "./cmd/"+cmd)
		build.Dir = repo
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", cmd, err, out)
		}
	}
	demo := exec.Command(filepath.Join(repo, "test", "demo.sh"))
	demo.Env = append(os.Environ(), "BIN="+bin)
	raw, err := demo.CombinedOutput()
	out := string(raw)
	if err != nil {
		t.Fatalf("demo.sh: %v\n%s", err, out)
	}
	if strings.Contains(out, "/tmp/rdmad-demo.") {
		t.Errorf("the demo shows its temporary directory:\n%s", out)
	}
	for _, want := range []string{"busctl introspect", ".DesiredRoCESource", "rdmactl roce set", "DECLARED_MODE"} {
		if !strings.Contains(out, want) {
			t.Errorf("the demo does not show %q:\n%s", want, out)
		}
	}
	if bad := misaligned(out); len(bad) > 0 {
		t.Errorf("misaligned table rows in the demo:\n%s\n\nwhole output:\n%s", strings.Join(bad, "\n"), out)
	}
}
