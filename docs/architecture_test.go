// Package docs holds the project's documentation; its test keeps
// architecture.md's package table true to the code.
package docs

import (
	"go/ast"
	"go/parser"
	gotoken "go/token"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
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

// TestCoreImportsNoOutput keeps the core free of its outputs, so a new
// output (a textfile, an API) is wired at the composition root and the
// core is tested without any: the reconciler, the service, the parts and
// doctor import neither the D-Bus server, nor the metrics, nor the wire
// model (dbusapi: doctor returns its own Finding, which the bus maps to
// the wire as it maps devices), nor the composition root. The service and
// the bus know the parts only through reconcile's interfaces and their
// own small ones; a part declares the interface it needs of another
// (roce.Loader, not modules.Loader) and imports no other part.
func TestCoreImportsNoOutput(t *testing.T) {
	real := imports(t)
	var partPkgs []string
	for _, p := range parts(t) {
		partPkgs = append(partPkgs, strings.TrimPrefix(p.pkg, module))
	}
	if len(partPkgs) < 7 {
		t.Fatalf("found %d part packages; has compose.Parts changed?", len(partPkgs))
	}
	outputs := []string{"daemon/bus", "daemon/metrics", "daemon/compose", "dbusapi"}
	forbidden := map[string][]string{
		"daemon/reconcile": append(slices.Clone(outputs), append([]string{"daemon/service", "daemon/doctor"}, partPkgs...)...),
		"daemon/service":   append(slices.Clone(outputs), append([]string{"daemon/doctor"}, partPkgs...)...),
		"daemon/doctor":    append(slices.Clone(outputs), "daemon/service"),
		"daemon/bus":       append([]string{"daemon/metrics", "daemon/compose"}, partPkgs...),
		"daemon/metrics":   append([]string{"daemon/bus", "daemon/compose", "daemon/service"}, partPkgs...),
	}
	for _, part := range partPkgs {
		forbidden[part] = append(slices.Clone(outputs), "daemon/service", "daemon/doctor")
		for _, other := range partPkgs {
			if other != part {
				forbidden[part] = append(forbidden[part], other)
			}
		}
	}
	for pkg, never := range forbidden {
		deps, ok := real[pkg]
		if !ok {
			t.Errorf("%s is not a package", pkg)
			continue
		}
		for _, d := range deps {
			if slices.Contains(never, d) {
				t.Errorf("%s imports %s", pkg, d)
			}
		}
	}
}

// settingTokens are the texts that name a setting outside Go identifiers:
// the kernel's own names for it, per part package. A setting's name and
// kind, and its handle's identifier, are taken from the parts themselves.
var settingTokens = map[string][]string{
	// The mode's texts ("RoCE v2") are also the GID types of a port's GID
	// table, which host reads and doctor checks: only the attributes
	// count.
	"daemon/roce":  {"default_roce_mode", "default_roce_tos"},
	"daemon/vpi":   {"mlx4_port"},
	"daemon/qos":   {"pfctx", "pfcrx"},
	"daemon/netns": {"netns_mode"},
}

// settingOwners are the packages allowed to name a setting besides its
// part: the configuration schema, the kernel edge every part reads
// through (host, the DCB codec), and the composition root that builds
// the parts. dbusapi and rdmactl (cmd/rdmactl) are outside daemon/ and
// cmd/rdmad, which is what is checked.
var settingOwners = map[string]bool{
	"daemon/config": true, "daemon/host": true, "daemon/dcb": true, "daemon/compose": true,
}

// TestOnlyItsPartNamesASetting keeps each setting in its part: no package
// of the daemon but the part that owns a setting (and the configuration
// schema and the kernel edge) names the setting's handle, its name, its
// kind or the kernel's text for it. The bus, the metrics, doctor and the
// service read records; adding a setting touches its part, config, the
// D-Bus contract and rdmactl, nothing else. Cockpit renders records too.
func TestOnlyItsPartNamesASetting(t *testing.T) {
	type token struct{ owner, text string }
	var literals []token           // exact string literals
	var kernel []token             // texts a literal must not contain
	handles := map[string]string{} // "importpath.Ident" -> owner
	for _, part := range parts(t) {
		rel := strings.TrimPrefix(part.pkg, module)
		for _, s := range part.settings {
			literals = append(literals, token{rel, s.Name}, token{rel, string(s.Kind)})
		}
		for _, id := range part.handles {
			handles[part.pkg+"."+id] = rel
		}
		for _, k := range settingTokens[rel] {
			kernel = append(kernel, token{rel, k})
		}
	}
	if len(handles) < 10 {
		t.Fatalf("found %d setting handles; has the way parts declare them changed?", len(handles))
	}
	fset := gotoken.NewFileSet()
	for _, dir := range sourceDirs(t) {
		rel := strings.TrimPrefix(dir, "../")
		if settingOwners[rel] {
			continue
		}
		files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
		for _, file := range files {
			if strings.HasSuffix(file, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, file, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			imports := map[string]string{}
			for _, im := range f.Imports {
				p, _ := strconv.Unquote(im.Path.Value)
				name := path.Base(p)
				if im.Name != nil {
					name = im.Name.Name
				}
				imports[name] = p
			}
			ast.Inspect(f, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.SelectorExpr:
					if x, ok := n.X.(*ast.Ident); ok {
						if owner, ok := handles[imports[x.Name]+"."+n.Sel.Name]; ok && owner != rel {
							t.Errorf("%s: %s names %s's setting %s.%s", fset.Position(n.Pos()), rel, owner, x.Name, n.Sel.Name)
						}
					}
				case *ast.BasicLit:
					if n.Kind != gotoken.STRING {
						return true
					}
					s, err := strconv.Unquote(n.Value)
					if err != nil {
						return true
					}
					for _, tk := range literals {
						if tk.owner != rel && s == tk.text {
							t.Errorf("%s: %s names %s's setting %q", fset.Position(n.Pos()), rel, tk.owner, s)
						}
					}
					for _, tk := range kernel {
						if tk.owner != rel && strings.Contains(s, tk.text) {
							t.Errorf("%s: %s has the kernel's text %q of %s's setting", fset.Position(n.Pos()), rel, tk.text, tk.owner)
						}
					}
				}
				return true
			})
		}
	}
	// Cockpit renders the records it reads (Port.Settings), and names no
	// setting or kernel text either.
	js, err := os.ReadFile("../cockpit/rdmad.js")
	if err != nil {
		t.Fatal(err)
	}
	for _, tk := range literals {
		if strings.Contains(string(js), `"`+tk.text+`"`) || strings.Contains(string(js), tk.text+":") {
			t.Errorf("cockpit/rdmad.js names %s's setting %q", tk.owner, tk.text)
		}
	}
	for _, tk := range kernel {
		if strings.Contains(string(js), tk.text) {
			t.Errorf("cockpit/rdmad.js has the kernel's text %q of %s's setting", tk.text, tk.owner)
		}
	}
}

// sourceDirs are the directories of the daemon's packages and rdmad's
// main, relative to this one.
func sourceDirs(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-f", "{{.Dir}}", "../daemon/...", "../cmd/rdmad").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	wd, _ := os.Getwd()
	var dirs []string
	for _, d := range strings.Fields(string(out)) {
		r, err := filepath.Rel(wd, d)
		if err != nil || helper(strings.TrimPrefix(r, "../")) {
			continue
		}
		dirs = append(dirs, r)
	}
	return dirs
}

// Every setting's doctor id (its name with dashes, then -differs) is in
// rdmactl(8)'s list of SETTING-differs findings.
func TestEverySettingHasItsDoctorID(t *testing.T) {
	b, err := os.ReadFile("rdmactl.8")
	if err != nil {
		t.Fatal(err)
	}
	for _, part := range parts(t) {
		for _, s := range part.settings {
			id := strings.ReplaceAll(s.Name, "_", "-") + "-differs"
			if !strings.Contains(string(b), ".BR "+id+" ,") && !strings.Contains(string(b), ".BR "+id+" .") {
				t.Errorf("docs/rdmactl.8 does not list %s (setting %s of %s)", id, s.Name, strings.TrimPrefix(part.pkg, module))
			}
		}
	}
}

// maxFileLines bounds a production source file: a file longer than this
// holds more than one job (architecture.md, "Files with one job").
const maxFileLines = 600

// TestNoLongSourceFile keeps every production Go file of the module (test
// files aside) at maxFileLines or fewer, so a file that grows a second job
// is split by job rather than carried on.
func TestNoLongSourceFile(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.Dir}}{{range .GoFiles}} {{.}}{{end}}{{range .CgoFiles}} {{.}}{{end}}`, "../...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		for _, name := range f[1:] {
			b, err := os.ReadFile(filepath.Join(f[0], name))
			if err != nil {
				t.Fatal(err)
			}
			checked++
			if n := strings.Count(string(b), "\n"); n > maxFileLines {
				rel, _ := filepath.Rel(root, filepath.Join(f[0], name))
				t.Errorf("%s has %d lines, more than %d: split it by job", rel, n, maxFileLines)
			}
		}
	}
	if checked < 100 {
		t.Fatalf("only %d files checked: go list did not list the module", checked)
	}
}

// TestErrorsNameNoPackage keeps the errors of the daemon, the programs and
// the D-Bus API in the words of what failed: each layer wraps its cause
// with the object and the step ("put back mlx5_0/1 qos pfc \"[0]\": read
// it back: get IEEE DCB of ens1f0np0: ..."), never with a package's name,
// which tells a user nothing and piles up as an error crosses the layers.
// Test helpers (packages ending in "test") are not checked.
func TestErrorsNameNoPackage(t *testing.T) {
	pkgs := map[string]bool{}
	var files []string
	for _, top := range []string{"../daemon", "../cmd", "../dbusapi"} {
		err := filepath.WalkDir(top, func(p string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if strings.HasSuffix(d.Name(), "test") || d.Name() == "testdata" {
					return filepath.SkipDir
				}
				pkgs[d.Name()] = true
				return nil
			}
			if strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go") {
				files = append(files, p)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	prefix := regexp.MustCompile(`^([a-z0-9]+): `)
	fset := gotoken.NewFileSet()
	checked := 0
	for _, name := range files {
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) == 0 {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); !ok || !(x.Name == "fmt" && sel.Sel.Name == "Errorf" || x.Name == "errors" && sel.Sel.Name == "New") {
				return true
			}
			lit, ok := call.Args[0].(*ast.BasicLit)
			if !ok || lit.Kind != gotoken.STRING {
				return true
			}
			s, err := strconv.Unquote(lit.Value)
			if err != nil {
				return true
			}
			checked++
			if m := prefix.FindStringSubmatch(s); m != nil && pkgs[m[1]] {
				t.Errorf("%s: error %q starts with the package name %q: say which object and which step instead", fset.Position(lit.Pos()), s, m[1])
			}
			return true
		})
	}
	if checked < 200 {
		t.Fatalf("only %d error texts checked: the walk missed the daemon", checked)
	}
}
