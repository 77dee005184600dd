package bus_test

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/rdmad/rdmad/daemon/reconcile"
	"github.com/rdmad/rdmad/dbusapi"
	"github.com/rdmad/rdmad/dbusapi/client"
)

// rdmactl plan through the daemon on the mlx5 fixture whose netdevs have
// mlx5-like DCB kernels: a PFC change is marked DISRUPTS link-toggle and
// counted with its port, in the table and in -o json; a TOS change on the
// same port is not marked.
func TestPlanMarksDisruptionsThroughTheDaemon(t *testing.T) {
	addr, _, _, _ := losslessDaemon(t)
	candidate := "[[qos]]\ndevice = \"mlx5_0\"\nport = 1\npfc = [3]\n\n[[roce]]\ndevice = \"mlx5_0\"\nport = 1\ntos = 96\n"
	code, out, errOut := rdmactlStdin(t, addr, candidate, "plan", "--with", "/dev/stdin", "--as", "50-fleet.toml")
	if code != 0 {
		t.Fatalf("plan: exit %d\n%s%s", code, out, errOut)
	}
	if regexpLine(out, `^SUBJECT +SETTING +NOW +PLANNED +SOURCE +DISRUPTS +CHANGE$`) == "" ||
		regexpLine(out, `^mlx5_0/1 +qos_pfc +\[\] +\[3\] +\S+50-fleet\.toml:1 +link-toggle +set$`) == "" ||
		regexpLine(out, `^mlx5_0/1 +roce_tos +0 +96 +\S+50-fleet\.toml:6 +- +set$`) == "" {
		t.Errorf("the PFC row is not marked link-toggle, or the TOS row is:\n%s", out)
	}
	if !strings.Contains(out, "\n2 settings would change; 1 of them interrupts traffic on 1 port (mlx5_0/1)\n") {
		t.Errorf("the count does not name the interruption:\n%s", out)
	}
	code, out, errOut = rdmactlStdin(t, addr, candidate, "-o", "json", "plan", "--with", "/dev/stdin", "--as", "50-fleet.toml")
	if code != 0 {
		t.Fatalf("-o json plan: exit %d\n%s%s", code, out, errOut)
	}
	p, err := dbusapi.DecodePlan(out)
	if err != nil {
		t.Fatal(err)
	}
	pfc, tos := plannedSetting(p, "mlx5_0/1", "qos_pfc"), plannedSetting(p, "mlx5_0/1", "roce_tos")
	if pfc == nil || !pfc.Disrupts || pfc.Disruption != dbusapi.DisruptsLink || pfc.DisruptionWhen == "" {
		t.Errorf("qos_pfc: %+v", pfc)
	}
	if tos == nil || tos.Disrupts || tos.Disruption != "" {
		t.Errorf("roce_tos: %+v", tos)
	}
	if p.WouldChange != 2 || p.WouldInterrupt != 1 || strings.Join(p.Interrupted, ",") != "mlx5_0/1" {
		t.Errorf("counts: would change %d, interrupt %d on %v", p.WouldChange, p.WouldInterrupt, p.Interrupted)
	}
	if !regexp.MustCompile(`"disrupts": true`).MatchString(out) {
		t.Errorf("-o json has no \"disrupts\": true:\n%s", out)
	}

	// The table the plan used is the Manager's Disruptions property.
	c, err := client.Connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	snap, err := c.Snapshot(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var rows []string
	for _, d := range snap.Manager.Disruptions {
		rows = append(rows, d.Driver+" "+d.Setting+" "+d.Key+" "+d.Effect)
		if d.When == "" || d.Follows == "" {
			t.Errorf("row without its words: %+v", d)
		}
	}
	for _, want := range []string{"mlx5_core qos_pfc qos.pfc link-toggle", "mlx5_core qos_cable_length qos.cable_length none",
		"mlx5_core qos_trust qos.trust queue-reset", "mlx4_core vpi_type vpi.type device-reset"} {
		if !slices.Contains(rows, want) {
			t.Errorf("Disruptions has no row %q: %q", want, rows)
		}
	}
}

// The plan publishes the parts' effects by name: the contract's names are
// the reconciler's.
func TestDisruptionNamesAreTheContracts(t *testing.T) {
	for effect, name := range map[reconcile.Effect]string{reconcile.EffectQueueReset: dbusapi.DisruptsQueues,
		reconcile.EffectLinkToggle: dbusapi.DisruptsLink, reconcile.EffectDeviceReset: dbusapi.DisruptsDevice} {
		if effect.String() != name || !effect.Interrupts() {
			t.Errorf("effect %d is %q, the contract says %q", effect, effect, name)
		}
	}
	if reconcile.EffectNone.Interrupts() {
		t.Error("EffectNone interrupts")
	}
}
