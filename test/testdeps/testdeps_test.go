package testdeps_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rdmad/rdmad/test/testdeps"
)

// recorder is a testing.TB that records how a test would end.
type recorder struct {
	testing.TB
	skipped, failed string
}

func (r *recorder) Helper()                           {}
func (r *recorder) Skipf(format string, args ...any)  { r.skipped = fmt.Sprintf(format, args...) }
func (r *recorder) Fatalf(format string, args ...any) { r.failed = fmt.Sprintf(format, args...) }

// A missing tool skips the test with its reason, and fails it once
// install-deps.sh ran; a tool that is there does neither.
func TestMissingSkipsOrFails(t *testing.T) {
	eachInstalled(t, func(installed bool) {
		r := &recorder{TB: t}
		testdeps.Tool(r, "rdmad-no-such-tool", "rdmad-no-such-package")
		got, other := r.ending(installed)
		if !strings.Contains(got, "rdmad-no-such-tool is missing") || !strings.Contains(got, "installs rdmad-no-such-package") || other != "" {
			t.Errorf("installed=%v: skipped %q, failed %q", installed, r.skipped, r.failed)
		}
		r = &recorder{TB: t}
		testdeps.Python3(r, "python3-rdmad-none", "rdmad_no_such_module")
		if r.skipped == "" && r.failed == "" {
			t.Errorf("installed=%v: a Python module that does not exist passed", installed)
		}
		r = &recorder{TB: t}
		if p := testdeps.Tool(r, "go", "golang-go"); p == "" || r.skipped != "" || r.failed != "" {
			t.Errorf("installed=%v: go in PATH: %q, skipped %q, failed %q", installed, p, r.skipped, r.failed)
		}
	})
}

// eachInstalled runs fn as on a machine where install-deps.sh did not run,
// then as where it did.
func eachInstalled(t *testing.T, fn func(installed bool)) {
	t.Helper()
	for _, installed := range []bool{false, true} {
		v := ""
		if installed {
			v = "1"
		}
		t.Setenv(testdeps.Env, v)
		fn(installed)
	}
}

// ending is what r recorded the way a missing dependency should end the
// test (skipped; failed once install-deps.sh ran), and the other way.
func (r *recorder) ending(installed bool) (got, other string) {
	if installed {
		return r.failed, r.skipped
	}
	return r.skipped, r.failed
}

// A script's imports are probed as the script writes them: a package that
// is there but partial (a module without the submodule the script takes
// from it) skips the test, naming the statement and Python's error, or
// fails it once install-deps.sh ran; a script whose imports all work
// passes.
func TestPython3ImportsProbesTheScriptsOwnStatements(t *testing.T) {
	testdeps.File(t, "/usr/bin/python3", "python3")
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "rdmad_partial"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rdmad_partial", "__init__.py"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PYTHONPATH", dir)
	script := func(body string) string {
		p := filepath.Join(t.TempDir(), "check.py")
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	partial := script("#!/usr/bin/python3\n\"\"\"import this, from that: not code\"\"\"\n\nimport json\nimport rdmad_partial\nfrom rdmad_partial import client\n\n\ndef main():\n    import os\n")
	eachInstalled(t, func(installed bool) {
		r := &recorder{TB: t}
		testdeps.Python3Imports(r, "python3-rdmad-partial", partial)
		got, other := r.ending(installed)
		for _, want := range []string{"/usr/bin/python3 with what check.py imports is missing", "from rdmad_partial import client:", "cannot import name 'client'", "python3-rdmad-partial"} {
			if !strings.Contains(got, want) || other != "" {
				t.Errorf("installed=%v: lacks %q: skipped %q, failed %q", installed, want, r.skipped, r.failed)
			}
		}
	})
	r := &recorder{TB: t}
	testdeps.Python3Imports(r, "python3-rdmad-partial", script("import json\nimport rdmad_partial\nfrom os import path\n"))
	if r.skipped != "" || r.failed != "" {
		t.Errorf("imports that work: skipped %q, failed %q", r.skipped, r.failed)
	}
	r = &recorder{TB: t}
	testdeps.Python3Imports(r, "python3-rdmad-partial", script("from os import (\n    path,\n)\n"))
	if !strings.Contains(r.failed, "over several lines") {
		t.Errorf("an import over several lines: skipped %q, failed %q", r.skipped, r.failed)
	}
}
