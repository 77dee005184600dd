package config

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"io/fs"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
)

// nested builds a file whose line 3 nests n levels deep in one of the ways
// TOML allows: inline tables, dotted keys, arrays, a table header.
func nested(kind string, n int) string {
	head := "# a drop-in\n\n"
	switch kind {
	case "inline tables":
		return head + "x = " + strings.Repeat("{a=", n-1) + "1" + strings.Repeat("}", n-1) + "\n"
	case "dotted key":
		return head + strings.Repeat("a.", n-1) + "a = 1\n"
	case "arrays":
		return head + "x = " + strings.Repeat("[", n-1) + "1" + strings.Repeat("]", n-1) + "\n"
	case "table header":
		return head + "[" + strings.Repeat("a.", n-2) + "a]\nb = 1\n"
	}
	panic(kind)
}

// A small file that nests deep costs BurntSushi/toml memory quadratic in
// its depth (a 16 KB dotted key: 840 MB), so a nesting above maxNesting
// is refused at file:line before any TOML parser sees the file: the error
// names the line and the cost stays that of one pass over the bytes.
func TestDeepNestingIsRefusedBeforeTheParser(t *testing.T) {
	for _, kind := range []string{"inline tables", "dotted key", "arrays", "table header"} {
		data := []byte(nested(kind, 3000))
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		_, err := Parse("/etc/rdma/rdmad.d/50-deep.toml", data)
		runtime.ReadMemStats(&after)
		var ce *Error
		if !errors.As(err, &ce) || ce.Pos.String() != "/etc/rdma/rdmad.d/50-deep.toml:3" || !strings.Contains(ce.Msg, "nest") {
			t.Errorf("%s 3000 deep: error %v, want the nesting refused at 50-deep.toml:3", kind, err)
		}
		// A pass over a few KB; the parser would have allocated tens of MB.
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 1<<20 {
			t.Errorf("%s 3000 deep: refusing it allocated %d bytes; the TOML parser ran", kind, alloc)
		}
	}
}

// The bound is a depth, not a size: up to maxNesting passes to the parser
// (which then judges the keys), one more is refused, and what looks like
// nesting inside strings and comments is not.
func TestNestingBound(t *testing.T) {
	for _, kind := range []string{"inline tables", "dotted key", "arrays", "table header"} {
		if err := checkNesting("f.toml", []byte(nested(kind, maxNesting))); err != nil {
			t.Errorf("%s %d deep: %v, want it passed to the parser", kind, maxNesting, err)
		}
		if err := checkNesting("f.toml", []byte(nested(kind, maxNesting+1))); err == nil {
			t.Errorf("%s %d deep passed", kind, maxNesting+1)
		}
	}
	for _, c := range []struct {
		text string
		line int // 0: passes
	}{
		// The deepest paths the schema has.
		{"[[qos]]\ndevice = \"mlx5_*\"\ndscp_prio = { 26 = 3, 10 = 1 }\npfc = [3]\n", 0},
		{"[doctor.counters]\nsymbol_error = 10\n[[expect]]\nrate = 200\n", 0},
		{"qos = [{ device = \"x\", dscp_prio = { 26 = 3 } }]\n", 0},
		// Counted together: header, dotted key, arrays, inline tables.
		{"[a.b]\nc.d = [{ e = [1] }]\n", 2},
		{"[a.b]\nc.d = [{ e = 1 }]\n", 0},
		{"a = { b.c = { d.e = { f = 1, g.h = 2 } } }\n", 1},
		{"[[a.b.c]]\n[a.b.c.d]\ne.f = 1\n\n[x]\ny = 1\n", 0},
		{"[[a.b.c]]\n[a.b.c.d]\ne.f.g = 1\n", 3},
		{"[ a . \"b.c\" . 'd' ]\ne . f . g = 1\n", 0},
		{"[ a . \"b.c\" . 'd' ]\ne . f . g . h = 1\n", 2},
		// Not nesting: strings, comments, a header's brackets in a value.
		{"# [[[[[[[[[[ {{{{{{{{\nx = \"[[[[[[[[[[\" # {a={a={a={a={a={a={\n", 0},
		{"x = '[[[[[[[[[['\ny = \"\\\"[[[[[[[[[\"\n", 0},
		{"x = \"\"\"\n[[[[[[[[[[\n\\\"\"\"[[[[[[[\"\"\"\ny = '''\n{{{{{{{{{{\n'''\nz.a.b.c.d.e.f = 1\n", 7},
		{"s = \"\"\"a\"\"\"\"\"\nt = [[[[[[1]]]]]]\n", 2},
		{"\"a.b.c.d.e.f.g\" = 1\n'h.i.j.k.l.m.n' = 2\n", 0},
		// Arrays spread over lines, with comments between elements.
		{"x = [\n  [ # [\n    [\n      [1], # ]]]]\n    ],\n  ],\n]\n", 0},
		{"x = [\n  [\n    [\n      [\n        [\n          [1]]]]]]\n", 6},
	} {
		err := checkNesting("f.toml", []byte(c.text))
		var ce *Error
		switch {
		case c.line == 0 && err != nil:
			t.Errorf("%q: %v, want it passed", c.text, err)
		case c.line != 0 && (!errors.As(err, &ce) || ce.Pos.Line != c.line):
			t.Errorf("%q: %v, want refused at line %d", c.text, err, c.line)
		}
	}
}

// Every way a file reaches the TOML parser passes the guard: the files
// (Load), a snapshot of them (the last good configuration), one file on
// its own (Parse) and rdmad's drop-in (LoadPersisted).
func TestEveryPathToTheParserIsGuarded(t *testing.T) {
	deep := []byte(nested("dotted key", 3000))
	main := "/etc/rdma/rdmad.toml"
	snap := &Snapshot{MainFile: main, Files: []SnapshotFile{{Name: main, Data: deep}}}
	if _, err := snap.Load(); err == nil || !strings.Contains(err.Error(), "nest") {
		t.Errorf("snapshot: %v", err)
	}
	if _, err := Load(mapReader{main: deep}, main); err == nil || !strings.Contains(err.Error(), "nest") {
		t.Errorf("Load: %v", err)
	}
	if _, err := LoadPersisted(mapReader{PersistedPath("/etc/rdma/rdmad.d"): deep}, "/etc/rdma/rdmad.d"); err == nil || !strings.Contains(err.Error(), "nest") {
		t.Errorf("LoadPersisted: %v", err)
	}
}

// mapReader serves files from memory.
type mapReader map[string][]byte

func (m mapReader) ReadFile(name string) ([]byte, error) {
	if b, ok := m[name]; ok {
		return b, nil
	}
	return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
}

func (m mapReader) ReadDir(name string) ([]string, error) {
	return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
}

// FuzzNesting checks the guard against the parser it protects: on any
// bytes it never panics, and on every input BurntSushi/toml accepts it
// passes exactly those whose decoded key paths are at most maxNesting deep
// (inline arrays count a level, arrays of tables stand for their header).
// The parser only sees inputs the guard passed, or small ones.
func FuzzNesting(f *testing.F) {
	for _, kind := range []string{"inline tables", "dotted key", "arrays", "table header"} {
		f.Add([]byte(nested(kind, maxNesting)))
		f.Add([]byte(nested(kind, maxNesting+1)))
	}
	f.Add([]byte("[[qos]]\ndevice = \"mlx5_*\"\ndscp_prio = { 26 = 3, 10 = 1 }\npfc = [3]\n"))
	f.Add([]byte("[a.b]\nc.d = [{ e = [1] }]\n"))
	f.Add([]byte("x = \"\"\"\n[[[[[[[[[[\n\\\"\"\"[[[[[[[\"\"\"\ny = '''\n{{{{{{{{{{\n'''\nz.a.b.c.d.e = 1\n"))
	f.Add([]byte("[[a]]\n[[a.b]]\n[[a.b.c]]\nd = [[{e = 1}]]\n"))
	f.Add([]byte("a = { b = [ { c = [ [ 1 ] ] } ] }\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		err := checkNesting("f.toml", data)
		var ce *Error
		if err != nil && (!errors.As(err, &ce) || ce.Pos.Line < 1) {
			t.Fatalf("refusal without a line: %v", err)
		}
		if err != nil && (len(data) > 512 || strings.Contains(err.Error(), "key parts")) {
			return // the parser's cost on such input is what the guard is for
		}
		var raw map[string]any
		if _, perr := toml.Decode(string(data), &raw); perr != nil {
			return
		}
		if d := decodedDepth(raw); (err == nil) != (d <= maxNesting) {
			t.Fatalf("guard says %v for a file %d deep", err, d)
		}
	})
}

// decodedDepth is the depth of a decoded file's deepest key path: each map
// key and each inline array a level; an array of tables ([]map[string]any)
// adds none, its header's parts are its keys.
func decodedDepth(v any) int {
	d := 0
	switch v := v.(type) {
	case map[string]any:
		for _, e := range v {
			d = max(d, 1+decodedDepth(e))
		}
	case []map[string]any:
		for _, e := range v {
			d = max(d, decodedDepth(e))
		}
	case []any:
		d = 1
		for _, e := range v {
			d = max(d, 1+decodedDepth(e))
		}
	}
	return d
}

// The line indexer reads any text in one pass with memory that does not
// grow with its nesting: it keeps its own stack, and indexes no deeper
// than the guard lets a file reach the parser. (It runs only after the
// guard and the parser accepted a file; this holds without them.)
func TestLineIndexerCostIsLinear(t *testing.T) {
	for _, kind := range []string{"inline tables", "arrays", "dotted key", "table header"} {
		src := nested(kind, 5000)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		ix := indexLines(src)
		runtime.ReadMemStats(&after)
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 2<<20 {
			t.Errorf("%s 5000 deep: indexing allocated %d bytes", kind, alloc)
		}
		if kind == "inline tables" || kind == "arrays" {
			if l := ix.lookup("x"); l != 3 {
				t.Errorf("%s: x found at line %d, want 3", kind, l)
			}
		}
	}
}

// Only parseFile hands bytes to the TOML parser, after checkNesting: no
// other file in the tree imports BurntSushi/toml outside tests, and no
// other function of decode.go calls its decoder. A new path to the parser
// (a Plan of candidate bytes, another state file) must go through Load,
// Parse or parseFile, and so through the guard.
func TestOnlyParseFileReachesTheParser(t *testing.T) {
	const tomlPath = `"github.com/BurntSushi/toml"`
	root := "../.."
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == ".tools" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			if imp.Path.Value == tomlPath && filepath.ToSlash(p) != "../../daemon/config/decode.go" {
				t.Errorf("%s imports BurntSushi/toml: files reach the TOML parser only through config's parseFile", p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	f, err := parser.ParseFile(fset, "decode.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, decl := range f.Decls {
		fn, ok := decl.(*ast.FuncDecl)
		if !ok {
			continue
		}
		if fn.Name.Name == "parseFile" {
			var call *ast.AssignStmt
			if first, ok := fn.Body.List[0].(*ast.IfStmt); ok {
				call, _ = first.Init.(*ast.AssignStmt)
			}
			if call == nil || len(call.Rhs) != 1 || !strings.HasPrefix(types.ExprString(call.Rhs[0]), "checkNesting(") {
				t.Error("parseFile does not start with checkNesting")
			}
		}
		ast.Inspect(fn, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); ok && x.Name == "toml" && (strings.Contains(sel.Sel.Name, "Decode") || sel.Sel.Name == "Unmarshal") {
				if fn.Name.Name != "parseFile" {
					t.Errorf("decode.go: %s calls toml.%s; only parseFile may, after checkNesting", fn.Name.Name, sel.Sel.Name)
				}
			}
			return true
		})
	}
}

// Breadth is bounded too: even 6 levels deep, BurntSushi/toml's memory
// grows with every key part it keeps (a 1 MiB file of dotted keys held
// 272 MB), so a file holds at most maxKeyParts key parts and array
// elements, refused at the line that passes the bound, before parsing.
func TestKeyPartsAreBounded(t *testing.T) {
	fill := func(units int) []byte {
		var b strings.Builder
		b.WriteString("# fill\n")
		for i := 0; i < units/6; i++ {
			fmt.Fprintf(&b, "k%d.b.c.d.e.f = 1\n", i)
		}
		for i := 0; i < units%6; i++ {
			fmt.Fprintf(&b, "x%d = 1\n", i)
		}
		return []byte(b.String())
	}
	if err := checkNesting("f.toml", fill(maxKeyParts)); err != nil {
		t.Errorf("%d key parts: %v, want them passed to the parser", maxKeyParts, err)
	}
	data := fill(maxKeyParts + 1)
	lines := strings.Count(string(data), "\n")
	var ce *Error
	if err := checkNesting("f.toml", data); !errors.As(err, &ce) || ce.Pos.Line != lines || !strings.Contains(ce.Msg, "key parts") {
		t.Errorf("%d key parts: %v, want refused at the last line, %d", maxKeyParts+1, err, lines)
	}
	if err := checkNesting("f.toml", []byte("x = ["+strings.Repeat("1,", maxKeyParts)+"1]\n")); err == nil {
		t.Errorf("an array of %d elements passed", maxKeyParts+1)
	}
	// A 1 MiB file of 6-deep dotted keys: refused after a pass over it.
	var b strings.Builder
	for i := 0; b.Len() < 1<<20-64; i++ {
		fmt.Fprintf(&b, "k%d.b.c.d.e.f = 1\n", i)
	}
	wide := []byte(b.String())
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := Parse("f.toml", wide)
	runtime.ReadMemStats(&after)
	if err == nil || !strings.Contains(err.Error(), "key parts") {
		t.Errorf("1 MiB of dotted keys: %v", err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 1<<20 {
		t.Errorf("refusing 1 MiB of dotted keys allocated %d bytes; the TOML parser ran", alloc)
	}
}

// A file with thousands of problems reports the first ones and how many
// more there are: the error travels in ConfigError, Describe, STATUS= and
// the journal, and must not grow with the file.
func TestProblemsOfAFileAreBounded(t *testing.T) {
	var b strings.Builder
	for i := 0; i < 5000; i++ {
		fmt.Fprintf(&b, "k%d = 1\n", i)
	}
	_, err := Parse("f.toml", []byte(b.String()))
	errs := flatten(err)
	if len(errs) != maxErrorsPerFile+1 {
		t.Fatalf("%d problems reported, want the first %d and a count", len(errs), maxErrorsPerFile)
	}
	var last *Error
	if !errors.As(errs[maxErrorsPerFile], &last) || last.Pos.Line != maxErrorsPerFile+1 || !strings.Contains(last.Msg, "4950 more") {
		t.Errorf("last problem: %v", errs[maxErrorsPerFile])
	}
	if len(err.Error()) > 16<<10 {
		t.Errorf("the error is %d bytes long", len(err.Error()))
	}
}

// A file with exactly as many problems as are listed lists them all, and
// no count of more.
func TestProblemsAtTheBoundAreAllListed(t *testing.T) {
	var b strings.Builder
	for i := 0; i < maxErrorsPerFile; i++ {
		fmt.Fprintf(&b, "k%d = 1\n", i)
	}
	_, err := Parse("f.toml", []byte(b.String()))
	if errs := flatten(err); len(errs) != maxErrorsPerFile || strings.Contains(err.Error(), "more problems") {
		t.Errorf("%d problems: %d reported (%v)", maxErrorsPerFile, len(errs), err)
	}
}
