package reconcile_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/daemon/reconcile"
	"github.com/rdmad/rdmad/daemon/roce"
	"github.com/rdmad/rdmad/dbusapi"
)

// Each correction reaches the listeners with the pass that stored it,
// subject, setting, the value found and the one restored; the record
// counts the corrections of its setting; the correction that makes the
// setting contested also says so, once, with the count and the end of
// the back-off.
func TestCorrectionsReachTheListeners(t *testing.T) {
	e := newDriftEnv(t, config.DriftCorrect)
	var changes []reconcile.Change
	e.r.OnChange(func(ch reconcile.Change) { changes = append(changes, ch) })
	port := reconcile.PortSubject("mlx5_0", 1)
	for i := 1; i <= reconcile.ContestCorrections; i++ {
		e.now = e.now.Add(time.Second)
		e.tamper(t, "7")
		e.recheck()
		if len(changes) != i {
			t.Fatalf("correction %d: %d changes told", i, len(changes))
		}
		ch := changes[i-1]
		if len(ch.Corrected) != 1 {
			t.Fatalf("correction %d: %+v", i, ch.Corrected)
		}
		c := ch.Corrected[0]
		if c.Subject != port || c.Setting != roce.TOS.Setting() || c.Found != "7" || c.Restored != "106" {
			t.Errorf("correction %d told as %+v", i, c)
		}
		if r := e.record(t); r.Corrected != uint32(i) {
			t.Errorf("after correction %d the record counts %d", i, r.Corrected)
		}
		if i < reconcile.ContestCorrections && len(ch.Contested) != 0 {
			t.Errorf("correction %d told a contest: %+v", i, ch.Contested)
		}
	}
	last := changes[len(changes)-1].Contested
	if len(last) != 1 || last[0].Subject != port || last[0].Setting != roce.TOS.Setting() ||
		last[0].Corrections != reconcile.ContestCorrections || !last[0].Until.Equal(e.now.Add(reconcile.ContestBackoff)) {
		t.Fatalf("the fifth correction told the contest as %+v", last)
	}
	// A read that finds the declared value tells nothing.
	e.recheck()
	if len(changes) != reconcile.ContestCorrections {
		t.Errorf("a read that changed nothing was told: %+v", changes[len(changes)-1])
	}
}

// While a setting is contested its record says so, with when the value it
// holds was read; the other manager writing the same value again is not
// published again (a read that finds it changes nothing told), a new value
// is, with its own read time.
func TestContestedIsPublishedOncePerValue(t *testing.T) {
	e := newDriftEnv(t, config.DriftCorrect)
	for i := 0; i < reconcile.ContestCorrections; i++ {
		e.now = e.now.Add(time.Second)
		e.tamper(t, "7")
		e.recheck()
	}
	told := 0
	e.r.OnChange(func(reconcile.Change) { told++ })
	e.now = e.now.Add(time.Second)
	first := e.now
	e.tamper(t, "7")
	e.recheck()
	r := e.record(t)
	var ce *reconcile.ContestedError
	if r.State != reconcile.Contested || !errors.As(r.Why, &ce) || !ce.ReadAt.Equal(first) || reconcile.Text(r.Observed) != "7" ||
		!strings.Contains(r.WhyText(), "the value shown was read at "+first.Format(time.TimeOnly)) {
		t.Fatalf("contested record %+v", r)
	}
	if told != 1 {
		t.Fatalf("the contested value was told %d times", told)
	}
	for i := 0; i < 3; i++ {
		e.now = e.now.Add(time.Second)
		e.tamper(t, "7")
		e.recheck()
	}
	if told != 1 {
		t.Errorf("the other manager's writes of the same value were told again: %d", told)
	}
	if r := e.record(t); !errors.As(r.Why, &ce) || !ce.ReadAt.Equal(first) {
		t.Errorf("the record's read time moved without news: %v", r.Why)
	}
	e.now = e.now.Add(time.Second)
	e.tamper(t, "9")
	e.recheck()
	if r := e.record(t); told != 2 || reconcile.Text(r.Observed) != "9" || !errors.As(r.Why, &ce) || !ce.ReadAt.Equal(e.now) {
		t.Errorf("a new value of the other manager: told %d, record %+v", told, r)
	}
}

// A live read gives each port's settings as the kernel holds them at the
// call, declared or not, writes nothing and stores nothing: a TOS another
// process changed since rdmad's last read is there, said to have changed
// since, while the published state still shows the last read.
func TestReadLiveReadsTheKernelNow(t *testing.T) {
	e := newDriftEnv(t, config.DriftCorrect)
	e.tamper(t, "7")
	hosttest.Write(t, e.root, host.ConfigfsPortPath("mlx5_1", 1, "default_roce_tos"), "3\n")
	writes := e.k.WriteCount()
	before := time.Now()
	live := e.r.ReadLive(t.Context(), e.pol, []string{"mlx5_1", "mlx5_0", "nonesuch"})
	if e.k.WriteCount() != writes {
		t.Fatalf("a live read wrote %v", e.k.Writes[writes:])
	}
	if live.At.Before(before) || len(live.Devices) != 2 || live.Devices[0].Name != "mlx5_1" || live.Devices[1].Name != "mlx5_0" {
		t.Fatalf("live read at %s of %d devices", live.At, len(live.Devices))
	}
	declared := record(live.Devices[1].Ports[0], roce.TOS)
	if declared == nil || reconcile.Text(declared.Observed) != "7" || declared.State != reconcile.Differs || !errors.Is(declared.Why, reconcile.ErrChangedSinceRead) {
		t.Errorf("mlx5_0/1's TOS read live: %+v", declared)
	}
	if undeclared := record(live.Devices[0].Ports[0], roce.TOS); undeclared == nil || reconcile.Text(undeclared.Observed) != "3" || undeclared.State != reconcile.Undeclared {
		t.Errorf("mlx5_1/1's TOS read live: %+v", undeclared)
	}
	if r := e.record(t); reconcile.Text(r.Observed) != "106" || r.State != reconcile.Holds {
		t.Errorf("a live read changed the state: %+v", r)
	}
}

// The corrections of one setting on two subjects: each is told, logged
// once (as a correction, not also as an application) and counted on its
// own record, and the count by setting is the two records' sum.
func TestCorrectedCountsEachSubjectAndTheirSum(t *testing.T) {
	e := newDriftEnv(t, config.DriftCorrect)
	e.pol.RoCE[0].Selector.Device = config.Glob("mlx5_*")
	e.r.Pass(context.Background(), e.pol, reconcile.Scope{Full: true, Forced: true})
	var changes []reconcile.Change
	e.r.OnChange(func(ch reconcile.Change) { changes = append(changes, ch) })
	other := host.ConfigfsPortPath("mlx5_1", 1, "default_roce_tos")
	recheck := func() {
		e.r.Pass(context.Background(), e.pol, reconcile.Scope{Recheck: map[string]bool{"mlx5_0": true, "mlx5_1": true}})
	}
	counts := func() (uint32, uint32) {
		states := e.r.DeviceStates([]string{"mlx5_0", "mlx5_1"})
		return record(states[0].Ports[0], roce.TOS).Corrected, record(states[1].Ports[0], roce.TOS).Corrected
	}
	e.tamper(t, "7")
	hosttest.Write(t, e.root, other, "3\n")
	before := len(e.log.String())
	recheck()
	if len(changes) != 1 || len(changes[0].Corrected) != 2 || changes[0].Corrected[0].Subject != reconcile.PortSubject("mlx5_0", 1) ||
		changes[0].Corrected[1].Subject != reconcile.PortSubject("mlx5_1", 1) || changes[0].Corrected[1].Found != "3" {
		t.Fatalf("told %+v", changes)
	}
	if logged := e.log.String()[before:]; strings.Count(logged, "corrected a setting changed behind rdmad's back") != 2 || strings.Contains(logged, "msg=applied") {
		t.Errorf("two corrections logged as:\n%s", logged)
	}
	if a, b := counts(); a != 1 || b != 1 || e.r.Corrected()["roce_tos"] != 2 {
		t.Errorf("records count %d and %d, by setting %v", a, b, e.r.Corrected())
	}
	e.now = e.now.Add(time.Second)
	e.tamper(t, "7")
	recheck()
	if a, b := counts(); a != 2 || b != 1 || e.r.Corrected()["roce_tos"] != 3 || len(e.r.Corrected()) != 1 {
		t.Errorf("records count %d and %d, by setting %v", a, b, e.r.Corrected())
	}
}

// The window the contest rule counts corrections within is the one the
// contract gives for SettingContested's count, which rdmactl monitor
// prints.
func TestContestWindowIsTheContracts(t *testing.T) {
	if reconcile.ContestWindow != dbusapi.ContestWindow {
		t.Errorf("reconcile.ContestWindow %s, dbusapi.ContestWindow %s", reconcile.ContestWindow, dbusapi.ContestWindow)
	}
}
