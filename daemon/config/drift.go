package config

import (
	"fmt"
	"time"
)

// DriftAction is what rdmad does when a declared setting changes behind
// its back ([drift] action). Start, device arrivals, Reload and Reconcile
// apply the policy whatever it says.
type DriftAction string

const (
	// DriftCorrect puts the declared value back at once (the default).
	DriftCorrect DriftAction = "correct"
	// DriftReport leaves the kernel's value and reports it (doctor, the
	// drift metrics, the D-Bus properties).
	DriftReport DriftAction = "report"
)

// DefaultVerifyInterval is [drift] verify_interval when no file sets it.
const DefaultVerifyInterval = 5 * time.Minute

// The bounds of verify_interval ("0" turns the read-back off).
const (
	MinVerifyInterval = 10 * time.Second
	MaxVerifyInterval = 24 * time.Hour
)

// DefaultFightWindow is [drift] fight_window when no file sets it.
const DefaultFightWindow = time.Hour

// The bounds of fight_window ("0" turns the setting-fought finding off).
const (
	MinFightWindow = time.Minute
	MaxFightWindow = 7 * 24 * time.Hour
)

// Drift is the [drift] table.
type Drift struct {
	Action DriftAction
	// VerifyInterval is how often every declared setting is read back, for
	// changes the kernel does not announce; 0: never.
	VerifyInterval time.Duration
	// FightWindow: a setting corrected twice or more, each correction
	// within this long of the one before, is fought (doctor's
	// setting-fought, rdmad_drift_fought) until it passes without one;
	// 0: never.
	FightWindow time.Duration
	// Source is the last [drift] table of the files; zero when none.
	Source Position
}

// driftDecl is what one file's [drift] table says.
type driftDecl struct {
	table    Position // zero when the file has no [drift]
	action   setting[DriftAction]
	interval setting[time.Duration]
	fight    setting[time.Duration]
}

// drift decodes [drift]: action, verify_interval and fight_window.
func (d *decoder) drift(decl *fileDecl, path string, v any) {
	decl.drift.table = d.pos(path)
	m, ok := d.singleTable(path, v)
	if !ok {
		return
	}
	d.table(path, m, "[drift]", []field{
		stringSetting(d, "action", oneOf(`a [drift] action: use "correct" (put the declared value back) or "report" (leave it and report it)`,
			string(DriftCorrect), string(DriftReport)), &decl.drift.action),
		{"verify_interval", func(kp string, v any) {
			if iv, ok := d.verifyInterval(kp, v); ok {
				decl.drift.interval = setting[time.Duration]{iv, d.pos(kp), true}
			}
		}},
		{"fight_window", func(kp string, v any) {
			if w, ok := d.fightWindow(kp, v); ok {
				decl.drift.fight = setting[time.Duration]{w, d.pos(kp), true}
			}
		}},
	})
}

// fightWindow decodes a duration such as "1h"; "0" turns the finding off.
func (d *decoder) fightWindow(kp string, v any) (time.Duration, bool) {
	s, ok := d.str(kp, v)
	if !ok {
		return 0, false
	}
	if s == "0" {
		return 0, true
	}
	w, err := time.ParseDuration(s)
	switch {
	case err != nil:
		d.failf(kp, "%q is not a duration: write a number and a unit, such as \"1h\" or \"30m\", or \"0\" for no setting-fought finding", s)
	case w < MinFightWindow || w > MaxFightWindow:
		d.failf(kp, "%s is out of range: %s to %s, or \"0\" for no setting-fought finding", s, MinFightWindow, MaxFightWindow)
	default:
		return w, true
	}
	return 0, false
}

// verifyInterval decodes a duration such as "5m"; "0" turns the read-back
// off.
func (d *decoder) verifyInterval(kp string, v any) (time.Duration, bool) {
	s, ok := d.str(kp, v)
	if !ok {
		return 0, false
	}
	if s == "0" {
		return 0, true
	}
	iv, err := time.ParseDuration(s)
	switch {
	case err != nil:
		d.failf(kp, "%q is not a duration: write a number and a unit, such as \"5m\" or \"30s\", or \"0\" for no read-back", s)
	case iv < MinVerifyInterval || iv > MaxVerifyInterval:
		d.failf(kp, "%s is out of range: read back at most every %s and at least every %s, or \"0\" for never", s, MinVerifyInterval, MaxVerifyInterval)
	default:
		return iv, true
	}
	return 0, false
}

// mergeDrift merges the [drift] tables in load order, key by key.
func mergeDrift(decls []*fileDecl) Drift {
	var action setting[DriftAction]
	var interval, fight setting[time.Duration]
	out := Drift{}
	for _, d := range decls {
		if d.drift.table.File != "" {
			out.Source = d.drift.table
		}
		action.override(d.drift.action)
		interval.override(d.drift.interval)
		fight.override(d.drift.fight)
	}
	out.Action = action.or(DriftCorrect)
	out.VerifyInterval = interval.or(DefaultVerifyInterval)
	out.FightWindow = fight.or(DefaultFightWindow)
	return out
}

func (a DriftAction) String() string { return string(a) }

// Describe is the table as operators read it.
func (dr Drift) Describe() string {
	v := "off"
	if dr.VerifyInterval > 0 {
		v = "every " + dr.VerifyInterval.String()
	}
	return fmt.Sprintf("action %s, read-back %s", dr.Action, v)
}
