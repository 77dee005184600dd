package pkgtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// treeVersion is the version the Makefile stamps into the binaries: what
// packaging/version.sh says of this tree.
func treeVersion(t *testing.T) string {
	t.Helper()
	out, err := exec.Command(filepath.Join(repo, "packaging/version.sh")).Output()
	if err != nil {
		t.Fatalf("packaging/version.sh: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// The tree's version is VERSION's semantic version, and a development build
// says it is one.
func TestTreeVersionComesFromVERSION(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repo, "VERSION"))
	mustf(t, err, "VERSION")
	file := strings.TrimSpace(string(data))
	if !regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$`).MatchString(file) {
		t.Fatalf("VERSION holds %q, not MAJOR.MINOR.PATCH[-PRE]", file)
	}
	v := treeVersion(t)
	if v != file && !regexp.MustCompile(`^`+regexp.QuoteMeta(file)+`\+[0-9]+\.g[0-9a-f]{7,}(\.dirty)?$`).MatchString(v) {
		t.Errorf("version.sh = %q, want %q or %q+N.gHASH", v, file, file)
	}
}

// gitRepo makes a repository holding version.sh and a VERSION file.
func gitRepo(t *testing.T, version string) (dir string, git func(...string) string, script string) {
	t.Helper()
	dir = t.TempDir()
	git = func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=t", "-c", "user.email=t@example.org", "-c", "commit.gpgsign=false", "-c", "tag.gpgsign=false"}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	git("init", "-q")
	script = filepath.Join(dir, "packaging/version.sh")
	src, err := os.ReadFile(filepath.Join(repo, "packaging/version.sh"))
	mustf(t, err, "version.sh")
	mustf(t, os.MkdirAll(filepath.Dir(script), 0o755), "mkdir")
	mustf(t, os.WriteFile(script, src, 0o755), "write version.sh")
	mustf(t, os.WriteFile(filepath.Join(dir, "VERSION"), []byte(version+"\n"), 0o644), "write VERSION")
	git("add", ".")
	git("commit", "-qm", "release "+version)
	return dir, git, script
}

func versionOf(t *testing.T, script string, args ...string) (string, error) {
	t.Helper()
	out, err := exec.Command(script, args...).Output()
	return strings.TrimSpace(string(out)), err
}

// The release is the commit tagged v<VERSION> with nothing changed; every
// other build is VERSION+N.gHASH, N counting commits after the tag (or,
// before the tag exists, after the commit that last changed VERSION).
func TestVersionOfABuild(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	dir, git, script := gitRepo(t, "1.2.3")
	short := func() string { return git("rev-parse", "--short=7", "HEAD") }
	check := func(what, want string) {
		t.Helper()
		got, err := versionOf(t, script)
		if err != nil || got != want {
			t.Errorf("%s: version.sh = %q (%v), want %q", what, got, err, want)
		}
	}
	check("the commit that sets VERSION, untagged", "1.2.3+0.g"+short())
	mustf(t, os.WriteFile(filepath.Join(dir, "a"), []byte("a"), 0o644), "write")
	git("add", "a")
	git("commit", "-qm", "a")
	check("one commit after VERSION changed", "1.2.3+1.g"+short())
	git("tag", "v1.2.3")
	check("the tagged commit", "1.2.3")
	mustf(t, os.WriteFile(filepath.Join(dir, "a"), []byte("b"), 0o644), "write")
	check("the tagged commit with a change", "1.2.3+0.g"+short()+".dirty")
	git("commit", "-qam", "b")
	check("one commit after the tag", "1.2.3+1.g"+short())

	// Outside git (the tarball of make dist): VERSION as it is.
	mustf(t, os.RemoveAll(filepath.Join(dir, ".git")), "rm .git")
	mustf(t, os.WriteFile(filepath.Join(dir, "VERSION"), []byte("1.2.3+1.gabc1234\n"), 0o644), "write")
	check("a source tarball", "1.2.3+1.gabc1234")
	for _, bad := range []string{"1.2", "v1.2.3", "1.2.3 beta", ""} {
		mustf(t, os.WriteFile(filepath.Join(dir, "VERSION"), []byte(bad+"\n"), 0o644), "write")
		if got, err := versionOf(t, script); err == nil {
			t.Errorf("VERSION %q: version.sh = %q, want an error", bad, got)
		}
	}
}

// Package versions keep the order of builds in dpkg and rpm: a pre-release
// before its release, the release before its development builds, those in
// commit order, and every build of this tree after the 0.0~git versions of
// the builds before VERSION existed.
func TestPackageVersions(t *testing.T) {
	script := filepath.Join(repo, "packaging/version.sh")
	cases := map[string]string{
		"1.2.3":                     "1.2.3",
		"1.2.3+4.gabc1234":          "1.2.3+4.gabc1234",
		"1.2.3+4.gabc1234.dirty":    "1.2.3+4.gabc1234.dirty",
		"1.3.0-rc.1":                "1.3.0~rc.1",
		"1.3.0-rc-1+2.gabc1234":     "1.3.0~rc.1+2.gabc1234",
		"1.2.3+4.gabc1234-e2e-up2":  "1.2.3+4.gabc1234.e2e.up2",
		"10.20.30-alpha.beta+x.y.z": "10.20.30~alpha.beta+x.y.z",
	}
	for in, want := range cases {
		if got, err := versionOf(t, script, "--package", in); err != nil || got != want {
			t.Errorf("version.sh --package %s = %q (%v), want %s", in, got, err, want)
		}
	}
	for _, bad := range []string{"v1.2.3", "1.2", "abc1234"} {
		if got, err := versionOf(t, script, "--package", bad); err == nil {
			t.Errorf("version.sh --package %s = %q, want an error", bad, got)
		}
	}
	ordered := []string{"0.0~git312.g9253944", "1.0.0~rc.1", "1.0.0", "1.0.0+1.gabc1234", "1.0.0+2.g0123456", "1.0.0+10.gfff0000", "1.0.1"}
	if dpkg, err := exec.LookPath("dpkg"); err == nil {
		for i := 1; i < len(ordered); i++ {
			if err := exec.Command(dpkg, "--compare-versions", ordered[i-1], "lt", ordered[i]).Run(); err != nil {
				t.Errorf("dpkg does not order %s before %s", ordered[i-1], ordered[i])
			}
		}
	}
	if rpm, err := exec.LookPath("rpm"); err == nil {
		for i := 1; i < len(ordered); i++ {
			out, err := exec.Command(rpm, "--eval", `%{lua: print(rpm.vercmp("`+ordered[i-1]+`", "`+ordered[i]+`"))}`).Output()
			if err != nil || strings.TrimSpace(string(out)) != "-1" {
				t.Errorf("rpm does not order %s before %s (vercmp %q, %v)", ordered[i-1], ordered[i], out, err)
			}
		}
	}
}
