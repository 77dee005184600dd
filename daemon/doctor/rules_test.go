package doctor_test

import (
	"strings"
	"testing"

	"github.com/rdmad/rdmad/daemon/bus"
	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/doctor"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
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

[[roce]]
device = "mlx4_0"
port = 1
tos = 32

[[vpi]]
device = "mlx5_*"
type = "eth"

[[roce]]
device = 'weird\*'
tos = 1
`)
	// A rule set at runtime for a device that has gone since.
	pol.RoCE = append(pol.RoCE, config.RoCERule{Source: config.Position{File: config.RuntimeFile}, Selector: config.Selector{Device: config.Glob("mlx5_9")}, Port: 1, Mode: config.RoCEv2})
	fs := diagnose(t, root, withPolicy(pol))
	var unmatched []string
	for _, f := range fs {
		if f.ID == "rule-unmatched" {
			if f.Severity != doctor.SeverityWarn || f.Fix == "" {
				t.Errorf("rule-unmatched is %s with fix %q, want a warning with a fix", f.Severity, f.Fix)
			}
			unmatched = append(unmatched, f.Finding)
		}
	}
	want := []string{ // [[roce]] rules in order, then [[vpi]]
		`[[roce]] rule at /etc/rdma/rdmad.toml:6 (device="mlx5_O") selects no device on this host`,
		`[[roce]] rule at /etc/rdma/rdmad.toml:10 (pci="0000:3b:00.*" port 2) selects no device with port 2`,
		// mlx4_0/1 is InfiniBand: the rule selects it and applies to nothing.
		`[[roce]] rule at /etc/rdma/rdmad.toml:24 (device="mlx4_0" port 1) selects only ports that are not RoCE`,
		// As declared: the bus escapes it once when it publishes it.
		`[[roce]] rule at /etc/rdma/rdmad.toml:33 (device="weird\*") selects no device`,
		`[[roce]] rule set at runtime (rdmactl roce set without --persist) (device="mlx5_9" port 1) selects no device on this host`,
		`[[vpi]] rule at /etc/rdma/rdmad.toml:20 (guid="dead:beef:0000:0001") selects no device on this host`,
		`[[vpi]] rule at /etc/rdma/rdmad.toml:29 (device="mlx5_*") selects only devices that are not mlx4 VPI adapters`,
	}
	if len(unmatched) != len(want) {
		t.Fatalf("rule-unmatched findings:\n%s\nwant %d", strings.Join(unmatched, "\n"), len(want))
	}
	for i, w := range want {
		if !strings.Contains(unmatched[i], w) {
			t.Errorf("finding %q, want it to hold %q", unmatched[i], w)
		}
	}
	published := false
	for _, f := range bus.Findings(fs) {
		// Escaped once, as published: the backslash is \\, not \\\\.
		published = published || strings.Contains(f.Finding, `(device="weird\\*") selects no device`)
	}
	if !published {
		t.Errorf("the weird\\* rule's finding is not published escaped once")
	}
	for _, f := range fs {
		if f.ID == "rule-unmatched" && strings.Contains(f.Finding, "at runtime") &&
			(!strings.Contains(f.Fix, "until rdmad restarts") || strings.Contains(f.Fix, "delete")) {
			t.Errorf("a runtime rule's fix %q, want no file to edit and how long it lasts", f.Fix)
		}
	}
	if f := find(fs, "rules-matched", "host"); f != nil {
		t.Errorf("rules-matched alongside unmatched rules: %+v", f)
	}

	matched := parsePolicy(t, "[[roce]]\ndevice = \"mlx5_*\"\ntos = 106\n[[vpi]]\ndriver = \"mlx4_core\"\nport = 2\ntype = \"eth\"\n")
	mustFix(t, diagnose(t, root, withPolicy(matched)), "rules-matched", "host", doctor.SeverityOK, "(2)", "")
	fs = diagnose(t, root, withPolicy(parsePolicy(t, "")))
	if f, g := find(fs, "rules-matched", "host"), find(fs, "rule-unmatched", "host"); f != nil || g != nil {
		t.Errorf("a policy without rules gave %+v %+v", f, g)
	}
}
