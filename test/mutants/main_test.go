package main

import (
	"go/parser"
	"go/token"
	"regexp"
	"slices"
	"testing"
)

const sample = `package p

func check(ok bool, n int) error {
	if !ok && n >= 2 {
		return nil
	}
	defer done()
	log(n)
	return nil
}
`

// Each kind of mutant is made where it applies, and only there (the
// function's last return is not dropped: it would not compile), and each
// mutant is Go that parses.
func TestMutants(t *testing.T) {
	ms, err := mutants("p.go", []byte(sample), nil, false)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range ms {
		got = append(got, m.Kind+": "+m.Was+" -> "+m.Is)
		src := sample[:m.from] + m.text + sample[m.to:]
		if _, err := parser.ParseFile(token.NewFileSet(), "p.go", src, 0); err != nil {
			t.Errorf("%s:%d %s does not parse: %v\n%s", m.File, m.Line, m.Kind, err, src)
		}
	}
	want := []string{
		"negate condition: !ok && n >= 2 -> !(!ok && n >= 2)",
		"flip comparison: && -> ||",
		"flip comparison: >= -> <",
		"drop return: return nil -> if false { return nil }",
		"drop deferred call: defer done() -> if false { defer done() }",
		"drop call: log(n) -> if false { log(n) }",
	}
	if !slices.Equal(got, want) {
		t.Errorf("mutants:\n%q\nwant\n%q", got, want)
	}
	ms, _ = mutants("p.go", []byte(sample), regexp.MustCompile("^(other)$"), false)
	if len(ms) != 0 {
		t.Errorf("-funcs other: %d mutants of check", len(ms))
	}
}

const table = `package p

type method struct {
	name     string
	declares bool
}

var methods = []method{
	{name: "a", declares: true},
	{name: "b"},
}
`

// -fields drops each key: value of a composite literal, its comma with
// it, and nothing else.
func TestFieldMutants(t *testing.T) {
	ms, err := mutants("p.go", []byte(table), nil, true)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range ms {
		src := table[:m.from] + m.text + table[m.to:]
		got = append(got, m.Kind+": "+m.Was)
		if _, err := parser.ParseFile(token.NewFileSet(), "p.go", src, 0); err != nil {
			t.Errorf("%s does not parse: %v\n%s", m.Was, err, src)
		}
	}
	want := []string{`drop field: name: "a",`, "drop field: declares: true", `drop field: name: "b"`}
	if !slices.Equal(got, want) {
		t.Errorf("mutants:\n%q\nwant\n%q", got, want)
	}
	if ms, _ := mutants("p.go", []byte(table), nil, false); len(ms) != 0 {
		t.Errorf("without -fields: %d mutants", len(ms))
	}
}
