// Package docs holds the project's documentation; its test keeps
// architecture.md's package table true to the code.
package docs

import (
	"os"
	"os/exec"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/rdmad/rdmad/"

// table reads architecture.md's package table: package -> its dependency
// column as import paths relative to the module.
func table(t *testing.T) map[string][]string {
	t.Helper()
	data, err := os.ReadFile("architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("^\\| `([a-z0-9/]+)` \\|[^|]*\\| ([^|]*) \\|$")
	paren := regexp.MustCompile(`\([^)]*\)`)
	out := map[string][]string{}
	for _, line := range strings.Split(string(data), "\n") {
		m := row.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		deps := []string{}
		col := strings.TrimSpace(paren.ReplaceAllString(m[2], ""))
		if col != "nothing" {
			for _, d := range strings.Split(col, ",") {
				d = strings.TrimSpace(d)
				if !strings.HasPrefix(d, "dbusapi") && !strings.HasPrefix(d, "cmd/") {
					d = "daemon/" + d
				}
				deps = append(deps, d)
			}
		}
		sort.Strings(deps)
		out[m[1]] = deps
	}
	if len(out) < 10 {
		t.Fatalf("architecture.md: found %d rows in the package table; has its format changed?", len(out))
	}
	return out
}

// imports is what go list says each package of the project imports from
// the project (test files aside).
func imports(t *testing.T) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "../cmd/...", "../daemon/...", "../dbusapi/...")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	res := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		pkg := strings.TrimPrefix(f[0], module)
		deps := []string{}
		for _, d := range f[1:] {
			if rel, ok := strings.CutPrefix(d, module); ok {
				deps = append(deps, rel)
			}
		}
		sort.Strings(deps)
		res[pkg] = deps
	}
	return res
}

// helper packages only tests import (fixtures, fakes) and generators need
// no row.
func helper(pkg string) bool {
	return strings.HasSuffix(pkg, "test") || strings.Contains(pkg, "/internal/")
}

func TestArchitectureDependencyColumnIsGoList(t *testing.T) {
	doc, real := table(t), imports(t)
	for pkg, deps := range real {
		got, ok := doc[pkg]
		switch {
		case !ok && !helper(pkg):
			t.Errorf("architecture.md has no row for %s (imports %v)", pkg, deps)
		case ok && !slices.Equal(got, deps):
			t.Errorf("architecture.md says %s depends on %v; go list says %v", pkg, got, deps)
		}
	}
	for pkg := range doc {
		if _, ok := real[pkg]; !ok {
			t.Errorf("architecture.md has a row for %s, which is not a package", pkg)
		}
	}
}

// TestSharedAPIImportsNoCLI keeps dbusapi what both sides of the bus share:
// rdmactl's command tree (cobra) lives under cmd/rdmactl, so the daemon,
// which imports dbusapi, never links a CLI framework.
func TestSharedAPIImportsNoCLI(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "../dbusapi/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.Contains(dep, "spf13/cobra") || strings.Contains(dep, "spf13/pflag") {
			t.Errorf("dbusapi/... depends on %s: the CLI belongs in cmd/rdmactl/internal/cli", dep)
		}
	}
}
