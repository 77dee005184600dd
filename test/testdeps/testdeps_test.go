package testdeps_test

import (
	"fmt"
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
	for _, installed := range []bool{false, true} {
		v := ""
		if installed {
			v = "1"
		}
		t.Setenv(testdeps.Env, v)
		r := &recorder{TB: t}
		testdeps.Tool(r, "rdmad-no-such-tool", "rdmad-no-such-package")
		got, other := r.skipped, r.failed
		if installed {
			got, other = r.failed, r.skipped
		}
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
	}
}
