package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rdmad/rdmad/dbusapi"
)

// planFixture is a plan of the fixture host with testdata/plan/50-roce.toml:
// one TOS to set, one that holds, a PFC to set that toggles the link, a mode no longer declared, a refused
// PFC, a setting held for another owner, a link to create and modules to
// load.
func planFixture() dbusapi.Plan {
	port := func(dev string, n uint32) dbusapi.Subject { return dbusapi.Subject{Kind: "port", Device: dev, Port: n} }
	return dbusapi.Plan{Loads: true,
		Files: []string{"/etc/rdma/rdmad.toml", "/etc/rdma/rdmad.d/50-roce.toml"},
		Settings: []dbusapi.PlannedSetting{
			{Subject: port("mlx5_0", 1), Name: "roce_tos", Title: "RoCE TOS", Now: "106", Planned: "96", Source: "/etc/rdma/rdmad.d/50-roce.toml:4",
				Change: dbusapi.PlanSet, InForce: "106", InForceSource: "/etc/rdma/rdmad.toml:3"},
			{Subject: port("mlx5_1", 1), Name: "roce_tos", Title: "RoCE TOS", Now: "106", Planned: "106", Source: "/etc/rdma/rdmad.toml:3",
				Change: dbusapi.PlanNone, InForce: "106", InForceSource: "/etc/rdma/rdmad.toml:3"},
			{Subject: port("mlx5_0", 1), Name: "qos_pfc", Title: "PFC", Now: "[]", Planned: "[3]", Source: "/etc/rdma/rdmad.toml:9",
				Change: dbusapi.PlanSet, Disrupts: true, Disruption: dbusapi.DisruptsLink, DisruptionWhen: "when the PFC priorities change"},
			{Subject: port("mlx5_0", 1), Name: "roce_mode", Title: "RoCE mode", Now: "RoCE v2", Planned: "IB/RoCE v1",
				Change: dbusapi.PlanRelease, InForce: "RoCE v2", InForceSource: "/etc/rdma/rdmad.d/50-roce.toml:2"},
			{Subject: port("rxe0", 1), Name: "qos_pfc", Title: "PFC", Planned: "[3]", Source: "/etc/rdma/rdmad.toml:9",
				Change: dbusapi.PlanRefused, Why: "eth1 does not support DCB: PFC and trust cannot be set (operation not supported)"},
			{Subject: port("mlx5_0", 1), Name: "qos_trust", Title: "QoS trust", Now: "pcp", Planned: "dscp", Source: "/etc/rdma/rdmad.toml:9",
				Change: dbusapi.PlanHeld, Why: "lldpad owns DCB on ens1f0"},
			{Subject: port("mlx5_1", 1), Name: "roce_mode", Title: "RoCE mode", Now: "RoCE v2",
				Change: dbusapi.PlanRelease, InForce: "RoCE v2", InForceSource: "/etc/rdma/rdmad.d/50-roce.toml:2"},
			{Subject: dbusapi.Subject{Kind: "link", Link: "rxe1"}, Name: "soft_link", Title: "soft link", Planned: "rxe on eth2", Source: "/etc/rdma/rdmad.toml:12",
				Change: dbusapi.PlanSet},
		},
		Steps: []dbusapi.PlannedStep{{Subject: dbusapi.Subject{Kind: "host"}, Kind: "load modules", Now: "missing: rdma_rxe", Planned: "rdma_rxe"}},
	}
}

// rdmactl plan: the table, its JSON, what it sends, its exit statuses.
func TestGoldenPlan(t *testing.T) {
	f := fixture()
	f.plan = planFixture()
	addr := serveFake(t, f)
	for _, args := range []string{"plan", "-o json plan", "-j plan", "--no-legend plan",
		"plan --with testdata/plan/50-roce.toml", "plan --with testdata/plan/50-roce.toml --as 60-tos.toml"} {
		code, out, errs := runCLI(addr, strings.Fields(args)...)
		golden(t, "plan_"+goldenName(args), args, code, out, errs)
	}
	want := []string{`Plan ["",""]`, `Plan ["",""]`, `Plan ["",""]`, `Plan ["",""]`,
		`Plan ["[[roce]]\ndevice = \"mlx5_0\"\nport = 1\ntos = 96\n","50-roce.toml"]`,
		`Plan ["[[roce]]\ndevice = \"mlx5_0\"\nport = 1\ntos = 96\n","60-tos.toml"]`}
	if got := f.callLog(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("calls:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// A policy that does not load: its problems at their file:line, exit 1.
	bad := fixture()
	bad.plan = dbusapi.Plan{Problems: []dbusapi.ConfigProblem{
		{File: "/etc/rdma/rdmad.d/50-roce.toml", Line: 4, Key: "roce[0].tos", Problem: "900: want 0..255",
			Text: "/etc/rdma/rdmad.d/50-roce.toml:4: roce[0].tos: 900: want 0..255"},
		{File: "/etc/rdma/rdmad.d/50-roce.toml", Line: 1, Problem: "nested 65 levels deep; rdmad reads at most 64",
			Text: "/etc/rdma/rdmad.d/50-roce.toml:1: nested 65 levels deep; rdmad reads at most 64"}}}
	addr = serveFake(t, bad)
	for _, args := range []string{"plan --with testdata/plan/50-roce.toml", "-o json plan --with testdata/plan/50-roce.toml"} {
		code, out, errs := runCLI(addr, strings.Fields(args)...)
		if code != ExitFailure {
			t.Errorf("%s: exit %d, want 1", args, code)
		}
		golden(t, "plan_bad_"+goldenName(args), args, code, out, errs)
	}
}

// What rdmactl refuses before it asks rdmad: a wrong command line (exit
// 2), a file it cannot read or that is too big for a drop-in (exit 1).
func TestPlanRefusedBeforeTheCall(t *testing.T) {
	f := fixture()
	addr := serveFake(t, f)
	for _, args := range []string{"plan --as 50-x.toml", "plan --with testdata/plan/50-roce.toml --as ../50-x.toml",
		"plan --with testdata/plan/50-roce.toml --as 50-x.conf", "plan --with /dev/stdin", "plan now"} {
		code, out, errs := runCLI(addr, strings.Fields(args)...)
		if code != ExitUsage || out != "" || strings.Count(errs, "\n") != 2 {
			t.Errorf("%s: exit %d, want 2 and two lines on stderr:\n%s%s", args, code, out, errs)
		}
		golden(t, "usage_"+goldenName(args), args, code, out, errs)
	}
	big := filepath.Join(t.TempDir(), "big.toml")
	if err := os.WriteFile(big, []byte("# "+strings.Repeat("x", dbusapi.MaxPlanCandidate)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"plan", "--with", big}, {"plan", "--with", "testdata/plan/missing.toml"}, {"plan", "--with", "testdata/plan/", "--as", "x.toml"}} {
		code, out, errs := runCLI(addr, args...)
		if code != ExitFailure || out != "" || !strings.Contains(errs, "plan: ") {
			t.Errorf("%v: exit %d:\n%s%s", args, code, out, errs)
		}
	}
	if calls := f.callLog(); len(calls) > 0 {
		t.Errorf("refused plans reached rdmad: %v", calls)
	}
}
