package bus

import (
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/godbus/dbus/v5"
)

// Refused calls are logged at a bounded rate per caller and all counted.
// Any local user may call, and each refusal was one line at info priority:
// a user making 2,000 refused calls a second filled journald's budget for
// rdmad (it rate-limits each service), which then dropped rdmad's other
// lines, the record of what rdmad applied and of who changed what among
// them. Now each caller (by uid, which a user cannot multiply as they can
// connections) has its first refusedLinesPerCaller refusals of a
// refusedWindow logged in full; the rest are counted, and one line when
// the window ends says how many there were, of which methods. The
// limiter sees refusals only: rdmad's own lines and those of accepted
// calls never go through it.
const (
	refusedWindow         = 10 * time.Second
	refusedLinesPerCaller = 5
	// refusedCallers bounds the callers followed one by one in a window
	// (a user with subordinate uids has 65,536 of them); refusals of
	// further callers share one window whose lines they take turns at.
	refusedCallers = 64
)

// Why a call was refused: the reason label of rdmad_refused_calls_total.
const (
	ReasonNotAllowed = "not-allowed" // [api] changes (org.rdmad1.Error.NotAllowed)
	ReasonDenied     = "denied"      // polkit said no, or cannot be asked (AccessDenied)
	ReasonBusy       = "busy"        // a local bound (org.rdmad1.Error.Busy)
)

// RefusedCount is how many calls of a method were refused for a reason
// since rdmad started (rdmad_refused_calls_total).
type RefusedCount struct {
	Method, Reason string
	Calls          uint64
}

// refusedCaller is what the bus knows of the sender of a refused call.
type refusedCaller struct {
	sender string
	uid    uint32
	pid    uint32
	known  bool // uid and pid were read from the bus
}

// refusedLog is the limiter and the counter.
type refusedLog struct {
	log *slog.Logger
	// after runs fn once d has passed (time.AfterFunc; tests fire it).
	after func(d time.Duration, fn func())

	mu      sync.Mutex
	counts  map[refusedKey]uint64
	windows map[uint32]*refusedWindowState // by uid
	others  *refusedWindowState            // callers beyond refusedCallers, and unknown ones
	changed func()                         // the counts moved (the metrics textfile)
}

type refusedKey struct{ method, reason string }

// refusedWindowState is one caller's window.
type refusedWindowState struct {
	caller refusedCaller // the last refused call's
	others bool
	logged int
	held   map[string]int // calls not logged, by method
}

func newRefusedLog(log *slog.Logger) *refusedLog {
	return &refusedLog{log: log, after: func(d time.Duration, fn func()) { time.AfterFunc(d, fn) },
		counts: map[refusedKey]uint64{}, windows: map[uint32]*refusedWindowState{}}
}

// note counts one refused call of method and logs it with msg and attrs,
// unless its caller has used the window's lines.
func (l *refusedLog) note(c refusedCaller, method, reason, msg string, attrs ...any) {
	l.mu.Lock()
	l.counts[refusedKey{method, reason}]++
	w := l.window(c)
	w.caller = c
	full := w.logged < refusedLinesPerCaller
	if full {
		w.logged++
	} else {
		w.held[method]++
	}
	changed := l.changed
	l.mu.Unlock()
	if full {
		l.log.Info(msg, append(c.attrs(), append([]any{"method", method}, attrs...)...)...)
	}
	if changed != nil {
		changed()
	}
}

// window is c's window, opened (with its end scheduled) if none is (under
// l.mu).
func (l *refusedLog) window(c refusedCaller) *refusedWindowState {
	if c.known {
		if w := l.windows[c.uid]; w != nil {
			return w
		}
		if len(l.windows) < refusedCallers {
			w := &refusedWindowState{held: map[string]int{}}
			l.windows[c.uid] = w
			l.after(refusedWindow, func() { l.close(c.uid, false) })
			return w
		}
	}
	if l.others == nil {
		l.others = &refusedWindowState{others: true, held: map[string]int{}}
		l.after(refusedWindow, func() { l.close(0, true) })
	}
	return l.others
}

// close ends a window: the calls it did not log are summed up in one line.
func (l *refusedLog) close(uid uint32, others bool) {
	l.mu.Lock()
	w := l.windows[uid]
	if others {
		w, l.others = l.others, nil
	} else {
		delete(l.windows, uid)
	}
	l.mu.Unlock()
	if w == nil || len(w.held) == 0 {
		return
	}
	total := 0
	methods := make([]string, 0, len(w.held))
	for _, m := range slices.Sorted(maps.Keys(w.held)) {
		total += w.held[m]
		methods = append(methods, fmt.Sprintf("%s %d", m, w.held[m]))
	}
	attrs := []any{"calls", total, "methods", strings.Join(methods, ", "), "within", refusedWindow}
	if w.others {
		l.log.Warn("more refused calls than logged, from callers beyond the first "+fmt.Sprint(refusedCallers)+" of the window", attrs...)
		return
	}
	l.log.Warn("more refused calls than logged", append(w.caller.attrs(), attrs...)...)
}

// attrs name the caller in a log line.
func (c refusedCaller) attrs() []any {
	if !c.known {
		return []any{"sender", c.sender}
	}
	return []any{"sender", c.sender, "uid", c.uid, "pid", c.pid}
}

// refusedCalls lists the counts, by method and reason.
func (l *refusedLog) refusedCalls() []RefusedCount {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]RefusedCount, 0, len(l.counts))
	for k, n := range l.counts {
		out = append(out, RefusedCount{Method: k.method, Reason: k.reason, Calls: n})
	}
	slices.SortFunc(out, func(a, b RefusedCount) int {
		if c := strings.Compare(a.Method, b.Method); c != 0 {
			return c
		}
		return strings.Compare(a.Reason, b.Reason)
	})
	return out
}

// RefusedCalls is how many calls were refused since rdmad started, by
// method and reason: rdmad_refused_calls_total.
func (s *Server) RefusedCalls() []RefusedCount { return s.refused.refusedCalls() }

// OnRefused has fn called after each refused call (off every lock); the
// metrics textfile is written again.
func (s *Server) OnRefused(fn func()) {
	s.refused.mu.Lock()
	s.refused.changed = fn
	s.refused.mu.Unlock()
}

// refusedCallerOf is what the bus says of sender: its uid and pid
// (GetConnectionCredentials). A sender the bus no longer knows is named
// alone.
func (s *Server) refusedCallerOf(sender string) refusedCaller {
	c := refusedCaller{sender: sender}
	conn := s.conn.Load()
	if sender == "" || conn == nil {
		return c
	}
	var creds map[string]dbus.Variant
	if err := conn.BusObject().Call("org.freedesktop.DBus.GetConnectionCredentials", 0, sender).Store(&creds); err != nil {
		return c
	}
	uid, uok := creds["UnixUserID"].Value().(uint32)
	pid, _ := creds["ProcessID"].Value().(uint32)
	if uok {
		c.uid, c.pid, c.known = uid, pid, true
	}
	return c
}

// refuse logs and counts one refused call of msg's sender.
func (s *Server) refuse(msg dbus.Message, method, reason, text string, attrs ...any) {
	sender, _ := msg.Headers[dbus.FieldSender].Value().(string)
	s.refused.note(s.refusedCallerOf(sender), method, reason, text, attrs...)
}
