// Package pkgtest checks the .deb and .rpm of `make package`: their contents
// against `make install`, lintian, the rpm scriptlets, and a real install,
// upgrade and purge with dpkg and rpm in a Debian root (the e2e guest image).
package pkgtest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/test/testdeps"
)

var repo = hosttest.RepoRoot()

// Package versions the tests build: v2 upgrades v1.
const (
	version1 = "1.0.0~pkgtest1"
	version2 = "1.0.0~pkgtest2"
)

type packages struct {
	dir, stage, deb, rpm string
}

var (
	buildMu sync.Mutex
	built   = map[string]*packages{}
	workDir string
)

func TestMain(m *testing.M) {
	var err error
	workDir, err = os.MkdirTemp("", "rdmad-pkgtest-")
	if err != nil {
		panic(err)
	}
	code := m.Run()
	os.RemoveAll(workDir)
	os.Exit(code)
}

// build runs the real `make package` with the given package version into a
// private output directory, once per version.
func build(t *testing.T, version string) *packages {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if p, ok := built[version]; ok {
		return p
	}
	dir := filepath.Join(workDir, version)
	cmd := exec.Command(requireTool(t, "make"), "-C", repo, "--no-print-directory", "package")
	cmd.Env = append(os.Environ(), "DIST="+dir, "PKG_VERSION="+version)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make package PKG_VERSION=%s: %v\n%s", version, err, out)
	}
	p := &packages{dir: dir, stage: filepath.Join(dir, "stage")}
	debs, _ := filepath.Glob(filepath.Join(dir, "rdmad_*.deb"))
	rpms, _ := filepath.Glob(filepath.Join(dir, "rdmad-*.rpm"))
	if len(debs) != 1 || len(rpms) != 1 {
		t.Fatalf("make package wrote debs %v and rpms %v, want one of each\n%s", debs, rpms, out)
	}
	p.deb, p.rpm = debs[0], rpms[0]
	if want := "rdmad_" + version + "_"; !strings.Contains(filepath.Base(p.deb), want) {
		t.Fatalf("deb %s does not carry version %s", p.deb, version)
	}
	built[version] = p
	return p
}

func requireTool(t *testing.T, name string) string {
	t.Helper()
	// `make test` installs every tool (test/install-deps.sh).
	pkg := map[string]string{"dpkg-deb": "dpkg", "rpmbuild": "rpm", "unshare": "util-linux", "dpkg-buildpackage": "dpkg-dev", "dh": "debhelper"}[name]
	if pkg == "" {
		pkg = name // make (make test runs in it), lintian, rpm, mmdebstrap
	}
	return testdeps.Tool(t, name, pkg)
}

// run runs a command and returns its combined output; a failure is fatal.
func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := runErr(name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return out
}

func runErr(name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	cmd.Stdin = nil // a maintainer script that prompts must fail, not hang
	err := cmd.Run()
	return buf.String(), err
}

func fileExists(p string) bool { _, err := os.Lstat(p); return err == nil }

func must(t *testing.T, cond bool, format string, args ...any) {
	t.Helper()
	if !cond {
		t.Errorf(format, args...)
	}
}

func mustf(t *testing.T, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}
