package reconcile

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/rdmad/rdmad/daemon/config"
)

// Report is what one pass did.
type Report struct {
	Started  time.Time
	Finished time.Time
	Scope    Scope
	Actions  []Action
	Records  []Record // the records of the subjects the pass read, and the host parts'
	Read     int      // devices read
}

// Count counts actions with status s.
func (rep Report) Count(s Status) int {
	n := 0
	for _, a := range rep.Actions {
		if a.Status == s {
			n++
		}
	}
	return n
}

// Failed reports whether any action failed.
func (rep Report) Failed() bool { return rep.Count(Failed) > 0 }

// Failures returns the failed actions.
func (rep Report) Failures() []Action {
	var out []Action
	for _, a := range rep.Actions {
		if a.Status == Failed {
			out = append(out, a)
		}
	}
	return out
}

// Find returns the action of kind on subject, if the pass has one.
func (rep Report) Find(s Subject, k Kind) (Action, bool) {
	for _, a := range rep.Actions {
		if a.Subject == s && a.Kind == k {
			return a, true
		}
	}
	return Action{}, false
}

// Call is what a mutating call declared: the subjects it targets and the
// keys it set there, for Outcome.
type Call struct {
	Subjects []Subject
	Keys     []config.Key
	// Mine, when set, says whether a declaration is the call's own (the
	// runtime overlay, or rdmad's drop-in): a record of the call's keys
	// declared elsewhere means another rule wins, which is not what the
	// call asked for.
	Mine func(config.Position) bool
	// Removes says the call withdraws its keys' declaration (deleting a
	// link): no record needs to hold, only its own actions must not fail.
	Removes bool
}

func (c Call) covers(s Subject, st *Setting) bool {
	return st != nil && slices.Contains(c.Subjects, s) && slices.Contains(c.Keys, st.Key)
}

// Outcome is the one answer to "did my call take": for every subject and
// key of the call, the records the pass left must hold, be the call's own
// declaration, and exist (a setting no part judged was not applied: its
// subject went away, or a not-applicable record of the subject says why).
// failed lists what did not take, as failed actions; deferred lists what
// the running kernel takes only at the next boot.
func (rep Report) Outcome(c Call) (failed []Action, deferred []Record) {
	for _, a := range rep.Actions {
		// A step that is not a setting's record (deleting a link) fails
		// the call by its action. A value found that could not be put
		// back when a declaration went does not: the declaration went,
		// and doctor reports the rest (undo-partial).
		if a.Status == Failed && !a.restore && c.covers(a.Subject, a.Setting) && (c.Removes || !rep.hasRecord(a.Subject, a.Setting)) {
			failed = append(failed, a)
		}
	}
	if c.Removes {
		return failed, nil
	}
	for _, s := range c.Subjects {
		for _, k := range c.Keys {
			found := false
			for _, r := range rep.Records {
				if r.Subject != s || r.Setting == nil || r.Setting.Key != k {
					continue
				}
				found = true
				switch {
				case r.State == Deferred:
					deferred = append(deferred, r)
				case r.State == Undeclared:
					failed = append(failed, r.failure(fmt.Errorf("no rule declares it: the call's declaration is not in force")))
				case c.Mine != nil && !c.Mine(r.Source):
					failed = append(failed, r.failure(fmt.Errorf("the policy in force sets %s at %s, not the requested value", Text(r.Declared), r.Source)))
				case r.State != Holds:
					failed = append(failed, r.failure(r.Why))
				}
			}
			if !found && !rep.failedOn(s, k) {
				failed = append(failed, Action{Subject: s, Status: Failed, Err: rep.notSet(s)})
			}
		}
	}
	return failed, deferred
}

// failure is a record that does not hold, as a failed action.
func (r Record) failure(why error) Action {
	if why == nil {
		why = fmt.Errorf("%s does not hold (%s)", r.Setting.Title, r.State)
	}
	return Action{Subject: r.Subject, Kind: r.Setting.Kind, Setting: r.Setting, To: Text(r.Declared), From: Text(r.Observed), Status: Failed, Err: why, Source: r.Source.String()}
}

func (rep Report) hasRecord(s Subject, st *Setting) bool {
	for _, r := range rep.Records {
		if r.Subject == s && r.Setting == st {
			return true
		}
	}
	return false
}

func (rep Report) failedOn(s Subject, k config.Key) bool {
	for _, a := range rep.Actions {
		if a.Status == Failed && a.Subject == s && a.Setting != nil && a.Setting.Key == k {
			return true
		}
	}
	return false
}

// notSet says why a subject got no record of a key: a not-applicable
// record or action of the subject says why, else it went away.
func (rep Report) notSet(s Subject) error {
	for _, r := range rep.Records {
		if r.Subject == s && r.State == Inapplicable && r.Why != nil {
			return fmt.Errorf("not set: %w", r.Why)
		}
	}
	for _, a := range rep.Actions {
		if a.Subject == s && (a.Status == NotApplicable || a.Status == Failed) && a.Err != nil {
			return fmt.Errorf("not set: %w", a.Err)
		}
	}
	return fmt.Errorf("the pass did not set it: %s went away or no longer takes it", s)
}

// Changed lists the call's actions that changed the kernel, in pass
// order: what a refused call has its parts put back.
func (rep Report) Changed(c Call) []Action {
	var out []Action
	for _, a := range rep.Actions {
		if a.Status == Changed && c.covers(a.Subject, a.Setting) {
			out = append(out, a)
		}
	}
	return out
}

// WriteReport prints a pass the way `rdmad --once` shows it: one line per
// action that did something or was checked, in aligned columns, then a
// summary line. Columns are measured in one walk and padded by hand, not
// with tabwriter (docs/performance.md, "What keeps a pass cheap").
func WriteReport(w io.Writer, rep Report) {
	rows := make([][5]string, len(rep.Actions))
	var width [5]int
	for i, a := range rep.Actions {
		detail := ""
		switch a.Status {
		case Changed:
			detail = quoteEmpty(a.From) + " -> " + quoteEmpty(a.To)
		case Unchanged, Pending:
			detail = quoteEmpty(a.To)
		case Failed, Held:
			detail = quoteEmpty(a.To) + ": " + errText(a.Err)
		case NotApplicable:
			detail = errText(a.Err)
		}
		src := ""
		if a.Source != "" {
			src = "(" + a.Source + ")"
		}
		rows[i] = [5]string{a.Status.String(), a.Subject.String(), string(a.Kind), detail, src}
		for c, s := range rows[i] {
			width[c] = max(width[c], utf8.RuneCountInString(s))
		}
	}
	var b strings.Builder
	for _, r := range rows {
		b.Reset()
		for c, s := range r {
			b.WriteString(s)
			if c < len(r)-1 {
				b.WriteString(strings.Repeat(" ", width[c]-utf8.RuneCountInString(s)+2))
			}
		}
		b.WriteByte('\n')
		io.WriteString(w, strings.TrimRight(b.String(), " \n")+"\n")
	}
	fmt.Fprintf(w, "%d changed, %d unchanged, %d failed, %d not applicable (%s)\n",
		rep.Count(Changed), rep.Count(Unchanged), rep.Count(Failed), rep.Count(NotApplicable),
		rep.Finished.Sub(rep.Started).Round(1000))
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func quoteEmpty(s string) string {
	if s == "" {
		return `""`
	}
	return strconv.Quote(s)
}
