// Package testdeps is what a test does when a program or Python module that
// test/install-deps.sh installs is missing: on a machine without it, `go
// test ./...` skips the test and says what is missing and which package
// brings it; where install-deps.sh ran (`make test` sets RDMAD_TEST_DEPS=1
// after it), a missing one fails the test instead, so CI never passes by
// skipping. Only tests import it.
package testdeps

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// Env is the variable `make test` sets once test/install-deps.sh ran.
const Env = "RDMAD_TEST_DEPS"

// Installed reports whether Env says test/install-deps.sh ran.
func Installed() bool { return os.Getenv(Env) != "" }

// Missing ends t for what is missing (a program, a file, a Python module)
// that the Debian package pkg provides: skipped with the reason, or failed
// when install-deps.sh ran. err, when not nil, says what was tried.
func Missing(t testing.TB, what, pkg string, err error) {
	t.Helper()
	why := ""
	if err != nil {
		why = ": " + err.Error()
	}
	if Installed() {
		t.Fatalf("%s is missing although test/install-deps.sh ran (%s is set): it installs %s%s", what, Env, pkg, why)
		return
	}
	t.Skipf("%s is missing (test/install-deps.sh test installs %s; make test runs it)%s", what, pkg, why)
}

// Tool is the path of the program name, which the Debian package pkg
// provides; Missing when it is not in PATH.
func Tool(t testing.TB, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		Missing(t, name, pkg, nil)
	}
	return p
}

// File checks that the file path, which the Debian package pkg provides,
// exists; Missing when it does not.
func File(t testing.TB, path, pkg string) {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		Missing(t, path, pkg, nil)
	}
}

// Python3 checks that Debian's /usr/bin/python3 (not one first in PATH:
// the examples and checks run Debian's) imports each module, which the
// Debian packages pkgs provide; Missing when one does not.
func Python3(t testing.TB, pkgs string, modules ...string) {
	t.Helper()
	script := "import " + strings.Join(modules, ", ")
	if out, err := exec.Command("/usr/bin/python3", "-c", script).CombinedOutput(); err != nil {
		Missing(t, fmt.Sprintf("/usr/bin/python3 with %s", strings.Join(modules, ", ")), pkgs,
			fmt.Errorf("%s: %w %s", script, err, strings.TrimSpace(lastLine(string(out)))))
	}
}

// Python3Imports checks that Debian's /usr/bin/python3 runs the import
// statements of the Python script at path, as the script will run them
// (its lines that begin with "import " or "from " at the left margin):
// what the script imports, not the package it comes from, so a package
// that is there but broken or partial (kubernetes without
// kubernetes.client) ends t here with the statement that failed and
// Python's error, not in the script. pkgs are the Debian packages that
// provide them.
func Python3Imports(t testing.TB, pkgs, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the imports of %s: %v", path, err)
		return
	}
	var imports []string
	for _, line := range strings.Split(string(data), "\n") {
		if !strings.HasPrefix(line, "import ") && !strings.HasPrefix(line, "from ") {
			continue
		}
		if strings.HasSuffix(strings.TrimSpace(line), "(") || strings.HasSuffix(line, "\\") {
			t.Fatalf("%s: %q: an import over several lines is not probed; write it on one", path, line)
			return
		}
		imports = append(imports, line)
	}
	if len(imports) == 0 {
		t.Fatalf("%s has no import statement at the left margin to probe", path)
		return
	}
	out, err := exec.Command("/usr/bin/python3", "-c", strings.Join(imports, "\n")).CombinedOutput()
	if err == nil {
		return
	}
	failed := strings.Join(imports, "; ")
	// Python names the line of the probe that failed: File "<string>", line N.
	if m := probeLine.FindStringSubmatch(string(out)); m != nil {
		if n, _ := strconv.Atoi(m[1]); n >= 1 && n <= len(imports) {
			failed = imports[n-1]
		}
	}
	Missing(t, fmt.Sprintf("/usr/bin/python3 with what %s imports", filepath.Base(path)), pkgs,
		fmt.Errorf("%s: %w %s", failed, err, strings.TrimSpace(lastLine(string(out)))))
}

var probeLine = regexp.MustCompile(`File "<string>", line (\d+)`)

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}
