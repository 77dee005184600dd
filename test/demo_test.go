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
	"github.com/rdmad/rdmad/test/testdeps"
)

var (
	tableHeader = regexp.MustCompile(`^[A-Z][A-Z_/]*( +[A-Z][A-Z_/]*)+ *$`)
	columnName  = regexp.MustCompile(`[A-Z][A-Z_/]*`)
)

// misaligned returns the rows of the tables in out (a header of capitalised
// column names up to an empty line) whose cells do not start where the
// header's names start; a line that only continues the last cell starts
// where that cell does.
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
		case starts != nil && strings.TrimLeft(line, " ") != "" && len(line)-len(strings.TrimLeft(line, " ")) == starts[len(starts)-1]:
			// The last cell continued on a line of its own (doctor's
			// fix under its finding): aligned when it starts there.
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
	findings := "SEVERITY  FINDING\nwarn      lossy\n          fix: pfc\nwarn      lossy\n         fix: shifted\n"
	if bad := misaligned(findings); len(bad) != 1 || !strings.Contains(bad[0], "shifted") {
		t.Errorf("misaligned(%q) = %q, want the shifted continuation alone", findings, bad)
	}
}

// TestDemo runs test/demo.sh (make demo) on its fixture host: it ends well,
// says nothing of its temporary directory, and every table it prints
// (rdmactl's, busctl introspect's) is aligned once the fixture root is taken
// out of the paths.
func TestDemo(t *testing.T) {
	testdeps.Tool(t, "dbus-daemon", "dbus-daemon")
	testdeps.Tool(t, "busctl", "systemd")
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
	// Lossless RoCE: the ConnectX-5's PFC, trust and ETS before and after
	// rdmad --once, rdmactl qos show on the bus, another tool's change
	// corrected, and what rdmad found put back when the rule goes.
	plain := regexp.MustCompile("\x1b\\[[0-9;]*m").ReplaceAllString(out, "")
	for _, want := range []string{
		"  ens1f0np0   none  pcp    on     7 m    1,0,2,3,4,5,6,7  vendor,vendor,vendor,vendor,vendor,vendor,vendor,vendor\n",
		"  ens1f0np0   3     dscp   off    7 m    0,0,0,1,0,0,0,0  50%,50%,strict,strict,strict,strict,strict,strict\n",
		"== After: rdmactl qos show mlx5_0\nPORT      NETDEV     TRUST  PFC  DECLARED_TRUST  DECLARED_PFC",
		"mlx5_0/1  ens1f0np0  dscp   3    dscp            3",
		"mlx5_0/1  ETS priority classes  [0,0,0,1,0,0,0,0]",
		`"corrected a setting changed behind rdmad's back" subject=mlx5_0/1 setting=qos_trust found=pcp restored=dscp`,
	} {
		if !strings.Contains(plain, want) {
			t.Errorf("the demo does not show %q:\n%s", want, plain)
		}
	}
	_, undone, _ := strings.Cut(plain, "== Remove the lossless RoCE policy")
	for _, want := range []string{"mlx5_0/1  ens1f0np0  pcp    none", "ETS bandwidth         [vendor, vendor,"} {
		if !strings.Contains(undone, want) {
			t.Errorf("removing the lossless rule does not show %q:\n%s", want, undone)
		}
	}
	if bad := misaligned(out); len(bad) > 0 {
		t.Errorf("misaligned table rows in the demo:\n%s\n\nwhole output:\n%s", strings.Join(bad, "\n"), out)
	}
}
