// Command mutants makes the one-line mutants gremlins does not (make
// mutate runs both; docs/testing.md): in a package's non-test Go files,
// one at a time, it negates an if's condition, drops a call statement or
// a deferred call, drops a return inside an if, turns a comparison into
// its negation (== and !=, < and >=, > and <=) and && into ||, then runs
// the package's tests on the mutant and says whether they failed
// (killed) or passed (lived).
//
// The files are never edited: each mutant reaches the compiler through
// go test -overlay, so the tree stays as it is whatever ends the run. A
// dropped statement becomes `if false { ... }`, so the names it used are
// still used and the mutant compiles; one that still does not (a return
// a function needs) is "not viable" and counts neither way.
//
//	go run ./test/mutants [-only RE] [-run RE] [-sample N] ./daemon/bus
//
// -funcs keeps the mutants to some functions (the code outside functions
// is mutated only without it). -fields also drops each key: value of a
// composite literal, one at a time: the mutants of a table written as
// data (a method's flag or action missing from its entry). -run first tests each mutant with the package's tests that match RE
// (quicker); a mutant they let live is tested again with all of them, so
// what is reported lived passed every test of its package.
package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// mutant is one mutation of one file: the bytes [from, to) replaced by text.
type mutant struct {
	File    string `json:"file"`
	Line    int    `json:"line"`
	Kind    string `json:"kind"`
	Was     string `json:"was"`
	Is      string `json:"is"`
	Outcome string `json:"outcome"` // killed, lived, timed out, not viable
	By      string `json:"by,omitempty"`
	from    int
	to      int
	text    string
}

var negated = map[token.Token]token.Token{
	token.EQL: token.NEQ, token.NEQ: token.EQL,
	token.LSS: token.GEQ, token.GEQ: token.LSS,
	token.GTR: token.LEQ, token.LEQ: token.GTR,
	token.LAND: token.LOR, token.LOR: token.LAND,
}

// mutants lists the mutants of one file's source.
func mutants(name string, src []byte, funcs *regexp.Regexp, fields bool) ([]mutant, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	var out []mutant
	off := func(p token.Pos) int { return fset.Position(p).Offset }
	add := func(kind string, from, to token.Pos, text string) {
		out = append(out, mutant{File: name, Line: fset.Position(from).Line, Kind: kind,
			Was: oneLine(src[off(from):off(to)]), Is: oneLine([]byte(text)), from: off(from), to: off(to), text: text})
	}
	drop := func(kind string, s ast.Stmt) {
		add(kind, s.Pos(), s.End(), "if false { "+string(src[off(s.Pos()):off(s.End())])+" }")
	}
	inIf := map[ast.Stmt]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.FuncDecl:
			return funcs == nil || funcs.MatchString(n.Name.Name)
		case *ast.GenDecl:
			return funcs == nil
		case *ast.IfStmt:
			c := string(src[off(n.Cond.Pos()):off(n.Cond.End())])
			add("negate condition", n.Cond.Pos(), n.Cond.End(), "!("+c+")")
			for _, s := range n.Body.List {
				inIf[s] = true
			}
			if e, ok := n.Else.(*ast.BlockStmt); ok {
				for _, s := range e.List {
					inIf[s] = true
				}
			}
		case *ast.CompositeLit:
			if !fields {
				break
			}
			for _, e := range n.Elts {
				if kv, ok := e.(*ast.KeyValueExpr); ok {
					// The field and its comma: what is left still parses.
					end := off(kv.End())
					if rest := bytes.TrimLeft(src[end:], " \t"); len(rest) > 0 && rest[0] == ',' {
						end = len(src) - len(rest) + 1
					}
					out = append(out, mutant{File: name, Line: fset.Position(kv.Pos()).Line, Kind: "drop field",
						Was: oneLine(src[off(kv.Pos()):end]), Is: "", from: off(kv.Pos()), to: end})
				}
			}
		case *ast.ExprStmt:
			if _, ok := n.X.(*ast.CallExpr); ok {
				drop("drop call", n)
			}
		case *ast.DeferStmt:
			drop("drop deferred call", n)
		case *ast.ReturnStmt:
			if inIf[n] {
				drop("drop return", n)
			}
		case *ast.BinaryExpr:
			if to, ok := negated[n.Op]; ok {
				add("flip comparison", n.OpPos, n.OpPos+token.Pos(len(n.Op.String())), to.String())
			}
		}
		return true
	})
	slices.SortStableFunc(out, func(a, b mutant) int { return a.from - b.from })
	return out, nil
}

func oneLine(b []byte) string {
	s := strings.Join(strings.Fields(string(b)), " ")
	if len(s) > 80 {
		s = s[:77] + "..."
	}
	return s
}

// result is what one go test run of a mutant said.
type result int

const (
	passed result = iota
	failed
	timedOut
	notViable
)

// test runs pkg's tests (those matching run, when not "") with the mutant
// in place through an overlay.
func test(ctx context.Context, pkg string, m mutant, src []byte, run string, timeout time.Duration, dir string) (result, string, error) {
	mutated := make([]byte, 0, len(src)+len(m.text))
	mutated = append(append(append(mutated, src[:m.from]...), m.text...), src[m.to:]...)
	abs, err := filepath.Abs(m.File)
	if err != nil {
		return 0, "", err
	}
	file := filepath.Join(dir, "mutant.go")
	if err := os.WriteFile(file, mutated, 0o644); err != nil {
		return 0, "", err
	}
	overlay, _ := json.Marshal(map[string]map[string]string{"Replace": {abs: file}})
	if err := os.WriteFile(filepath.Join(dir, "overlay.json"), overlay, 0o644); err != nil {
		return 0, "", err
	}
	args := []string{"test", "-count=1", "-timeout", timeout.String(), "-overlay", filepath.Join(dir, "overlay.json")}
	if run != "" {
		args = append(args, "-run", run)
	}
	// The test binary's own timeout ends a mutant that hangs; this one
	// ends a build that does.
	ctx, cancel := context.WithTimeout(ctx, timeout+5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", append(args, pkg)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	text := out.String()
	switch {
	case err == nil:
		return passed, "", nil
	case strings.Contains(text, "[build failed]") || strings.Contains(text, "[setup failed]"):
		return notViable, firstError(text), nil
	case strings.Contains(text, "panic: test timed out") || ctx.Err() != nil:
		return timedOut, "", nil
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return 0, "", err
	}
	return failed, failing(text), nil
}

var failLine = regexp.MustCompile(`(?m)^\s*--- FAIL: (\S+)`)

// failing names the tests that failed (the deepest first line of each).
func failing(out string) string {
	var names []string
	for _, m := range failLine.FindAllStringSubmatch(out, -1) {
		names = append(names, m[1])
	}
	if len(names) > 3 {
		names = append(names[:3], fmt.Sprintf("and %d more", len(names)-3))
	}
	return strings.Join(names, ", ")
}

func firstError(out string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, ".go:") {
			return strings.TrimSpace(l)
		}
	}
	return ""
}

func main() {
	only := flag.String("only", "", "mutate only the files whose path relative to the package matches this regexp (whole path)")
	funcs := flag.String("funcs", "", "mutate only the functions and methods whose name matches this regexp (whole name)")
	run := flag.String("run", "", "test each mutant with these tests first (go test -run); one they let live is tested with all")
	sample := flag.Int("sample", 0, "test this many mutants of each package, picked at random (0: all)")
	seed := flag.Uint64("seed", 1, "the random pick's seed (-sample)")
	timeout := flag.Duration("timeout", 10*time.Minute, "go test -timeout of each mutant's run")
	jsonOut := flag.String("o", "", "write the mutants and their outcome as JSON to this file")
	workers := flag.Int("workers", 1, "test this many mutants at once (a bus test mostly waits)")
	list := flag.Bool("list", false, "list the mutants (after -only and -sample) without testing them")
	fields := flag.Bool("fields", false, "also drop each key: value of a composite literal (a table's entries)")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: mutants [flags] ./PACKAGE")
		os.Exit(2)
	}
	if err := mutate(flag.Arg(0), *only, *funcs, *fields, *run, *sample, *seed, *timeout, *jsonOut, *list, *workers); err != nil {
		fmt.Fprintln(os.Stderr, "mutants:", err)
		os.Exit(1)
	}
}

func mutate(pkg, only, funcs string, fields bool, run string, sample int, seed uint64, timeout time.Duration, jsonOut string, list bool, workers int) error {
	var keep *regexp.Regexp
	if only != "" {
		var err error
		if keep, err = regexp.Compile("^(" + only + ")$"); err != nil {
			return fmt.Errorf("-only: %w", err)
		}
	}
	var inFuncs *regexp.Regexp
	if funcs != "" {
		var err error
		if inFuncs, err = regexp.Compile("^(" + funcs + ")$"); err != nil {
			return fmt.Errorf("-funcs: %w", err)
		}
	}
	names, err := filepath.Glob(filepath.Join(pkg, "*.go"))
	if err != nil {
		return err
	}
	srcs := map[string][]byte{}
	var all []mutant
	for _, name := range names {
		rel, _ := filepath.Rel(pkg, name)
		if strings.HasSuffix(name, "_test.go") || (keep != nil && !keep.MatchString(rel)) {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			return err
		}
		if bytes.Contains(src, []byte("\n// Code generated ")) || bytes.HasPrefix(src, []byte("// Code generated ")) {
			continue
		}
		ms, err := mutants(name, src, inFuncs, fields)
		if err != nil {
			return err
		}
		srcs[name] = src
		all = append(all, ms...)
	}
	total := len(all)
	if sample > 0 && sample < len(all) {
		r := rand.New(rand.NewPCG(seed, seed))
		r.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
		all = all[:sample]
		slices.SortStableFunc(all, func(a, b mutant) int {
			return strings.Compare(fmt.Sprintf("%s:%08d", a.File, a.from), fmt.Sprintf("%s:%08d", b.File, b.from))
		})
	}
	if list {
		for _, m := range all {
			fmt.Printf("%s:%d %s: %s -> %s\n", m.File, m.Line, m.Kind, m.Was, m.Is)
		}
		fmt.Printf("%d mutants of %d\n", len(all), total)
		return nil
	}
	dir, err := os.MkdirTemp("", "mutants")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	start := time.Now()
	fmt.Printf("== %s: %d mutants of %d, %s\n", pkg, len(all), total, time.Now().UTC().Format(time.RFC3339))
	ctx := context.Background()
	counts := map[string]int{}
	var (
		mu    sync.Mutex
		first error
		next  = make(chan int)
		wg    sync.WaitGroup
	)
	for w := range max(workers, 1) {
		wdir := filepath.Join(dir, strconv.Itoa(w))
		if err := os.Mkdir(wdir, 0o755); err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				m := &all[i]
				res, by, err := test(ctx, pkg, *m, srcs[m.File], run, timeout, wdir)
				if err == nil && res == passed && run != "" {
					res, by, err = test(ctx, pkg, *m, srcs[m.File], "", timeout, wdir)
				}
				mu.Lock()
				if err != nil {
					first = cmp.Or(first, err)
					mu.Unlock()
					continue
				}
				m.Outcome, m.By = [...]string{"lived", "killed", "timed out", "not viable"}[res], by
				counts[m.Outcome]++
				fmt.Printf("%-10s %s:%d %s: %s -> %s", m.Outcome, m.File, m.Line, m.Kind, m.Was, m.Is)
				if by != "" {
					fmt.Printf("  [%s]", by)
				}
				fmt.Println()
				mu.Unlock()
			}
		}()
	}
	for i := range all {
		next <- i
	}
	close(next)
	wg.Wait()
	if first != nil {
		return first
	}
	k, l := counts["killed"], counts["lived"]
	eff := "n/a"
	if k+l > 0 {
		eff = fmt.Sprintf("%.1f %%", 100*float64(k)/float64(k+l))
	}
	fmt.Printf("== %s: killed %d, lived %d, timed out %d, not viable %d; efficacy %s; %s\n",
		pkg, k, l, counts["timed out"], counts["not viable"], eff, time.Since(start).Round(time.Second))
	if jsonOut != "" {
		b, _ := json.MarshalIndent(all, "", "  ")
		return os.WriteFile(jsonOut, append(b, '\n'), 0o644)
	}
	return nil
}
