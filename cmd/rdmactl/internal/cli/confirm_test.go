package cli

import (
	"strings"
	"testing"

	"github.com/godbus/dbus/v5"

	"github.com/rdmad/rdmad/dbusapi"
)

// A change that interrupts traffic: on a terminal rdmactl lists it and
// asks before the call; no (or no answer) changes nothing and exits 1,
// yes and --yes make the call, which is noted once rdmad accepted it; a
// refused call notes nothing. A change that interrupts nothing asks
// nothing. The rows come from rdmad's Disruptions property.
func TestQoSSetAsksBeforeInterruptingTraffic(t *testing.T) {
	f := fixture()
	addr := serveFake(t, f)
	set := []string{"qos", "set", "mlx5_0/1", "--pfc", "3,4"}

	code, _, errs := runTerminal(addr, "n\n", set...)
	if code != ExitFailure || !strings.Contains(errs, "mlx5_0/1 (ens1f0): PFC 3 to 3,4: mlx5_core takes the port's link down and up") ||
		!strings.Contains(errs, "qos set interrupts traffic on 1 port. Go on? [y/N] ") || !strings.Contains(errs, "not confirmed; nothing was changed") ||
		strings.Contains(errs, "note:") {
		t.Errorf("answered no: exit %d\n%s", code, errs)
	}
	if calls := f.callLog(); len(calls) != 0 {
		t.Errorf("answered no, yet rdmactl called %v", calls)
	}
	if code, _, errs := runTerminal(addr, "", set...); code != ExitFailure || len(f.callLog()) != 0 {
		t.Errorf("no answer (end of input): exit %d, calls %v\n%s", code, f.callLog(), errs)
	}

	code, _, errs = runTerminal(addr, "y\n", set...)
	if code != ExitOK || !strings.Contains(errs, "Go on? [y/N] rdmactl: note: mlx5_0/1 (ens1f0): PFC 3 to 3,4") {
		t.Errorf("answered yes: exit %d\n%s", code, errs)
	}
	code, _, errs = runTerminal(addr, "", append(set, "--yes")...)
	if code != ExitOK || strings.Contains(errs, "Go on?") || !strings.Contains(errs, "rdmactl: note: mlx5_0/1 (ens1f0): PFC 3 to 3,4") {
		t.Errorf("--yes: exit %d\n%s", code, errs)
	}
	if calls := f.callLog(); len(calls) != 2 {
		t.Errorf("calls after yes and --yes: %v", calls)
	}

	// The PFC the port holds already, or a cable length: nothing to ask.
	for _, args := range [][]string{{"qos", "set", "mlx5_0/1", "--pfc", "3"}, {"qos", "set", "mlx5_0/1", "--cable-length", "20"}} {
		if code, _, errs := runTerminal(addr, "", args...); code != ExitOK || errs != "" {
			t.Errorf("%v: exit %d\n%s", args, code, errs)
		}
	}

	// rdmad refuses the call: no note.
	f.callErr = &dbus.Error{Name: dbusapi.ErrFailed, Body: []any{"set PFC of ens1f0: operation not supported"}}
	code, _, errs = runTerminal(addr, "", append(set, "--yes")...)
	if code != ExitFailure || strings.Contains(errs, "note:") || !strings.Contains(errs, "operation not supported") {
		t.Errorf("refused call: exit %d\n%s", code, errs)
	}
	code, _, errs = runCLI(addr, set...)
	if code != ExitFailure || strings.Contains(errs, "note:") {
		t.Errorf("refused call, not on a terminal: exit %d\n%s", code, errs)
	}
}

// reload and reconcile ask rdmad's plan first on a terminal: a plan that
// toggles a link is listed and asked about.
func TestReloadAsksWhenThePlanInterruptsTraffic(t *testing.T) {
	f := fixture()
	f.plan = planFixture()
	addr := serveFake(t, f)
	for _, cmd := range []string{"reload", "reconcile"} {
		code, _, errs := runTerminal(addr, "no\n", cmd)
		if code != ExitFailure || !strings.Contains(errs, "mlx5_0/1: qos_pfc [] to [3]: the driver takes the port's link down and up when the PFC priorities change") {
			t.Errorf("%s answered no: exit %d\n%s", cmd, code, errs)
		}
		code, _, errs = runTerminal(addr, "yes\n", cmd)
		if code != ExitOK || !strings.Contains(errs, "rdmactl: note: mlx5_0/1: qos_pfc [] to [3]") {
			t.Errorf("%s answered yes: exit %d\n%s", cmd, code, errs)
		}
	}
	if got := strings.Join(f.callLog(), " "); strings.Count(got, "Plan") != 4 || !strings.Contains(got, "Reload") || !strings.Contains(got, "Reconcile") {
		t.Errorf("calls: %s", got)
	}
	// Without a terminal, or with --yes, no plan is asked for.
	f2 := fixture()
	f2.plan = planFixture()
	addr = serveFake(t, f2)
	runCLI(addr, "reload")
	runTerminal(addr, "", "reconcile", "--yes")
	if got := strings.Join(f2.callLog(), " "); strings.Contains(got, "Plan") {
		t.Errorf("a plan was asked for without a question: %s", got)
	}
}

// qos unset asks when a PFC or trust declared at run time goes on a
// driver whose change of it interrupts traffic; what the files declare is
// not withdrawn, so a port without a runtime declaration asks nothing.
func TestQoSUnsetAsksForARuntimePFC(t *testing.T) {
	f := fixture()
	addr := serveFake(t, f)
	if code, _, errs := runTerminal(addr, "", "qos", "unset", "mlx5_0/1"); code != ExitOK || errs != "" {
		t.Errorf("declared in a file only: exit %d\n%s", code, errs)
	}
	f.mu.Lock()
	f.devices[1].Ports[0].DesiredQoSSource = "runtime"
	f.mu.Unlock()
	code, _, errs := runTerminal(addr, "n\n", "qos", "unset", "mlx5_0/1")
	if code != ExitFailure || !strings.Contains(errs, "mlx5_0/1 (ens1f0): pfc withdrawn (the files' or the value found may differ): mlx5_core takes the port's link down and up") ||
		!strings.Contains(errs, "trust withdrawn") {
		t.Errorf("runtime PFC and trust: exit %d\n%s", code, errs)
	}
	if got := f.callLog(); len(got) != 1 {
		t.Errorf("calls: %v", got)
	}
}
