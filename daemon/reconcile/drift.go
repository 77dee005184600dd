package reconcile

import (
	"errors"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/rdmad/rdmad/daemon/config"
)

// A setting changed behind rdmad's back: another process wrote it while
// the declaration stayed the same. rdmad tells it from a setting whose
// last record held that same declaration and that the kernel no longer
// holds; an event only makes rdmad read again, and the read decides (a
// read that finds the declared value does nothing, which is how rdmad's
// own writes, echoed by the same events, are ignored). Under [drift]
// action = "correct" the part writes it back as on an arrival, rdmad logs
// the correction at warning priority and counts it; under "report" nothing
// is written and the record says the setting differs. A setting corrected
// ContestCorrections times within ContestWindow is contested: another
// manager fights rdmad for it, so rdmad stops correcting it for a back-off
// that doubles each time (up to ContestMaxBackoff), then tries again.
// Passes asked for explicitly (start, Reload, Reconcile) and arrivals
// apply the policy whatever the action: an arrival is a device a hotplug
// event asked to read whole (Scope.Devices: added, or registered again
// after a driver reload, which resets what the driver keeps). Rechecks
// (an event in a watched directory, a DCB or pause notification), the
// verify read-back, a full pass after lost events, and the host-wide
// settings in any unforced pass, find out-of-band changes.

// The contest rule.
const (
	ContestCorrections = 5
	ContestWindow      = time.Minute
	ContestBackoff     = time.Minute
	ContestMaxBackoff  = time.Hour
	// ContestReadInterval is how often a setting in a back-off is read
	// again (its record shows the kernel's value at most that old): the
	// other manager may write it thousands of times a second, each write
	// an event.
	ContestReadInterval = time.Second
	// contestForget is how long after a back-off without a correction a
	// setting starts again from the first back-off.
	contestForget = 10 * ContestWindow
)

// driftKey names one setting of one subject.
type driftKey struct {
	subject Subject
	setting string
}

// contest is the correction history of one setting.
type contest struct {
	corrections []correctionAt // within ContestWindow
	until       time.Time      // no correction before then
	backoff     time.Duration  // the next back-off
	count       int            // corrections while the setting was last contested
	readAt      time.Time      // the last read during the back-off
}

type correctionAt struct {
	at   time.Time
	cost int
}

// drift is the reconciler's account of out-of-band changes.
type drift struct {
	mu         sync.Mutex
	contests   map[driftKey]*contest
	lastVerify time.Time
	now        func() time.Time
	// fights are the settings corrected more than once, one correction
	// within fightWindow (the last pass's [drift] fight_window) of the
	// one before (fought.go).
	fights      map[driftKey]*fight
	fightWindow time.Duration
}

func newDrift() *drift {
	return &drift{contests: map[driftKey]*contest{}, fights: map[driftKey]*fight{}, now: time.Now}
}

// driftGuard is the pass's WriteGuard: it holds back writes of settings
// changed behind rdmad's back under "report" and of contested settings,
// and notes the corrections it lets through.
type driftGuard struct {
	r      *Reconciler
	report bool
	forced bool
	// arrived are the devices a hotplug event asked to read whole (a
	// device added, a driver reloaded, a netdev registered again): their
	// ports get the policy as on an arrival, whatever the action.
	arrived map[string]bool
	now     time.Time
	// fightWindow is the policy's [drift] fight_window.
	fightWindow time.Duration

	mu      sync.Mutex
	pending map[driftKey]bool
}

// ErrDriftReported is why a setting changed behind rdmad's back is not
// written back under [drift] action = "report".
var ErrDriftReported = errors.New(`changed behind rdmad's back; [drift] action = "report" leaves it as found (rdmactl reconcile puts the declared value back)`)

func (r *Reconciler) guard(pol *config.Policy, scope Scope) *driftGuard {
	g := &driftGuard{r: r, report: pol.Drift.Action == config.DriftReport, forced: scope.Forced, now: r.drift.now(), pending: map[driftKey]bool{},
		fightWindow: pol.Drift.FightWindow}
	if !scope.Full {
		g.arrived = make(map[string]bool, len(scope.Devices))
		for n := range scope.Devices {
			g.arrived[n] = !scope.Refresh[n]
		}
	}
	return g
}

// applying reports whether the pass applies the policy to s whatever its
// last record said (a forced pass, an arrival).
func (g *driftGuard) applying(s Subject) bool {
	return g.forced || (s.Kind == SubjectPort && g.arrived[s.Device])
}

// Hold implements WriteGuard. A setting a caller holds (holds.go) is not written
// by any pass, forced or not.
func (g *driftGuard) Hold(s Subject, st *Setting, want Value, src config.Position) (RecordState, error) {
	if h, held := g.r.heldBy(s, st); held {
		return Differs, &HeldError{Hold: h}
	}
	if g.applying(s) {
		return Differs, nil // the policy is being applied, not corrected
	}
	if _, held := g.r.heldBefore(s, st, want, src); !held {
		return Differs, nil
	}
	key := driftKey{s, st.Name}
	if until, n, contested := g.r.contested(key, g.now); contested {
		return Contested, &ContestedError{Corrections: n, Until: until, ReadAt: g.now}
	}
	if g.report {
		return Differs, ErrDriftReported
	}
	g.mu.Lock()
	g.pending[key] = true
	g.mu.Unlock()
	return Differs, nil
}

// ReadOnly implements WriteGuard.
func (*driftGuard) ReadOnly() bool { return false }

// Backoff implements BackoffGuard: a setting in a contest's back-off, under
// the declaration it was contested with, is read at most once every
// ContestReadInterval; in between its last record stands (contested, or
// holding when the last read found the declared value). A forced pass and
// an arrival read it.
func (g *driftGuard) Backoff(s Subject, st *Setting, want Value, src config.Position) (Record, bool) {
	if g.applying(s) {
		return Record{}, false
	}
	until, n, readAt, skip := g.r.skipRead(driftKey{s, st.Name}, g.now)
	if !skip {
		return Record{}, false
	}
	prev, held := g.r.heldBefore(s, st, want, src)
	if !held {
		return Record{}, false
	}
	if prev.State != Holds {
		prev.State, prev.Why = Contested, &ContestedError{Corrections: n, Until: until, ReadAt: readAt}
	}
	return prev, true
}

// skipRead says whether key is in a back-off and was read less than
// ContestReadInterval ago (at readAt); when it is in a back-off and may be
// read, the read is noted.
func (r *Reconciler) skipRead(key driftKey, now time.Time) (until time.Time, n int, readAt time.Time, skip bool) {
	r.drift.mu.Lock()
	defer r.drift.mu.Unlock()
	c := r.drift.contests[key]
	if c == nil || !now.Before(c.until) {
		return time.Time{}, 0, time.Time{}, false
	}
	if !c.readAt.IsZero() && now.Sub(c.readAt) < ContestReadInterval {
		return c.until, c.count, c.readAt, true
	}
	c.readAt = now
	return time.Time{}, 0, time.Time{}, false
}

// heldBefore reports whether the last record of setting st on s had the
// same declaration and was judged against it: it held, differed (reported,
// or contested), could not be read, or was written and read back as
// another value. A value that differs now changed behind rdmad's back,
// and writing it back is a correction, whatever the last read gave: a
// manager fighting rdmad makes reads and read-backs fail or differ too,
// and a correction not counted then let a fight run 10 to 21 writes
// before backing off, and on through the back-off. A write the kernel
// refused, or a setting that did not apply, is the policy not yet applied.
func (r *Reconciler) heldBefore(s Subject, st *Setting, want Value, src config.Position) (Record, bool) {
	prev, ok := r.previous(s, st)
	if !ok || prev.Source != src || !reflect.DeepEqual(prev.Declared, want) {
		return prev, false
	}
	var notKept *NotKeptError
	switch {
	case prev.State == Holds, prev.State == Differs, prev.State == Contested, prev.State == Unknown:
		return prev, true
	case prev.State == Refused && errors.As(prev.Why, &notKept):
		return prev, true
	}
	return prev, false
}

// previous is the stored record of setting st on s.
func (r *Reconciler) previous(s Subject, st *Setting) (Record, bool) {
	r.stateMu.RLock()
	defer r.stateMu.RUnlock()
	if s.Kind == SubjectPort {
		if ds, ok := r.devices[s.Device]; ok {
			for _, p := range ds.Ports {
				if p.Number != s.Port {
					continue
				}
				for _, rec := range p.Records {
					if rec.Setting == st && rec.Subject == s {
						return rec, true
					}
				}
			}
		}
	}
	for _, rec := range r.hostRecs {
		if rec.Setting == st && rec.Subject == s {
			return rec, true
		}
	}
	return Record{}, false
}

// contested says whether key is in a back-off at now.
func (r *Reconciler) contested(key driftKey, now time.Time) (until time.Time, n int, ok bool) {
	r.drift.mu.Lock()
	defer r.drift.mu.Unlock()
	c := r.drift.contests[key]
	if c == nil || !now.Before(c.until) {
		return time.Time{}, 0, false
	}
	return c.until, c.count, true
}

// noteCorrections counts the pass's corrections: the Changed actions of
// settings the guard let through as corrections. Each is logged in one
// line at warning priority (subject, setting, the value found, the value
// restored, the declaration's source, and how many times rdmad corrected
// it in the current fight, each within [drift] fight_window of the one
// before: this one included); logReport says nothing more of it. A
// setting corrected ContestCorrections times (by cost) within
// ContestWindow becomes contested. It returns the corrections in order
// (what the pass tells its listeners, and what the tally counts) and
// their indexes in acts (the lines logReport leaves to it).
func (r *Reconciler) noteCorrections(g *driftGuard, acts []Action) (corrections []Correction, logged map[int]bool) {
	r.drift.mu.Lock()
	defer r.drift.mu.Unlock()
	r.drift.fightWindow = g.fightWindow
	if len(g.pending) == 0 {
		return nil, nil
	}
	for i, a := range acts {
		if (a.Status != Changed && a.Status != Failed) || a.Setting == nil {
			continue
		}
		key := driftKey{a.Subject, a.Setting.Name}
		if !g.pending[key] {
			continue
		}
		// Every write the guard let through counts toward the contest,
		// whether it held or not; one that held is a correction.
		if a.Status == Changed {
			if logged == nil {
				logged = map[int]bool{}
			}
			logged[i] = true
			corrections = append(corrections, Correction{Subject: a.Subject, Setting: a.Setting, Found: a.From, Restored: a.To})
			n := r.noteFight(key, a.Setting, g.now, g.fightWindow)
			r.log.Warn("corrected a setting changed behind rdmad's back", "subject", a.Subject.String(), "setting", a.Setting.Name,
				"found", a.From, "restored", a.To, "source", a.Source, "corrections", n, "fight_window", g.fightWindow)
		}
		c := r.drift.contests[key]
		if c == nil {
			c = &contest{backoff: ContestBackoff}
			r.drift.contests[key] = c
		}
		if !c.until.IsZero() && g.now.Sub(c.until) > contestForget {
			c.backoff = ContestBackoff // quiet long enough: start over
		}
		kept := c.corrections[:0]
		for _, x := range c.corrections {
			if g.now.Sub(x.at) < ContestWindow {
				kept = append(kept, x)
			}
		}
		c.corrections = append(kept, correctionAt{g.now, max(a.Cost, 1)})
		total := 0
		for _, x := range c.corrections {
			total += x.cost
		}
		if total >= ContestCorrections {
			c.until, c.count, c.readAt = g.now.Add(c.backoff), len(c.corrections), g.now
			r.log.Warn("another manager keeps changing a setting: rdmad stops correcting it for a while", "subject", a.Subject.String(),
				"setting", a.Setting.Name, "corrections", len(c.corrections), "within", ContestWindow, "until", c.until)
			c.backoff = min(2*c.backoff, ContestMaxBackoff)
			c.corrections = nil
		}
	}
	return corrections, logged
}

// Corrected is how many out-of-band changes rdmad put back, by setting
// name: rdmad_drift_corrected_total, the sum of the tally of each
// subject's setting.
func (r *Reconciler) Corrected() map[string]uint64 { return r.tally.bySetting() }

// Retry is when the earliest back-off of a contested setting ends, and
// what to read again then.
type Retry struct {
	At time.Time // zero: no setting is in a back-off
	// Devices are the devices of the port and device settings whose
	// back-off ends At, sorted.
	Devices []string
	// Host says a host-wide setting's back-off ends At (a file rdmad
	// writes, the netns mode, a soft link): the host parts read it again
	// in any pass.
	Host bool
}

// NextRetry is the earliest end of a contested setting's back-off and
// what it ends for (zero when none is contested): the service reads those
// settings again then, so a back-off ends with a correction even when no
// event comes, for a host-wide setting as for a port's.
func (r *Reconciler) NextRetry() Retry {
	r.drift.mu.Lock()
	defer r.drift.mu.Unlock()
	now := r.drift.now()
	var next Retry
	for key, c := range r.drift.contests {
		if !c.until.After(now) {
			continue
		}
		if next.At.IsZero() || c.until.Before(next.At) {
			next = Retry{At: c.until}
		}
		if !c.until.Equal(next.At) {
			continue
		}
		if d := key.subject.Device; d != "" {
			if !slices.Contains(next.Devices, d) {
				next.Devices = append(next.Devices, d)
			}
		} else {
			next.Host = true
		}
	}
	slices.Sort(next.Devices)
	return next
}

// BackedOff is what has a setting in a contest's back-off now: devices
// (sorted), and whether a host-wide setting does. The service stops
// watching their directories meanwhile (the other manager may write
// thousands of times a second, each write an event) and reads them again
// every ContestReadInterval instead.
func (r *Reconciler) BackedOff() (devices []string, host bool) {
	r.drift.mu.Lock()
	defer r.drift.mu.Unlock()
	now := r.drift.now()
	for key, c := range r.drift.contests {
		if !now.Before(c.until) {
			continue
		}
		if d := key.subject.Device; d == "" {
			host = true
		} else if !slices.Contains(devices, d) {
			devices = append(devices, d)
		}
	}
	slices.Sort(devices)
	return devices, host
}

// LastVerify is when the last verify read-back ended (zero: never).
func (r *Reconciler) LastVerify() time.Time {
	r.drift.mu.Lock()
	defer r.drift.mu.Unlock()
	return r.drift.lastVerify
}
