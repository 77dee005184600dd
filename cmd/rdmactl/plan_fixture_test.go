package main_test

import (
	"bytes"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/rdmad/rdmad/dbusapi"
	"github.com/rdmad/rdmad/test/bustest"
	"github.com/rdmad/rdmad/test/livetest"
)

// rdmactl plan against the real rdmad on the demo host, whose ConnectX-5
// netdevs' DCB state the fixture serves (fixture/kernel.json, mlx5's
// behaviour): a new PFC mask on mlx5_0/1 is marked DISRUPTS link-toggle
// and counted with its port, in the table and in -o json; a new TOS on the
// same port is not marked.
func TestPlanMarksAPFCChangeOnTheDemoHost(t *testing.T) {
	addr := bustest.Start(t)
	root, env := livetest.DemoHost(t)
	livetest.Start(t, bins, addr, root, env)
	candidate := "[[qos]]\ndriver = \"mlx5_core\"\nport = 1\npfc = [3]\n\n[[roce]]\ndriver = \"mlx5_core\"\nport = 1\ntos = 96\n"
	plan := func(args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		cmd := exec.Command(bins.Rdmactl, append(append([]string{"--bus", addr}, args...), "plan", "--with", "/dev/stdin", "--as", "50-fleet.toml")...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(candidate), &out, &errb
		if err := cmd.Run(); err != nil {
			t.Fatalf("rdmactl plan: %v\n%s%s", err, out.String(), errb.String())
		}
		return out.String()
	}
	out := plan()
	for _, row := range []string{`(?m)^mlx5_0/1 +qos_pfc +\[\] +\[3\] +\S+50-fleet\.toml:\d+ +link-toggle +set$`,
		`(?m)^mlx5_1/1 +qos_pfc +\[\] +\[3\] +\S+50-fleet\.toml:\d+ +link-toggle +set$`,
		`(?m)^mlx5_0/1 +roce_tos +\d+ +96 +\S+50-fleet\.toml:\d+ +- +set$`} {
		if !regexp.MustCompile(row).MatchString(out) {
			t.Errorf("no row %s:\n%s", row, out)
		}
	}
	if !regexp.MustCompile(`(?m)^\d+ settings would change; 2 of them interrupt traffic on 2 ports \(mlx5_0/1, mlx5_1/1\)$`).MatchString(out) {
		t.Errorf("the count does not name the interrupted ports:\n%s", out)
	}
	p, err := dbusapi.DecodePlan(plan("-o", "json"))
	if err != nil {
		t.Fatal(err)
	}
	var pfc, tos *dbusapi.PlannedSetting
	for i, s := range p.Settings {
		switch {
		case s.Subject.String() == "mlx5_0/1" && s.Name == "qos_pfc":
			pfc = &p.Settings[i]
		case s.Subject.String() == "mlx5_0/1" && s.Name == "roce_tos":
			tos = &p.Settings[i]
		}
	}
	if pfc == nil || !pfc.Disrupts || pfc.Disruption != dbusapi.DisruptsLink {
		t.Errorf("-o json qos_pfc: %+v", pfc)
	}
	if tos == nil || tos.Disrupts {
		t.Errorf("-o json roce_tos: %+v", tos)
	}
	if p.WouldInterrupt != 2 || strings.Join(p.Interrupted, " ") != "mlx5_0/1 mlx5_1/1" {
		t.Errorf("would_interrupt %d on %v", p.WouldInterrupt, p.Interrupted)
	}
}
