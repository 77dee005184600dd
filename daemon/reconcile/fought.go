package reconcile

import (
	"slices"
	"strings"
	"time"
)

// A slow fight stays under the contest rule: another manager that puts
// its value back once a minute (an mlnx_qos timer) has rdmad correct the
// setting once a minute, forever, and on mlx5 every PFC correction
// toggles the link twice a cycle, seen only in a counter. So a setting
// corrected twice or more, each correction within [drift] fight_window of
// the one before, is fought: doctor warns setting-fought with the count
// of corrections (not of link toggles: a correction's cost is the
// contest's), the first and the last, and rdmad_drift_fought counts it,
// until a window passes without a correction.

// Fight is a setting rdmad keeps correcting.
type Fight struct {
	Subject Subject
	Setting *Setting
	// Corrections is how many times rdmad put the setting back, each
	// within the window of the one before; First and Last when.
	Corrections int
	First, Last time.Time
	// Window is the [drift] fight_window it was judged with.
	Window time.Duration
}

// fight is the corrections of one setting that follow each other.
type fight struct {
	setting     *Setting
	corrections int
	first, last time.Time
}

// noteFight counts a correction of key at now (under r.drift.mu), within
// window of the last one or starting again, and returns how many the
// fight counts now (1 with no window).
func (r *Reconciler) noteFight(key driftKey, st *Setting, now time.Time, window time.Duration) int {
	d := r.drift
	d.fightWindow = window
	if window <= 0 {
		return 1
	}
	f := d.fights[key]
	if f == nil || now.Sub(f.last) > window {
		f = &fight{setting: st, first: now}
		d.fights[key] = f
	}
	f.corrections++
	f.last = now
	for k, o := range d.fights {
		if now.Sub(o.last) > window {
			delete(d.fights, k) // quiet for a window: not fought any more
		}
	}
	return f.corrections
}

// Fights lists the settings fought now (corrected twice or more, the last
// time within the window of the last pass's policy), by subject and
// setting.
func (r *Reconciler) Fights() []Fight {
	r.drift.mu.Lock()
	defer r.drift.mu.Unlock()
	d := r.drift
	now := d.now()
	var out []Fight
	for k, f := range d.fights {
		if d.fightWindow <= 0 || f.corrections < 2 || now.Sub(f.last) > d.fightWindow {
			continue
		}
		out = append(out, Fight{Subject: k.subject, Setting: f.setting, Corrections: f.corrections, First: f.first, Last: f.last, Window: d.fightWindow})
	}
	slices.SortFunc(out, func(a, b Fight) int {
		if c := strings.Compare(a.Subject.String(), b.Subject.String()); c != 0 {
			return c
		}
		return strings.Compare(a.Setting.Name, b.Setting.Name)
	})
	return out
}

// fought counts the subjects fought now by setting name:
// rdmad_drift_fought.
func fought(fs []Fight) map[string]int {
	out := map[string]int{}
	for _, f := range fs {
		out[f.Setting.Name]++
	}
	return out
}
