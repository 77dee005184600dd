package reconcile_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/reconcile"
)

// num is a setting value of a test setting.
type num int

func (n num) String() string { return strconv.Itoa(int(n)) }

var numSetting = reconcile.NewSetting[num](reconcile.Setting{Name: "test_num", Kind: "test num", Key: "test.num", Title: "test number"})

// knob is a kernel value Converge reads and writes.
type knob struct {
	v        num
	refuse   error // Write fails
	keep     bool  // Write is accepted but not kept
	readErr  error
	writes   int
	readsErr bool // every read after the first fails
	reads    int
}

func (k *knob) read() (num, error) {
	k.reads++
	if k.readErr != nil || (k.readsErr && k.reads > 1) {
		return 0, errors.New("unreadable")
	}
	return k.v, nil
}

func (k *knob) write(v num) error {
	k.writes++
	if k.refuse != nil {
		return k.refuse
	}
	if !k.keep {
		k.v = v
	}
	return nil
}

type guard struct {
	state reconcile.RecordState
	why   error
}

func (g guard) Hold(reconcile.Subject, *reconcile.Setting, reconcile.Value, config.Position) (reconcile.RecordState, error) {
	return g.state, g.why
}
func (guard) ReadOnly() bool { return false }

// Converge is where a setting's record is decided: holds, changed,
// refused, not kept, unreadable, held back by the pass or by another
// owner; each case leaves the action and the record that say so.
func TestConverge(t *testing.T) {
	port := reconcile.PortSubject("dev0", 1)
	src := config.Position{File: "a.toml", Line: 2}
	cases := []struct {
		name   string
		k      knob
		guard  reconcile.WriteGuard
		hold   error
		status reconcile.Status
		state  reconcile.RecordState
		now    string // observed
		writes int
		why    string
	}{
		{"holds", knob{v: 7}, nil, nil, reconcile.Unchanged, reconcile.Holds, "7", 0, ""},
		{"changed", knob{v: 1}, nil, nil, reconcile.Changed, reconcile.Holds, "7", 1, ""},
		{"refused", knob{v: 1, refuse: errors.New("EIO")}, nil, nil, reconcile.Failed, reconcile.Refused, "1", 1, "EIO"},
		{"not kept", knob{v: 1, keep: true}, nil, nil, reconcile.Failed, reconcile.Refused, "1", 1, "wrote test number 7 but the kernel kept 1"},
		{"unreadable", knob{readErr: errors.New("x")}, nil, nil, reconcile.Failed, reconcile.Unknown, "", 0, "unreadable"},
		{"unreadable after write", knob{v: 1, readsErr: true}, nil, nil, reconcile.Failed, reconcile.Unknown, "", 1, "read back"},
		{"reported", knob{v: 1}, guard{reconcile.Differs, errors.New("reported")}, nil, reconcile.Held, reconcile.Differs, "1", 0, "reported"},
		{"contested", knob{v: 1}, guard{reconcile.Contested, errors.New("contested")}, nil, reconcile.Held, reconcile.Contested, "1", 0, "contested"},
		{"owned elsewhere", knob{v: 1}, nil, errors.New("lldpad"), reconcile.Held, reconcile.Differs, "1", 0, "lldpad"},
		{"owned elsewhere, holds", knob{v: 7}, nil, errors.New("lldpad"), reconcile.Unchanged, reconcile.Holds, "7", 0, ""},
	}
	for _, c := range cases {
		k := c.k
		act, rec := numSetting.Converge(c.guard, reconcile.Target[num]{Subject: port, Want: 7, Source: src, Read: k.read, Write: k.write, Hold: c.hold})
		if act.Status != c.status || rec.State != c.state || reconcile.Text(rec.Observed) != c.now || k.writes != c.writes ||
			!strings.Contains(rec.WhyText(), c.why) || (c.why == "") != (rec.Why == nil) {
			t.Errorf("%s: action %s, record %s observed %q why %q, %d writes", c.name, act.Status, rec.State, reconcile.Text(rec.Observed), rec.WhyText(), k.writes)
		}
		if d, ok := numSetting.Declared(rec); !ok || d != 7 || rec.Source != src || rec.Subject != port || !numSetting.Is(rec) {
			t.Errorf("%s: record %+v", c.name, rec)
		}
		if rec.Drifted() == (c.state == reconcile.Holds) {
			t.Errorf("%s: Drifted = %v for %s", c.name, rec.Drifted(), c.state)
		}
	}
}

// outcomePass is a report of one pass for Outcome.
func outcomePass(recs ...reconcile.Record) reconcile.Report {
	return reconcile.Report{Records: recs}
}

// Outcome answers "did my call take" from the records of the keys the call
// declared on its subjects, and from nothing else.
func TestOutcome(t *testing.T) {
	p1, p2 := reconcile.PortSubject("dev0", 1), reconcile.PortSubject("dev0", 2)
	runtime := config.Position{File: config.RuntimeFile}
	file := config.Position{File: "/etc/rdma/rdmad.toml", Line: 4}
	rec := func(s reconcile.Subject, st reconcile.RecordState, src config.Position) reconcile.Record {
		r := reconcile.Record{Subject: s, Setting: numSetting.Setting(), Declared: num(7), Source: src, State: st}
		if st != reconcile.Holds {
			r.Why = errors.New(st.String())
		}
		return r
	}
	call := reconcile.Call{Subjects: []reconcile.Subject{p1}, Keys: []config.Key{"test.num"}, Mine: config.Position.IsRuntime}
	other := reconcile.NewSetting[num](reconcile.Setting{Name: "test_other", Kind: "test other", Key: "test.other", Title: "other"})
	cases := []struct {
		name     string
		rep      reconcile.Report
		failed   string
		deferred int
	}{
		{"holds", outcomePass(rec(p1, reconcile.Holds, runtime)), "", 0},
		{"refused", outcomePass(rec(p1, reconcile.Refused, runtime)), "refused", 0},
		{"another rule wins", outcomePass(rec(p1, reconcile.Holds, file)), "not the requested value", 0},
		{"another port fails", outcomePass(rec(p1, reconcile.Holds, runtime), rec(p2, reconcile.Refused, runtime)), "", 0},
		{"another key fails", outcomePass(rec(p1, reconcile.Holds, runtime), reconcile.Record{Subject: p1, Setting: other.Setting(), State: reconcile.Refused}), "", 0},
		{"no record", outcomePass(), "went away", 0},
		{"not applicable says why", outcomePass(reconcile.Record{Subject: p1, Setting: other.Setting(), State: reconcile.Inapplicable, Why: errors.New("a VF")}), "a VF", 0},
		{"deferred", outcomePass(rec(p1, reconcile.Deferred, runtime)), "", 1},
	}
	for _, c := range cases {
		failed, deferred := c.rep.Outcome(call)
		got := ""
		for _, a := range failed {
			got += a.Err.Error()
		}
		if (c.failed == "") != (len(failed) == 0) || !strings.Contains(got, c.failed) || len(deferred) != c.deferred {
			t.Errorf("%s: failed %v, deferred %v", c.name, failed, deferred)
		}
	}
	// A call that withdraws a declaration fails only by its own actions.
	del := reconcile.Action{Subject: p1, Setting: numSetting.Setting(), Kind: "delete", Status: reconcile.Failed, Err: errors.New("EBUSY")}
	withdraw := reconcile.Call{Subjects: []reconcile.Subject{p1}, Keys: []config.Key{"test.num"}, Removes: true}
	if failed, _ := (reconcile.Report{}).Outcome(withdraw); len(failed) != 0 {
		t.Errorf("withdrawal with nothing left: %v", failed)
	}
	if failed, _ := (reconcile.Report{Actions: []reconcile.Action{del}}).Outcome(withdraw); len(failed) != 1 {
		t.Errorf("failed withdrawal: %v", failed)
	}
	// Changed lists the call's changes in pass order, for the undo.
	changed := reconcile.Report{Actions: []reconcile.Action{
		{Subject: p1, Setting: numSetting.Setting(), Status: reconcile.Changed, To: "a"},
		{Subject: p2, Setting: numSetting.Setting(), Status: reconcile.Changed, To: "b"},
		{Subject: p1, Setting: other.Setting(), Status: reconcile.Changed, To: "c"},
		{Subject: p1, Setting: numSetting.Setting(), Status: reconcile.Unchanged, To: "d"},
	}}.Changed(call)
	if len(changed) != 1 || changed[0].To != "a" {
		t.Errorf("Changed = %v", changed)
	}
}

// Observe judges every setting without writing anything or touching the
// stored state; a pass then writes.
func TestObserveWritesNothing(t *testing.T) {
	e := newEnv(t)
	st := e.r.Observe(context.Background(), e.pol, nil)
	if e.k.WriteCount() != 0 || len(e.k.Mkdirs) != 0 || len(e.loader.Calls()) != 0 {
		t.Fatalf("Observe wrote %v, made %v, loaded %v", e.k.Writes, e.k.Mkdirs, e.loader.Calls())
	}
	if len(e.r.Snapshot().Devices) != 0 {
		t.Error("Observe stored a state")
	}
	mlx := st.Device("mlx5_0")
	if mlx == nil {
		t.Fatal("no mlx5_0 in the observed state")
	}
	r := record(mlx.Ports[0], roceTOS())
	if r == nil || r.State != reconcile.Differs || !r.Drifted() || reconcile.Text(r.Observed) != "0" {
		t.Errorf("mlx5_0/1 TOS, observed: %+v", r)
	}
	for _, hr := range st.HostRecords {
		if hr.State == reconcile.Holds {
			t.Errorf("a host setting holds before anything was written: %+v", hr)
		}
	}
	e.full()
	if e.k.WriteCount() == 0 {
		t.Error("the pass after Observe wrote nothing")
	}
}

// The standing failures are one account, for the whole state and for the
// reconciler's summary alike: a device that does not read is in both.
func TestFailuresAndSummaryAgree(t *testing.T) {
	e := newEnv(t)
	e.k.Refuse("rdma_cm/rxe0/ports/1/default_roce_mode", "IB/RoCE v1", syscall.EIO)
	e.full()
	ports := e.root + "/" + host.ClassInfiniband + "/mlx5_1/ports"
	if err := removeAllAndFile(ports); err != nil {
		t.Fatal(err)
	}
	e.full()
	st := e.r.Snapshot()
	state, sum := st.Failures(), e.r.Summary().Failures
	if len(state) != len(sum) || len(sum) == 0 {
		t.Fatalf("State.Failures %v, Summary %v", state, sum)
	}
	found := false
	for i := range sum {
		if sum[i].Subject != state[i].Subject || sum[i].Kind != state[i].Kind {
			t.Errorf("failure %d: state %v, summary %v", i, state[i], sum[i])
		}
		found = found || (sum[i].Subject == reconcile.DeviceSubject("mlx5_1") && sum[i].Kind == reconcile.KindRead)
	}
	if !found {
		t.Errorf("the summary drops mlx5_1's read error: %v", sum)
	}
}
