package reconcile

import (
	"sync"
	"time"
)

// A failure is one line at error priority, and a fight with another
// manager, or a device that fails on every event, repeats one failure as
// often as events come: a truncating writer on a contested setting gave
// 3,071 error lines in 20 s, which spend journald's budget for rdmad (it
// rate-limits each service) and then lose rdmad's other lines. So the
// same subject and kind of action has its first failureLines failures of
// a failureWindow logged in full; the rest are counted and summed up in
// one line, with the last error, when the window ends. Failures of other
// subjects or kinds have their own lines.
const (
	failureWindow = 10 * time.Second
	failureLines  = 5
)

type failureKey struct {
	subject Subject
	kind    Kind
}

// failureWindows follows the failures of each subject and kind.
type failureWindows struct {
	after func(d time.Duration, fn func()) // time.AfterFunc; tests end windows themselves

	mu   sync.Mutex
	open map[failureKey]*failureWindowState
}

type failureWindowState struct {
	logged, held int
	last         Action // the last failure not logged
}

func newFailureWindows() *failureWindows {
	return &failureWindows{after: func(d time.Duration, fn func()) { time.AfterFunc(d, fn) }, open: map[failureKey]*failureWindowState{}}
}

// logFailure logs a failed action unless its subject and kind used the
// window's lines. A call's own failure (caller: the audit attributes of
// the call whose pass it is) is logged every time, with its caller: it
// answers that call, and the record of who changed what is never dropped.
func (r *Reconciler) logFailure(a Action, caller []any) {
	if len(caller) > 0 {
		r.log.Error("failed", append([]any{"subject", a.Subject.String(), "what", string(a.Kind), "value", a.To, "source", a.Source, "err", a.Err}, caller...)...)
		return
	}
	fw := r.failures
	k := failureKey{a.Subject, a.Kind}
	fw.mu.Lock()
	w := fw.open[k]
	if w == nil {
		w = &failureWindowState{}
		fw.open[k] = w
		fw.after(failureWindow, func() { r.endFailureWindow(k) })
	}
	full := w.logged < failureLines
	if full {
		w.logged++
	} else {
		w.held++
		w.last = a
	}
	fw.mu.Unlock()
	if full {
		r.log.Error("failed", "subject", a.Subject.String(), "what", string(a.Kind), "value", a.To, "source", a.Source, "err", a.Err)
	}
}

// endFailureWindow sums up the failures a window did not log.
func (r *Reconciler) endFailureWindow(k failureKey) {
	fw := r.failures
	fw.mu.Lock()
	w := fw.open[k]
	delete(fw.open, k)
	fw.mu.Unlock()
	if w == nil || w.held == 0 {
		return
	}
	a := w.last
	r.log.Error("failed again, more often than logged", "subject", a.Subject.String(), "what", string(a.Kind), "times", w.held,
		"within", failureWindow, "value", a.To, "source", a.Source, "err", a.Err)
}
