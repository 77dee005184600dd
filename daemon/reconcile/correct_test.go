package reconcile_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/daemon/reconcile"
	"github.com/rdmad/rdmad/daemon/roce"
)

// driftEnv is the daemon's reconciler with the RoCE part on the mlx5
// fixture, a TOS of 106 declared, a clock the test moves and a log it
// reads.
type driftEnv struct {
	root string
	k    *hosttest.Kernel
	io   *countingIO
	r    *reconcile.Reconciler
	pol  *config.Policy
	log  *syncBuffer
	now  time.Time
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func newDriftEnv(t *testing.T, action config.DriftAction) *driftEnv {
	root := hosttest.Copy(t, "mlx5")
	k := hosttest.NewKernel(root)
	e := &driftEnv{root: root, k: k, io: &countingIO{Kernel: k}, log: &syncBuffer{}, now: time.Unix(1_800_000_000, 0)}
	h := host.NewWithIO(root, e.io)
	e.pol = &config.Policy{
		RoCE:  []config.RoCERule{{Selector: config.Selector{Device: config.Glob("mlx5_0")}, TOS: tos(106), Source: config.Position{File: "a.toml", Line: 3}}},
		Drift: config.Drift{Action: action},
	}
	e.r = reconcile.New(reconcile.Options{Host: h, Log: slog.New(slog.NewTextHandler(e.log, nil)),
		DeviceParts: []reconcile.DevicePart{&roce.Part{Host: h}}, Detail: host.DetailFull, Now: func() time.Time { return e.now }})
	e.r.Pass(context.Background(), e.pol, reconcile.Scope{Full: true, Forced: true})
	return e
}

var tosAttr = host.ConfigfsPortPath("mlx5_0", 1, "default_roce_tos")

// tamper is another process writing the TOS.
func (e *driftEnv) tamper(t *testing.T, v string) { hosttest.Write(t, e.root, tosAttr, v+"\n") }

func (e *driftEnv) recheck() reconcile.Report {
	return e.r.Pass(context.Background(), e.pol, reconcile.Scope{Recheck: map[string]bool{"mlx5_0": true}})
}

func (e *driftEnv) record(t *testing.T) reconcile.Record {
	t.Helper()
	r := record(e.r.DeviceStates([]string{"mlx5_0"})[0].Ports[0], roce.TOS)
	if r == nil {
		t.Fatal("no TOS record")
	}
	return *r
}

// Under "correct" a TOS another process wrote is put back by the next read
// of it, logged at warning priority with the value found and the one
// restored, and counted by setting.
func TestDriftCorrected(t *testing.T) {
	e := newDriftEnv(t, config.DriftCorrect)
	if rep := e.recheck(); rep.Count(reconcile.Changed) != 0 || strings.Contains(e.log.String(), "corrected") {
		t.Fatalf("a read that finds the declared value corrected something: %v\n%s", rep.Actions, e.log)
	}
	e.tamper(t, "0")
	rep := e.recheck()
	if a, ok := rep.Find(reconcile.PortSubject("mlx5_0", 1), roce.TOS.Kind()); !ok || a.Status != reconcile.Changed || a.From != "0" {
		t.Fatalf("tampered TOS: %+v", a)
	}
	if got := hosttest.Read(t, e.root, tosAttr); got != "106" {
		t.Errorf("TOS after the correction: %q", got)
	}
	logged := e.log.String()
	for _, want := range []string{"level=WARN", "corrected a setting changed behind rdmad's back", "subject=mlx5_0/1", "setting=roce_tos", "found=0", "restored=106"} {
		if !strings.Contains(logged, want) {
			t.Errorf("log lacks %q:\n%s", want, logged)
		}
	}
	if n := e.r.Corrected()["roce_tos"]; n != 1 {
		t.Errorf("corrections counted: %d", n)
	}
	if r := e.record(t); r.State != reconcile.Holds {
		t.Errorf("record after the correction: %s", r.State)
	}
}

// Under "report" nothing is written back: the record says the setting
// differs and why, with the kernel's value; a forced pass (Reconcile,
// Reload) applies the policy all the same.
func TestDriftReported(t *testing.T) {
	e := newDriftEnv(t, config.DriftReport)
	e.tamper(t, "7")
	writes := e.k.WriteCount()
	rep := e.recheck()
	if e.k.WriteCount() != writes {
		t.Fatalf("report mode wrote %v", e.k.Writes[writes:])
	}
	if a, _ := rep.Find(reconcile.PortSubject("mlx5_0", 1), roce.TOS.Kind()); a.Status != reconcile.Held {
		t.Errorf("action %+v", a)
	}
	r := e.record(t)
	if got, _ := roce.TOS.Observed(r); r.State != reconcile.Differs || got != 7 || !errors.Is(r.Why, reconcile.ErrDriftReported) {
		t.Errorf("record %+v", r)
	}
	// Still reported at the next read: the last record differed.
	if e.recheck(); e.k.WriteCount() != writes || e.record(t).State != reconcile.Differs {
		t.Error("the second read corrected or forgot the reported change")
	}
	e.r.Pass(context.Background(), e.pol, reconcile.Scope{Full: true, Forced: true})
	if got := hosttest.Read(t, e.root, tosAttr); got != "106" || e.record(t).State != reconcile.Holds {
		t.Errorf("a forced pass left TOS %q", got)
	}
	if n := e.r.Corrected()["roce_tos"]; n != 0 {
		t.Errorf("report mode counted %d corrections", n)
	}
}

// A setting corrected five times within a minute is contested: rdmad stops
// correcting it until its back-off ends (then the service reads it again:
// NextRetry), corrects once more, and doubles the back-off when the fight
// goes on.
func TestDriftContested(t *testing.T) {
	e := newDriftEnv(t, config.DriftCorrect)
	for i := 0; i < reconcile.ContestCorrections; i++ {
		e.now = e.now.Add(time.Second)
		e.tamper(t, "0")
		e.recheck()
		if got := hosttest.Read(t, e.root, tosAttr); got != "106" {
			t.Fatalf("correction %d: TOS %q", i+1, got)
		}
	}
	retry := e.r.NextRetry()
	at := retry.At
	if want := e.now.Add(reconcile.ContestBackoff); !at.Equal(want) || !slices.Equal(retry.Devices, []string{"mlx5_0"}) || retry.Host {
		t.Errorf("NextRetry = %+v, want %s [mlx5_0] without the host", retry, want)
	}
	writes := e.k.WriteCount()
	e.now = e.now.Add(time.Second)
	e.tamper(t, "0")
	e.recheck()
	r := e.record(t)
	if e.k.WriteCount() != writes || r.State != reconcile.Contested || !strings.Contains(r.WhyText(), "another manager keeps changing it") {
		t.Fatalf("during the back-off: writes %v, record %+v", e.k.Writes[writes:], r)
	}
	if !strings.Contains(e.log.String(), "stops correcting it") {
		t.Errorf("the contest is not logged:\n%s", e.log)
	}
	// The back-off ends: the next read corrects again.
	e.now = at.Add(time.Second)
	e.recheck()
	if got := hosttest.Read(t, e.root, tosAttr); got != "106" || e.record(t).State != reconcile.Holds {
		t.Fatalf("after the back-off: TOS %q", got)
	}
	// The fight goes on: the correction after the back-off counts, so four
	// more within the minute make it contested again, for twice as long.
	for i := 0; i < reconcile.ContestCorrections-1; i++ {
		e.now = e.now.Add(time.Second)
		e.tamper(t, "0")
		e.recheck()
	}
	if at2 := e.r.NextRetry().At; !at2.Equal(e.now.Add(2 * reconcile.ContestBackoff)) {
		t.Errorf("second back-off ends %s, want %s", at2, e.now.Add(2*reconcile.ContestBackoff))
	}
	if n := e.r.Corrected()["roce_tos"]; n != 2*reconcile.ContestCorrections {
		t.Errorf("%d corrections counted", n)
	}
}

// A new declaration is applied, not corrected: no warning, no count, even
// in report mode; so is a device that arrives again.
func TestNewDeclarationIsNotDrift(t *testing.T) {
	e := newDriftEnv(t, config.DriftReport)
	e.pol.RoCE[0].TOS = tos(32)
	e.recheck()
	if got := hosttest.Read(t, e.root, tosAttr); got != "32" {
		t.Errorf("a new declaration was held back: TOS %q", got)
	}
	if strings.Contains(e.log.String(), "corrected") || e.r.Corrected()["roce_tos"] != 0 {
		t.Errorf("a new declaration counted as a correction:\n%s", e.log)
	}
}

// The verify read-back reads only the declared settings of the cached
// devices: not the devices again, nor the undeclared settings; it records
// when it ran.
func TestVerifyReadsOnlyTheDeclaredSettings(t *testing.T) {
	e := newDriftEnv(t, config.DriftCorrect)
	before := e.io.reads.Load()
	rep := e.r.Pass(context.Background(), e.pol, reconcile.Scope{Recheck: map[string]bool{"mlx5_0": true, "mlx5_1": true}, Verify: true})
	if n := e.io.reads.Load() - before; n != 1 {
		t.Errorf("the verify read %d attributes, want 1 (mlx5_0/1's TOS)", n)
	}
	if !e.r.LastVerify().Equal(rep.Finished) {
		t.Errorf("LastVerify %s, pass ended %s", e.r.LastVerify(), rep.Finished)
	}
	// mlx5_1's undeclared values, from the full read, are still published.
	if r := record(e.r.DeviceStates([]string{"mlx5_1"})[0].Ports[0], roce.TOS); r == nil || r.Observed == nil {
		t.Errorf("mlx5_1's TOS record after the verify: %+v", r)
	}
}

// A recheck that finds everything as stored (the echo of rdmad's own
// write) changes nothing: no listener hears of it.
func TestRecheckAsBeforeIsSilent(t *testing.T) {
	e := newDriftEnv(t, config.DriftReport)
	var changes int
	e.r.OnChange(func(reconcile.Change) { changes++ })
	e.recheck()
	if changes != 0 {
		t.Errorf("a recheck that found nothing new notified %d times", changes)
	}
	e.tamper(t, "0")
	e.recheck()
	if changes != 1 || e.record(t).State != reconcile.Differs {
		t.Errorf("a recheck that found the TOS changed: %d notifications, record %+v", changes, e.record(t))
	}
	e.recheck() // reported again, as before
	if changes != 1 {
		t.Errorf("the same report notified again: %d", changes)
	}
}

// contestedAfter rechecks the TOS once a second, calling between before
// each, until no write is made any more, and returns the writes made.
func (e *driftEnv) writesUntilContested(t *testing.T, between func(i int)) int {
	t.Helper()
	start := e.k.WriteCount()
	for i := 0; i < 4*reconcile.ContestCorrections; i++ {
		e.now = e.now.Add(time.Second)
		between(i)
		e.recheck()
	}
	if r := e.record(t); r.State != reconcile.Contested {
		t.Fatalf("after %d rechecks of a fight the TOS is %s, not contested: %+v", 4*reconcile.ContestCorrections, r.State, r)
	}
	return e.k.WriteCount() - start
}

// Every correction write counts toward the contest, whatever the read
// before it: a read that fails in between (the other manager truncates
// the file as it writes) does not start the count again.
func TestContestCountsWritesAfterAFailedRead(t *testing.T) {
	e := newDriftEnv(t, config.DriftCorrect)
	writes := e.writesUntilContested(t, func(i int) {
		if i%2 == 0 {
			e.k.FailReads(tosAttr, syscall.EIO)
			return
		}
		e.k.FailReads(tosAttr, 0)
		e.tamper(t, "0")
	})
	if writes != reconcile.ContestCorrections {
		t.Errorf("%d writes before the back-off, want %d", writes, reconcile.ContestCorrections)
	}
}

// A correction the other manager undoes at once (the read-back shows its
// value) counts as one too, and so does every write after it.
func TestContestCountsWritesReadBackOtherwise(t *testing.T) {
	e := newDriftEnv(t, config.DriftCorrect)
	e.tamper(t, "0")
	e.k.Ignore(tosAttr, "106") // taken, then the other manager's 0 is there again
	writes := e.writesUntilContested(t, func(int) {})
	if writes != reconcile.ContestCorrections {
		t.Errorf("%d writes before the back-off, want %d", writes, reconcile.ContestCorrections)
	}
	if n := e.r.Corrected()["roce_tos"]; n != 0 {
		t.Errorf("%d corrections counted as put back; none held", n)
	}
}

// A setting in its back-off is read at most once a second, however many
// events ask: its record stays contested with the value last read.
func TestContestedSettingIsReadAtMostOnceASecond(t *testing.T) {
	e := newDriftEnv(t, config.DriftCorrect)
	e.writesUntilContested(t, func(int) { e.tamper(t, "0") })
	e.tamper(t, "7")
	before := e.io.reads.Load()
	for range 100 {
		e.recheck()
	}
	if n := e.io.reads.Load() - before; n != 0 {
		t.Errorf("100 rechecks within a second of the last read read the TOS %d times", n)
	}
	if r := e.record(t); r.State != reconcile.Contested {
		t.Errorf("record during the back-off: %+v", r)
	}
	e.now = e.now.Add(reconcile.ContestReadInterval)
	for range 100 {
		e.recheck()
	}
	if n := e.io.reads.Load() - before; n != 1 {
		t.Errorf("100 rechecks a second later read the TOS %d times, want 1", n)
	}
	if r := e.record(t); r.State != reconcile.Contested || reconcile.Text(r.Observed) != "7" {
		t.Errorf("record after a read in the back-off: %s %v", r.State, r.Observed)
	}
	// A forced pass reads and applies the policy at once.
	e.r.Pass(context.Background(), e.pol, reconcile.Scope{Full: true, Forced: true})
	if got := hosttest.Read(t, e.root, tosAttr); got != "106" {
		t.Errorf("a forced pass in the back-off left TOS %s", got)
	}
}

// A failure repeated on every event (a read that fails one way, then
// another, while another manager rewrites the file) is logged in full 5
// times a window, then summed up in one line with the count when the
// window ends; the next window logs in full again.
func TestRepeatedFailuresAreLoggedAtABoundedRate(t *testing.T) {
	e := newDriftEnv(t, config.DriftCorrect)
	end := e.r.EndFailureWindowsForTest()
	for i := range 1000 {
		e.k.FailReads(tosAttr, []syscall.Errno{syscall.EIO, syscall.EAGAIN}[i%2])
		e.recheck()
	}
	if n := strings.Count(e.log.String(), "msg=failed "); n != 5 {
		t.Errorf("%d failed lines for 1,000 failed reads within a window, want 5", n)
	}
	end()
	e.k.FailReads(tosAttr, syscall.EIO)
	logged := e.log.String()
	if !strings.Contains(logged, `level=ERROR msg="failed again, more often than logged" subject=mlx5_0/1 what="roce tos" times=995 within=10s`) {
		t.Errorf("no summary of the 995 failures not logged:\n%s", logged)
	}
	e.recheck()
	if n := strings.Count(e.log.String(), "msg=failed "); n != 6 {
		t.Errorf("the next window logs in full again: %d failed lines", n)
	}
}

// Corrections each within [drift] fight_window of the one before make a
// fight, counted by corrections (not by their cost) from the first to the
// last; a window without one ends it; fight_window = "0" makes none.
func TestFightsAreCorrectionsWithinTheWindow(t *testing.T) {
	e := newDriftEnv(t, config.DriftCorrect)
	e.pol.Drift.FightWindow = time.Hour
	correct := func(after time.Duration) {
		e.now = e.now.Add(after)
		e.tamper(t, "0")
		e.recheck()
	}
	correct(time.Second)
	if fs := e.r.Fights(); len(fs) != 0 {
		t.Fatalf("one correction is a fight: %+v", fs)
	}
	first := e.now
	correct(50 * time.Minute)
	correct(50 * time.Minute)
	fs := e.r.Fights()
	if len(fs) != 1 || fs[0].Corrections != 3 || !fs[0].First.Equal(first) || !fs[0].Last.Equal(e.now) ||
		fs[0].Subject != reconcile.PortSubject("mlx5_0", 1) || fs[0].Setting != roce.TOS.Setting() || fs[0].Window != time.Hour {
		t.Errorf("fights %+v", fs)
	}
	e.now = e.now.Add(time.Hour + time.Second)
	if fs := e.r.Fights(); len(fs) != 0 {
		t.Errorf("a window later: %+v", fs)
	}
	correct(time.Second) // a new chain starts
	if fs := e.r.Fights(); len(fs) != 0 {
		t.Errorf("one correction after a quiet window: %+v", fs)
	}
	e.pol.Drift.FightWindow = 0
	correct(time.Second)
	correct(time.Second)
	if fs := e.r.Fights(); len(fs) != 0 {
		t.Errorf("fight_window 0: %+v", fs)
	}
}

// A correction is one line in the journal, at warning priority, with the
// values, the declaration's source and how many times the setting was
// corrected in the current fight ([drift] fight_window); no "applied"
// line besides it. The
// echo of rdmad's own write (the watch sees it) is one read of the
// setting, with nothing committed and nothing logged.
func TestCorrectionLogsOneLine(t *testing.T) {
	e := newDriftEnv(t, config.DriftCorrect)
	e.pol.Drift.FightWindow = time.Hour
	var changes int
	e.r.OnChange(func(reconcile.Change) { changes++ })
	for n := 1; n <= 2; n++ {
		before := e.log.String()
		e.tamper(t, "0")
		e.recheck()
		lines := strings.Split(strings.TrimSpace(strings.TrimPrefix(e.log.String(), before)), "\n")
		want := []string{"level=WARN", "corrected a setting changed behind rdmad's back", "subject=mlx5_0/1", "setting=roce_tos",
			"found=0", "restored=106", "source=a.toml:3", "corrections=" + strconv.Itoa(n), "fight_window=1h0m0s"}
		if len(lines) != 1 {
			t.Fatalf("correction %d logged %d lines:\n%s", n, len(lines), strings.Join(lines, "\n"))
		}
		for _, w := range want {
			if !strings.Contains(lines[0], w) {
				t.Errorf("correction %d: %q lacks %q", n, lines[0], w)
			}
		}
		// The write's echo.
		before, changes = e.log.String(), 0
		reads := e.io.reads.Load()
		e.recheck()
		if got := e.io.reads.Load() - reads; got != 1 || changes != 0 || e.log.String() != before {
			t.Errorf("the echo of correction %d: %d reads, %d commits, log %q", n, got, changes, strings.TrimPrefix(e.log.String(), before))
		}
	}
}
