package reconcile

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// A hold suspends rdmad's writes of some settings of one port while
// another program changes them on purpose (rdmactl qualify trying each
// setting of an adapter): rdmad still reads and records them, and a value
// that is not the declared one is recorded as Differs with the hold as the
// reason, whatever the pass (a correction, an arrival, a reload), so the
// two never fight. The holder is a D-Bus caller and the hold a lease: the
// bus ends it when the caller releases it or leaves the bus. When a hold
// ends the service reads the port again, and rdmad corrects what the
// holder left (under [drift] action).

// Hold is one holder's hold on settings of one port.
type Hold struct {
	Subject  Subject    // the port
	Settings []*Setting // in part order
	// Holder names the caller ("the bus name :1.42, uid 0, pid 1234"):
	// each holder has at most one hold on a port.
	Holder string
	Since  time.Time
}

// SettingNames are the names of h's settings, in h's order.
func (h Hold) SettingNames() []string {
	out := make([]string, len(h.Settings))
	for i, s := range h.Settings {
		out[i] = s.Name
	}
	return out
}

// HeldError is why a held setting is not written.
type HeldError struct{ Hold Hold }

func (e *HeldError) Error() string {
	return fmt.Sprintf("held by %s since %s: rdmad reads it and does not write it until the hold ends", e.Hold.Holder, e.Hold.Since.Format(time.TimeOnly))
}

// MaxHolds bounds the holds rdmad keeps: a hold per port of a host of a
// thousand dual-port devices, twice over.
const MaxHolds = 4096

// holdKey is one holder's hold on one port.
type holdKey struct {
	subject Subject
	holder  string
}

// PortSetting returns the setting of a port that a device part keeps by
// its name: what a hold may name.
func (r *Reconciler) PortSetting(name string) (*Setting, bool) {
	for _, p := range r.deviceParts {
		for _, s := range p.Settings() {
			if s.Name == name {
				return s, true
			}
		}
	}
	return nil, false
}

// PortSettingNames lists the names PortSetting knows, in part order.
func (r *Reconciler) PortSettingNames() []string {
	var out []string
	for _, p := range r.deviceParts {
		for _, s := range p.Settings() {
			out = append(out, s.Name)
		}
	}
	return out
}

// HoldCorrections starts h, or replaces the settings of its holder's hold
// on the same port (Since then stays the first hold's). It refuses a hold
// past MaxHolds.
func (r *Reconciler) HoldCorrections(h Hold) error {
	r.holdMu.Lock()
	defer r.holdMu.Unlock()
	if r.holds == nil {
		r.holds = map[holdKey]Hold{}
	}
	k := holdKey{h.Subject, h.Holder}
	if old, ok := r.holds[k]; ok {
		h.Since = old.Since
	} else if len(r.holds) >= MaxHolds {
		return fmt.Errorf("hold corrections of %s: rdmad keeps at most %d holds", h.Subject, MaxHolds)
	}
	h.Settings = slices.Clone(h.Settings)
	r.holds[k] = h
	return nil
}

// ReleaseCorrections ends holder's hold on subject; false when there was
// none.
func (r *Reconciler) ReleaseCorrections(holder string, subject Subject) bool {
	r.holdMu.Lock()
	defer r.holdMu.Unlock()
	k := holdKey{subject, holder}
	_, ok := r.holds[k]
	delete(r.holds, k)
	return ok
}

// ReleaseHolder ends every hold of holder (it left the bus) and returns
// the ports they were on, sorted.
func (r *Reconciler) ReleaseHolder(holder string) []Subject {
	r.holdMu.Lock()
	defer r.holdMu.Unlock()
	var out []Subject
	for k := range r.holds {
		if k.holder == holder {
			out = append(out, k.subject)
			delete(r.holds, k)
		}
	}
	sortSubjects(out)
	return out
}

// ReleaseAll ends every hold (the bus connection was lost: every holder
// with it) and returns the ports they were on, sorted.
func (r *Reconciler) ReleaseAll() []Subject {
	r.holdMu.Lock()
	defer r.holdMu.Unlock()
	var out []Subject
	for k := range r.holds {
		out = append(out, k.subject)
	}
	r.holds = nil
	sortSubjects(out)
	return slices.Compact(out)
}

// Holds lists the holds in force, by port, then holder.
func (r *Reconciler) Holds() []Hold {
	r.holdMu.Lock()
	defer r.holdMu.Unlock()
	out := make([]Hold, 0, len(r.holds))
	for _, h := range r.holds {
		out = append(out, h)
	}
	sort.Slice(out, func(i, j int) bool {
		if c := compareSubjects(out[i].Subject, out[j].Subject); c != 0 {
			return c < 0
		}
		return out[i].Holder < out[j].Holder
	})
	return out
}

// heldBy is the hold that keeps rdmad from writing setting st of s, if
// any (the oldest, when several holders hold it).
func (r *Reconciler) heldBy(s Subject, st *Setting) (Hold, bool) {
	r.holdMu.Lock()
	defer r.holdMu.Unlock()
	var found Hold
	ok := false
	for k, h := range r.holds {
		if k.subject != s || !slices.Contains(h.Settings, st) {
			continue
		}
		if !ok || h.Since.Before(found.Since) || (h.Since.Equal(found.Since) && h.Holder < found.Holder) {
			found, ok = h, true
		}
	}
	return found, ok
}

// heldNamed is heldBy for a setting known by name (a value found, to be
// put back).
func (r *Reconciler) heldNamed(s Subject, name string) bool {
	st, ok := r.PortSetting(name)
	if !ok {
		return false
	}
	_, held := r.heldBy(s, st)
	return held
}

func sortSubjects(s []Subject) {
	sort.Slice(s, func(i, j int) bool { return compareSubjects(s[i], s[j]) < 0 })
}

func compareSubjects(a, b Subject) int {
	if c := strings.Compare(a.Device, b.Device); c != 0 {
		return c
	}
	if a.Port != b.Port {
		return a.Port - b.Port
	}
	return strings.Compare(a.String(), b.String())
}
