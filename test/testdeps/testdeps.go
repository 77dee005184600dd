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

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}
