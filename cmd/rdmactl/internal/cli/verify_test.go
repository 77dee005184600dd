package cli_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/rdmad/rdmad/cmd/rdmactl/internal/cli"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
)

// rdmactl verify as users meet it: no rdmad is asked (no bus is given),
// steps print as they end with cause and fix, -o json is a document, and
// the exit status is 0, 1 or 2. The tools and the real kernel are the VM
// test's; here no tool is installed, so the data steps fail naming their
// package.
func TestVerifyCommand(t *testing.T) {
	root := hosttest.Copy(t, "rxe-ready")
	t.Setenv("PATH", t.TempDir())
	run := func(args ...string) (int, string, string) {
		var out, errb strings.Builder
		code := cli.Main(args, &out, &errb)
		return code, out.String(), errb.String()
	}
	code, out, errs := run("verify", "--root", root, "--size", "1K", "--timeout", "2s")
	if code != cli.ExitFailure || !strings.Contains(errs, "verify: RDMA does not work for this user here") {
		t.Fatalf("exit %d, stderr %q\n%s", code, errs, out)
	}
	for _, want := range []string{
		"SUBJECT         STEP      RESULT      TIME  DETAIL\n",
		"host            memlock   ok        ",
		"rxe0/1          uverbs    ok        ",
		"rxe0/1          rc        fail      ",
		"                                            fix: apt-get install ibverbs-utils (RHEL: dnf install libibverbs-utils)\n",
		"\n2 ok, 2 fail, 0 skipped\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	code, out, _ = run("-o", "json", "verify", "--root", root, "--size", "1K", "rxe0/1")
	var doc struct {
		Size  uint64
		Steps []struct{ Subject, Step, Result, Fix string }
	}
	if code != cli.ExitFailure || json.Unmarshal([]byte(out), &doc) != nil || doc.Size != 1024 || len(doc.Steps) != 4 || doc.Steps[2].Step != "rc" || doc.Steps[2].Result != "fail" {
		t.Errorf("-o json: exit %d\n%s", code, out)
	}
	for _, bad := range [][]string{
		{"verify", "--size", "lots"}, {"verify", "--timeout", "soon"}, {"verify", "--min-bandwidth", "-1"},
		{"verify", "--root", root, "nosuch0"}, {"-H", "node1", "verify"},
	} {
		if code, _, errs := run(bad...); code != cli.ExitUsage {
			t.Errorf("%v: exit %d %q", bad, code, errs)
		}
	}
}
