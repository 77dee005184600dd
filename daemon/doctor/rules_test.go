package doctor_test

import (
	"strings"
	"testing"

	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/dbusapi"
)

// A rule that selects nothing is a warning naming its file and line; rules
// that all select something are one ok finding; no rules, no finding.
func TestRulesThatSelectNothing(t *testing.T) {
	root := hosttest.Copy(t, "demo") // mlx5_0, mlx5_1 (one port each), mlx4_0 (two), rxe0
	pol := parsePolicy(t, `
[[roce]]
device = "mlx5_*"
tos = 106

[[roce]]
device = "mlx5_O"
mode = "v2"

[[roce]]
pci = "0000:3b:00.*"
port = 2
tos = 32

[[vpi]]
driver = "mlx4_core"
port = 2
type = "eth"

[[vpi]]
guid = "dead:beef:0000:0001"
type = "ib"
`)
	fs := diagnose(t, root, withPolicy(pol))
	var unmatched []string
	for _, f := range fs {
		if f.ID == "rule-unmatched" {
			if f.Severity != dbusapi.SeverityWarn || f.Fix == "" {
				t.Errorf("rule-unmatched is %s with fix %q, want a warning with a fix", f.Severity, f.Fix)
			}
			unmatched = append(unmatched, f.Finding)
		}
	}
	want := []string{
		`[[roce]] rule at /etc/rdma/rdmad.toml:6 (device="mlx5_O") selects no device on this host`,
		`[[roce]] rule at /etc/rdma/rdmad.toml:10 (pci="0000:3b:00.*" port 2) selects no device with port 2`,
		`[[vpi]] rule at /etc/rdma/rdmad.toml:20 (guid="dead:beef:0000:0001") selects no device on this host`,
	}
	if len(unmatched) != len(want) {
		t.Fatalf("rule-unmatched findings:\n%s\nwant %d", strings.Join(unmatched, "\n"), len(want))
	}
	for i, w := range want {
		if !strings.Contains(unmatched[i], w) {
			t.Errorf("finding %q, want it to hold %q", unmatched[i], w)
		}
	}
	if f := find(fs, "rules-matched", "host"); f != nil {
		t.Errorf("rules-matched alongside unmatched rules: %+v", f)
	}

	matched := parsePolicy(t, "[[roce]]\ndevice = \"mlx5_*\"\ntos = 106\n[[vpi]]\ndriver = \"mlx4_core\"\nport = 2\ntype = \"eth\"\n")
	mustFix(t, diagnose(t, root, withPolicy(matched)), "rules-matched", "host", dbusapi.SeverityOK, "(2)", "")
	fs = diagnose(t, root, withPolicy(parsePolicy(t, "")))
	if f, g := find(fs, "rules-matched", "host"), find(fs, "rule-unmatched", "host"); f != nil || g != nil {
		t.Errorf("a policy without rules gave %+v %+v", f, g)
	}
}
