package roce_test

import (
	"context"
	"strings"
	"testing"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/daemon/reconcile"
	"github.com/rdmad/rdmad/daemon/roce"
)

func tcRun(t *testing.T, k *hosttest.Kernel, toml string, publish bool) *reconcile.DeviceRun {
	t.Helper()
	pol, err := config.Parse("rdmad.toml", []byte(toml))
	if err != nil {
		t.Fatal(err)
	}
	h := k.Host()
	d, err := h.Device("mlx5_0")
	if err != nil {
		t.Fatal(err)
	}
	run := reconcile.NewDeviceRun(pol, &d)
	run.Publish = publish
	(&roce.Part{Host: h}).ApplyDevice(context.Background(), run)
	return run
}

func tcAction(run *reconcile.DeviceRun) (reconcile.Action, reconcile.Record, bool) {
	for i, a := range run.Actions {
		if a.Kind == roce.TrafficClass.Kind() {
			return a, run.Records[i], true
		}
	}
	return reconcile.Action{}, reconcile.Record{}, false
}

const tcRule = "[[roce]]\ndevice = \"mlx5_0\"\ntos = 106\ntraffic_class = true\n"

func TestTrafficClassFollowsTheTOSOnOFED(t *testing.T) {
	k := hosttest.NewKernel(hosttest.Copy(t, "mlx5-ofed"))
	run := tcRun(t, k, tcRule, false)
	a, rec, ok := tcAction(run)
	if !ok || a.Status != reconcile.Changed || a.From != "unset" || a.To != "106" || rec.State != reconcile.Holds {
		t.Fatalf("%+v %+v", a, rec)
	}
	if len(rec.Watch) != 1 || rec.Watch[0] != "sys/class/infiniband/mlx5_0/tc/1" {
		t.Errorf("the record watches %q", rec.Watch)
	}
	if got := hosttest.Read(t, k.Root, "sys/class/infiniband/mlx5_0/tc/1/traffic_class"); got != "Global tclass=106" {
		t.Errorf("the driver shows %q", got)
	}
	writes := k.WriteCount()
	if a, _, _ := tcAction(tcRun(t, k, tcRule, false)); a.Status != reconcile.Unchanged || k.WriteCount() != writes {
		t.Errorf("second pass: %s, %d writes", a.Status, k.WriteCount()-writes)
	}
	// Undo puts "unset" back as the driver takes it: -1.
	if err := (&roce.Part{Host: k.Host()}).Undo(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	if got := hosttest.Read(t, k.Root, "sys/class/infiniband/mlx5_0/tc/1/traffic_class"); got != "" {
		t.Errorf("after undo the driver shows %q, want nothing", got)
	}
	if w := k.Writes[len(k.Writes)-1]; !strings.HasSuffix(w, "traffic_class=-1") {
		t.Errorf("undo wrote %q", w)
	}
	// Without traffic_class the file is left alone, and published.
	run = tcRun(t, k, "[[roce]]\ndevice = \"mlx5_0\"\ntos = 106\n", true)
	if _, _, ok := tcAction(run); ok {
		t.Error("an action without traffic_class declared")
	}
	found := false
	for _, r := range run.Records {
		if v, ok := roce.TrafficClass.Observed(r); ok {
			found = v.String() == "unset" && !r.IsDeclared()
		}
	}
	if !found {
		t.Error("the undeclared class is not published")
	}
}

func TestTrafficClassNotApplicable(t *testing.T) {
	k := hosttest.NewKernel(hosttest.Copy(t, "mlx5")) // upstream: no tc directory
	a, rec, _ := tcAction(tcRun(t, k, tcRule, false))
	if a.Status != reconcile.NotApplicable || rec.Drifted() || !strings.Contains(a.Err.Error(), "MLNX_OFED") {
		t.Errorf("upstream: %+v", a)
	}
	a, _, _ = tcAction(tcRun(t, hosttest.NewKernel(hosttest.Copy(t, "mlx5-ofed")), "[[roce]]\ndevice = \"mlx5_0\"\ntraffic_class = true\n", false))
	if a.Status != reconcile.NotApplicable || !strings.Contains(a.Err.Error(), "declares a tos") {
		t.Errorf("without a tos: %+v", a)
	}
}
