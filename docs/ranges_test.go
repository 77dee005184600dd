package docs

import (
	"go/ast"
	"go/parser"
	gotoken "go/token"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/config/value"
	"github.com/rdmad/rdmad/dbusapi"
)

// keyRanges are the ranges of the keys' values: the [[qos]] keys', as
// the files and the contract's table give them, and [[roce]] tos.
func keyRanges(t *testing.T) []value.Range {
	t.Helper()
	seen := map[value.Range]bool{}
	var out []value.Range
	add := func(r value.Range) {
		if !r.IsZero() && !seen[r] {
			seen[r] = true
			out = append(out, r)
		}
	}
	for _, k := range config.QoSKeys() {
		add(k.Values)
		add(k.Keys)
	}
	for _, k := range dbusapi.QoSKeys {
		add(k.Values)
		add(k.Keys)
	}
	add(value.TOSRange) // [[roce]] tos
	if len(out) < 7 {
		t.Fatalf("found %d ranges of [[qos]] keys; have the tables changed?", len(out))
	}
	return out
}

// rangeText is how code writes a range: "1..999".
func rangeText(r value.Range) string {
	return strconv.FormatInt(r.Min, 10) + ".." + strconv.FormatInt(r.Max, 10)
}

// rangeTexts are the ways text writes a range: "1..999", and in words
// "1 to 999" (value.Range.Words).
func rangeTexts(r value.Range) []string {
	return []string{rangeText(r), strconv.FormatInt(r.Min, 10) + " to " + strconv.FormatInt(r.Max, 10)}
}

// TestNoKeyRangeOutsideValue keeps each key's range (the [[qos]] keys',
// [[roce]] tos) in one place, package config/value: no string of the
// code, the contract or the web console writes it ("1..999", "1 to
// 999"), no call passes its two ends as literals (integer(p, v, 0, 7))
// and no value.Range literal repeats it, except what go generate
// ./dbusapi makes (SetQoSSettings' settings paragraph and the web
// console's lossless form from the table, the TOS lines of
// dbusapi.RangeLines); nor does a manual page or the example
// configuration, but for the roff strings of dbusapi.ManRanges and the
// example's lines of dbusapi.RangeLines that go generate ./dbusapi
// writes; nor does the prose (docs/*.md, the decision records,
// docs/examples, README.md). A range written twice is a range that one day
// differs: the decoder's, the flag's and the writer's must be the rule
// of package value.
func TestNoKeyRangeOutsideValue(t *testing.T) {
	ranges := keyRanges(t)
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{.Dir}}{{range .GoFiles}} {{.}}{{end}}`, "../...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	fset := gotoken.NewFileSet()
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if strings.TrimPrefix(f[0], module) == "daemon/config/value" {
			continue
		}
		for _, name := range f[2:] {
			file := filepath.Join(f[1], name)
			src, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(src), "\n// Code generated ") || strings.HasPrefix(string(src), "// Code generated ") {
				continue
			}
			af, err := parser.ParseFile(fset, file, src, 0)
			if err != nil {
				t.Fatal(err)
			}
			checked++
			ast.Inspect(af, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.BasicLit:
					if n.Kind != gotoken.STRING {
						return true
					}
					for _, r := range ranges {
						for _, text := range rangeTexts(r) {
							if strings.Contains(n.Value, text) {
								t.Errorf("%s: %s writes the range %s of a key: use package value's (%s)", fset.Position(n.Pos()), n.Value, text, r)
							}
						}
					}
				case *ast.CompositeLit:
					sel, ok := n.Type.(*ast.SelectorExpr)
					if !ok || sel.Sel.Name != "Range" {
						return true
					}
					var lo, hi int64
					for _, e := range n.Elts {
						if kv, ok := e.(*ast.KeyValueExpr); ok {
							if id, ok := kv.Key.(*ast.Ident); ok {
								if v, ok := intLiteral(kv.Value); ok && id.Name == "Min" {
									lo = v
								} else if ok && id.Name == "Max" {
									hi = v
								}
							}
						}
					}
					for _, r := range ranges {
						if lo == r.Min && hi == r.Max {
							t.Errorf("%s: a value.Range literal repeats the range %s of a [[qos]] key: use package value's", fset.Position(n.Pos()), rangeText(r))
						}
					}
				case *ast.CallExpr:
					for i := 0; i+1 < len(n.Args); i++ {
						lo, ok1 := intLiteral(n.Args[i])
						hi, ok2 := intLiteral(n.Args[i+1])
						for _, r := range ranges {
							if ok1 && ok2 && lo == r.Min && hi == r.Max {
								t.Errorf("%s: a call passes the range %s of a [[qos]] key as literals: use package value's", fset.Position(n.Pos()), rangeText(r))
							}
						}
					}
				}
				return true
			})
		}
	}
	if checked < 100 {
		t.Fatalf("only %d files checked: go list did not list the module", checked)
	}
	// The contract and the web console, but for what the table makes.
	contract := strings.Replace(string(dbusapi.IntrospectionXML), settingsParagraph(t), "", 1)
	contract = withoutRangeLines(t, contract, "contract")
	page, err := os.ReadFile("../cockpit/index.html")
	if err != nil {
		t.Fatal(err)
	}
	start, end := strings.Index(string(page), "<!-- The fields below are made"), strings.Index(string(page), "<!-- End of the generated fields. -->")
	if start < 0 || end < start {
		t.Fatal("cockpit/index.html: no generated fields")
	}
	script, err := os.ReadFile("../cockpit/rdmad.js")
	if err != nil {
		t.Fatal(err)
	}
	example, err := os.ReadFile("../etc/rdma/rdmad.toml")
	if err != nil {
		t.Fatal(err)
	}
	texts := map[string]string{
		"etc/rdma/rdmad.toml": withoutRangeLines(t, string(example), "example"),
	}
	pages, _ := filepath.Glob("*.[1-8]")
	if len(pages) < 3 {
		t.Fatalf("manual pages: %v", pages)
	}
	for _, page := range pages {
		data, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		texts["docs/"+page] = withoutManRanges(string(data))
	}
	// The prose: the documents, the decision records, the examples and
	// the README. docs/dbus-api.md is left out: go generate ./dbusapi
	// writes it from the contract, read above without what the table
	// makes. So is CHANGELOG.md: it is history, each entry as it was
	// released, and says what a range was then. A kernel's limit that a
	// range was drawn from (mlx5's cable length, its DSCPs) is written
	// with the kernel's constant, which is what the text is about.
	prose, _ := filepath.Glob("*.md")
	records, _ := filepath.Glob("decisions/*.md")
	examples, _ := filepath.Glob("examples/*")
	prose = append(append(append(prose, records...), examples...), "../README.md")
	if len(prose) < 20 {
		t.Fatalf("documents: %v", prose)
	}
	for _, doc := range prose {
		if doc == "dbus-api.md" {
			continue
		}
		data, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		// Lines joined: prose wraps "1 to" and "999" onto two lines.
		texts[filepath.Join("docs", doc)] = strings.Join(strings.Fields(string(data)), " ")
	}
	for name, text := range map[string]string{
		"dbusapi/org.rdmad1.xml": contract,
		"cockpit/index.html":     withoutRangeLines(t, string(page[:start])+string(page[end:]), "cockpit"),
		"cockpit/rdmad.js":       string(script),
	} {
		texts[name] = text
	}
	for name, text := range texts {
		for _, r := range ranges {
			for _, rt := range rangeTexts(r) {
				if i := strings.Index(text, rt); i >= 0 {
					t.Errorf("%s writes the range %s of a key outside what go generate ./dbusapi makes: %q", name, rt, around(text, i))
				}
			}
		}
	}
}

// around is the text about its byte i, for a message: the rest of the
// line before it and after it, at most 60 bytes each way.
func around(text string, i int) string {
	start, end := max(0, i-60), min(len(text), i+60)
	if nl := strings.LastIndexByte(text[start:i], '\n'); nl >= 0 {
		start += nl + 1
	}
	if nl := strings.IndexByte(text[i:end], '\n'); nl >= 0 {
		end = i + nl
	}
	return text[start:end]
}

// settingsParagraph is SetQoSSettings' settings paragraph as the contract
// holds it (gendoc's tests hold it to the table).
func settingsParagraph(t *testing.T) string {
	t.Helper()
	xml := string(dbusapi.IntrospectionXML)
	i := strings.Index(xml, "\n      settings: the [[qos]] keys")
	j := strings.Index(xml[i+1:], "\n      persist: ")
	if i < 0 || j < 0 {
		t.Fatal("org.rdmad1.xml: no settings paragraph in SetQoSSettings")
	}
	return xml[i+1 : i+1+j]
}

// withoutRangeLines is text without the lines go generate ./dbusapi
// writes from package value's ranges (dbusapi.RangeLines) in file in.
func withoutRangeLines(t *testing.T, text, in string) string {
	t.Helper()
	for _, l := range dbusapi.RangeLines {
		if l.In != in {
			continue
		}
		if !strings.Contains(text, "\n"+l.Line+"\n") {
			t.Fatalf("%s lacks its generated line %q: run go generate ./dbusapi", in, l.Line)
		}
		text = strings.Replace(text, "\n"+l.Line+"\n", "\n", 1)
	}
	return text
}

// withoutManRanges is a manual page without the roff strings go generate
// ./dbusapi defines from package value (dbusapi.ManRanges).
func withoutManRanges(page string) string {
	i := strings.Index(page, dbusapi.ManRangesStart)
	j := strings.Index(page, dbusapi.ManRangesEnd)
	if i < 0 || j < i {
		return page
	}
	return page[:i] + page[j:]
}

// expandManStrings is a manual page with the strings it defines (.ds)
// written in where it names them (\*[name]), as a reader sees it.
func expandManStrings(page string) string {
	var pairs []string
	for _, line := range strings.Split(page, "\n") {
		if def, ok := strings.CutPrefix(line, ".ds "); ok {
			name, val, _ := strings.Cut(def, " ")
			pairs = append(pairs, `\*[`+name+`]`, val)
		}
	}
	return strings.NewReplacer(pairs...).Replace(page)
}

func intLiteral(e ast.Expr) (int64, bool) {
	neg := false
	if u, ok := e.(*ast.UnaryExpr); ok && u.Op == gotoken.SUB {
		neg, e = true, u.X
	}
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != gotoken.INT {
		return 0, false
	}
	n, err := strconv.ParseInt(lit.Value, 0, 64)
	if neg {
		n = -n
	}
	return n, err == nil
}
