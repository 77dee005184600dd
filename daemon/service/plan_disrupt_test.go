package service_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/rdmad/rdmad/daemon/config"

	"github.com/rdmad/rdmad/daemon/reconcile"
	"github.com/rdmad/rdmad/daemon/service"
)

// A plan marks the changes whose driver interrupts traffic, from the
// parts' table: on mlx5 a new PFC mask toggles the link and a new trust
// mode may reset the queues; a new cable length, a new DSCP entry under
// the same trust and a new TOS interrupt nothing. What holds already is
// not marked either.
func TestPlanMarksWhatInterruptsTraffic(t *testing.T) {
	svc, _, _, _ := losslessSvc(t)
	plan := func(candidate string) service.Plan {
		t.Helper()
		p, err := svc.Plan(context.Background(), []byte(candidate), "50-fleet.toml", nil)
		if err != nil || p.Err != nil {
			t.Fatalf("plan: %v %v", err, p.Err)
		}
		return p
	}
	effect := func(p service.Plan, setting string) string {
		t.Helper()
		r := planned(p, reconcile.PortSubject("mlx5_0", 1), setting)
		if r == nil {
			t.Fatalf("no mlx5_0/1 %s in the plan", setting)
		}
		if r.Disruption == nil {
			return "none"
		}
		return r.Disruption.Effect.String()
	}
	p := plan("[[qos]]\ndevice = \"mlx5_0\"\nport = 1\npfc = [3]\ntrust = \"dscp\"\ncable_length = 20\n\n[[roce]]\ndevice = \"mlx5_0\"\nport = 1\ntos = 96\n")
	for setting, want := range map[string]string{"qos_pfc": "link-toggle", "qos_trust": "queue-reset", "qos_cable_length": "none", "roce_tos": "none"} {
		if got := effect(p, setting); got != want {
			t.Errorf("%s: %s, want %s", setting, got, want)
		}
	}
	if r := planned(p, reconcile.PortSubject("mlx5_0", 1), "qos_pfc"); r.Disruption.Driver != "mlx5_core" || r.Disruption.When == "" {
		t.Errorf("the PFC row: %+v", r.Disruption)
	}

	// Once the port holds it, the same policy interrupts nothing; a DSCP
	// entry changed under dscp trust does not switch the trust mode.
	if err := svc.SetQoS(context.Background(), service.QoSChange{Device: "mlx5_0", Port: 1, Trust: "dscp", PFC: []uint8{3}, HasPFC: true}); err != nil {
		t.Fatal(err)
	}
	p = plan("[[qos]]\ndevice = \"mlx5_0\"\nport = 1\npfc = [3]\ntrust = \"dscp\"\ndscp_prio = { 26 = 5 }\n")
	if r := planned(p, reconcile.PortSubject("mlx5_0", 1), "qos_trust"); !r.Writes() || r.Disruption != nil {
		t.Errorf("a DSCP entry under dscp trust: writes %v, disruption %+v", r.Writes(), r.Disruption)
	}
	if r := planned(p, reconcile.PortSubject("mlx5_0", 1), "qos_pfc"); r.Writes() || r.Disruption != nil {
		t.Errorf("PFC that holds: writes %v, disruption %+v", r.Writes(), r.Disruption)
	}

	// A drop-in that declared PFC, planned away: the pass would put back
	// the mask rdmad found, which toggles the link too.
	svc, _, _, root := losslessSvc(t)
	if err := os.MkdirAll(filepath.Join(root, config.DropInDir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, config.DropInDir, "50-fleet.toml"), []byte("[[qos]]\ndevice = \"mlx5_0\"\nport = 1\npfc = [3]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := svc.Reload(); err != nil {
		t.Fatal(err)
	}
	svc.ReconcileNow(context.Background())
	p = plan("")
	if r := planned(p, reconcile.PortSubject("mlx5_0", 1), "qos_pfc"); r == nil || !r.Released() || r.PutBack != "[]" || r.Disruption == nil ||
		r.Disruption.Effect != reconcile.EffectLinkToggle {
		t.Errorf("released PFC: %+v", r)
	}
}
