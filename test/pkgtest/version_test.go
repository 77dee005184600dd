package pkgtest

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// packaging/version.sh maps git describe to a package version dpkg orders
// as releases go: an untagged build (whatever its hash looks like) sorts
// below the first release, and a later build above an earlier one.
func TestPackageVersions(t *testing.T) {
	script := filepath.Join(repo, "packaging/version.sh")
	version := func(v string) string {
		t.Helper()
		out, err := exec.Command(script, v).Output()
		if err != nil {
			t.Fatalf("version.sh %s: %v", v, err)
		}
		return strings.TrimSpace(string(out))
	}
	untagged := regexp.MustCompile(`^0\.0~git[0-9]+\.g`)
	cases := map[string]string{
		"v1.2.3":            "1.2.3",
		"v1.2.3-4-gabc1234": "1.2.3+4.gabc1234",
		"v1.2.3-dirty":      "1.2.3.dirty",
		"0.1.0-dev":         "0.1.0~dev",
	}
	for in, want := range cases {
		if got := version(in); got != want {
			t.Errorf("version.sh %s = %s, want %s", in, got, want)
		}
	}
	// A hash made only of digits is a hash, not release 9253944.
	for _, in := range []string{"abc1234", "9253944", "9253944-dirty"} {
		if got := version(in); !untagged.MatchString(got) {
			t.Errorf("version.sh %s = %s, want an untagged 0.0~git… version", in, got)
		}
	}
	dpkg, err := exec.LookPath("dpkg")
	if err != nil {
		t.Skip("no dpkg to compare versions")
	}
	ordered := []string{version("9253944"), version("v0.1.0"), version("v0.1.0-3-g1234567"), version("v0.2.0")}
	for i := 1; i < len(ordered); i++ {
		if err := exec.Command(dpkg, "--compare-versions", ordered[i-1], "lt", ordered[i]).Run(); err != nil {
			t.Errorf("dpkg does not order %s before %s", ordered[i-1], ordered[i])
		}
	}
}
