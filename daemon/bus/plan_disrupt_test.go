package bus_test

import (
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/daemon/reconcile"
	"github.com/rdmad/rdmad/dbusapi"
	"github.com/rdmad/rdmad/dbusapi/client"
	"github.com/rdmad/rdmad/test/bustest"
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

// The Manager's Disruptions property is the parts' table, whole and in
// order, converted once for this rdmad: after a pass and a reload with a
// configuration error rebuild the Manager it is still the table, beside
// the properties that changed.
func TestDisruptionsTableStaysPublished(t *testing.T) {
	dir := bustest.PublicDir(t)
	addr := privateBus(t, dir)
	root := fixture(t, dir, "mlx5", "[modules]\nenable = false\n")
	d := startDaemon(t, addr, root)
	var want []dbusapi.Disruption
	for _, r := range d.svc.Reconciler().Disruptions() {
		want = append(want, dbusapi.Disruption{Driver: r.Driver, Setting: r.Setting.Name, Key: string(r.Setting.Key), Effect: r.Effect.String(),
			When: r.When, Follows: r.Follows})
	}
	if len(want) == 0 {
		t.Fatal("the parts have no table")
	}
	obj := d.conn.Object(dbusapi.BusName, dbusapi.RootPath)
	check := func(step string) {
		t.Helper()
		if err := d.srv.Flush(t.Context()); err != nil {
			t.Fatal(err)
		}
		v, err := obj.GetProperty(dbusapi.ManagerIface + ".Disruptions")
		if err != nil {
			t.Fatal(err)
		}
		var got []dbusapi.Disruption
		if err := dbus.Store([]any{v.Value()}, &got); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: Disruptions %+v, want the parts' table %+v", step, got, want)
		}
	}
	check("at start")
	last := func() uint64 {
		v, err := obj.GetProperty(dbusapi.ManagerIface + ".LastReconcile")
		if err != nil {
			t.Fatal(err)
		}
		return v.Value().(uint64)
	}
	before := last()
	time.Sleep(time.Millisecond) // LastReconcile counts microseconds
	d.svc.ReconcileNow(t.Context())
	check("after a pass")
	if after := last(); after == before {
		t.Errorf("the pass did not change the Manager: LastReconcile %d", after)
	}
	hosttest.Write(t, root, config.MainFile, "[modules]\nenable = maybe\n")
	if err := d.svc.Reload(); err == nil {
		t.Fatal("a configuration error was loaded")
	}
	check("after a reload that failed")
	v, err := obj.GetProperty(dbusapi.ManagerIface + ".ConfigError")
	if err != nil || v.Value().(string) == "" {
		t.Errorf("the reload's error is not published: %v %v", v, err)
	}
}
