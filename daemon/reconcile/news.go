package reconcile

import (
	"errors"
	"fmt"
	"sync"
	"time"
)

// What a pass tells its listeners beyond the state it stored: the
// out-of-band changes it put back and the settings it stopped correcting
// (Change.Corrected, Change.Contested), from which the bus emits
// SettingCorrected and SettingContested. They are taken from the pass's
// actions after the pass, the corrections in the one walk that logs each
// one's journal line and counts it toward the contest rule
// (noteCorrections): a listener learns of a correction in the same commit
// as the state that shows it, and nothing here depends on how the line is
// written.

// Correction is one out-of-band change a pass put back.
type Correction struct {
	Subject Subject
	Setting *Setting
	// Found is the value another process had written, Restored the one
	// rdmad wrote back, as shown.
	Found, Restored string
}

// ContestStart is a setting a pass stopped correcting: another manager
// keeps changing it (the contest rule, drift.go).
type ContestStart struct {
	Subject Subject
	Setting *Setting
	// Corrections is how many corrections within ContestWindow made it
	// contested; Until is when rdmad corrects it again.
	Corrections int
	Until       time.Time
}

// ContestedError is the Why of a contested setting's record: rdmad stopped
// correcting it until Until, after Corrections corrections, and the value
// the record holds was read at ReadAt. Two records that differ only by
// ReadAt say the same (sameRecord): a setting the other manager writes
// again and again is not published again at every read that finds its
// value.
type ContestedError struct {
	Corrections int
	Until       time.Time
	ReadAt      time.Time
}

func (e *ContestedError) Error() string {
	return fmt.Sprintf("another manager keeps changing it: rdmad corrected it %d times within %s and stops correcting it until %s (the value shown was read at %s)",
		e.Corrections, ContestWindow, e.Until.Format(time.TimeOnly), e.ReadAt.Format(time.TimeOnly))
}

// sameWhy reports whether two records' reasons say the same: the same
// text, or the same contest whenever its value was read.
func sameWhy(a, b error) bool {
	var ca, cb *ContestedError
	if errors.As(a, &ca) && errors.As(b, &cb) {
		return ca.Corrections == cb.Corrections && ca.Until.Equal(cb.Until)
	}
	return errText(a) == errText(b)
}

// contestsStarted are the settings of acts that the pass's corrections made
// contested (noteCorrections has counted them): a setting the guard let
// through was not contested when the pass read it, so one contested now
// started in this pass.
func (r *Reconciler) contestsStarted(g *driftGuard, acts []Action) []ContestStart {
	if len(g.pending) == 0 {
		return nil
	}
	var out []ContestStart
	seen := map[driftKey]bool{}
	for _, a := range acts {
		if a.Setting == nil {
			continue
		}
		key := driftKey{a.Subject, a.Setting.Name}
		if !g.pending[key] || seen[key] {
			continue
		}
		seen[key] = true
		if until, n, ok := r.contested(key, g.now); ok {
			out = append(out, ContestStart{Subject: a.Subject, Setting: a.Setting, Corrections: n, Until: until})
		}
	}
	return out
}

// tally counts the corrections of each setting of each subject since rdmad
// started: Record.Corrected, the web console's badge, and by setting
// alone rdmad_drift_corrected_total (Reconciler.Corrected).
type tally struct {
	mu sync.Mutex
	n  map[driftKey]uint32
}

// add counts cs.
func (t *tally) add(cs []Correction) {
	if len(cs) == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n == nil {
		t.n = map[driftKey]uint32{}
	}
	for _, c := range cs {
		t.n[driftKey{c.Subject, c.Setting.Name}]++
	}
}

// bySetting is the count of each setting, its subjects' summed.
func (t *tally) bySetting() map[string]uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[string]uint64{}
	for k, n := range t.n {
		out[k.setting] += uint64(n)
	}
	return out
}

// mark sets Corrected on the records of res whose setting was ever
// corrected; it costs nothing on a host where none was.
func (t *tally) mark(res *passResult) {
	t.markRecords(res.hostRecs)
	for _, recs := range res.recs {
		t.markRecords(recs)
	}
}

// markRecords sets Corrected on the records of recs whose setting was
// ever corrected.
func (t *tally) markRecords(recs []Record) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.n) == 0 {
		return
	}
	for i := range recs {
		if recs[i].Setting != nil {
			recs[i].Corrected = t.n[driftKey{recs[i].Subject, recs[i].Setting.Name}]
		}
	}
}
