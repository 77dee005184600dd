package bus

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// testRefusedLog is a refusedLog whose windows end when the test says.
type testRefusedLog struct {
	*refusedLog
	mu    sync.Mutex
	out   bytes.Buffer
	ends  []func()
	moved int
}

func newTestRefusedLog() *testRefusedLog {
	l := &testRefusedLog{}
	l.refusedLog = newRefusedLog(slog.New(slog.NewTextHandler(lockedWriter{l}, nil)))
	l.after = func(d time.Duration, fn func()) {
		if d != refusedWindow {
			panic("a window of another length")
		}
		l.mu.Lock()
		l.ends = append(l.ends, fn)
		l.mu.Unlock()
	}
	l.changed = func() { l.mu.Lock(); l.moved++; l.mu.Unlock() }
	return l
}

type lockedWriter struct{ l *testRefusedLog }

func (w lockedWriter) Write(p []byte) (int, error) {
	w.l.mu.Lock()
	defer w.l.mu.Unlock()
	return w.l.out.Write(p)
}

// endWindows ends every window open now.
func (l *testRefusedLog) endWindows() {
	l.mu.Lock()
	ends := l.ends
	l.ends = nil
	l.mu.Unlock()
	for _, fn := range ends {
		fn()
	}
}

func (l *testRefusedLog) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Split(strings.TrimSpace(l.out.String()), "\n")
}

func (l *testRefusedLog) count(method, reason string) uint64 {
	for _, c := range l.refusedCalls() {
		if c.Method == method && c.Reason == reason {
			return c.Calls
		}
	}
	return 0
}

// One caller's refusals: the first refusedLinesPerCaller of a window are
// logged in full, the rest counted and summed up in one line when the
// window ends, naming the caller, the count and the methods; every one is
// counted by method and reason. The next window starts afresh.
func TestRefusedCallsLoggedAtABoundedRate(t *testing.T) {
	l := newTestRefusedLog()
	user := refusedCaller{sender: ":1.42", uid: 1000, pid: 4242, known: true}
	for i := range 5000 {
		method := "SetRoCE"
		if i%10 == 0 {
			method = "SetQoS"
		}
		l.note(user, method, ReasonDenied, "call refused", "err", "polkit refused")
	}
	if got := l.lines(); len(got) != refusedLinesPerCaller {
		t.Fatalf("%d lines during the window, want %d:\n%s", len(got), refusedLinesPerCaller, strings.Join(got, "\n"))
	}
	l.endWindows()
	got := l.lines()
	if len(got) != refusedLinesPerCaller+1 {
		t.Fatalf("%d lines after the window, want %d:\n%s", len(got), refusedLinesPerCaller+1, strings.Join(got, "\n"))
	}
	for _, want := range []string{"level=WARN", "more refused calls than logged", "uid=1000", "pid=4242", "calls=4995", `methods="SetQoS 499, SetRoCE 4496"`, "within=10s"} {
		if !strings.Contains(got[len(got)-1], want) {
			t.Errorf("summary %q lacks %q", got[len(got)-1], want)
		}
	}
	for _, want := range []string{"level=INFO", "call refused", "uid=1000", "method=SetQoS", "err=\"polkit refused\""} {
		if !strings.Contains(got[0], want) {
			t.Errorf("first line %q lacks %q", got[0], want)
		}
	}
	if n, m := l.count("SetRoCE", ReasonDenied), l.count("SetQoS", ReasonDenied); n+m != 5000 || m != 500 {
		t.Errorf("counted SetRoCE %d, SetQoS %d; want 4500 and 500", n, m)
	}
	if l.moved != 5000 {
		t.Errorf("the metrics were told of %d refusals, want 5000", l.moved)
	}
	// A new window: logged in full again; a quiet one ends without a line.
	l.note(user, "Reload", ReasonNotAllowed, "call refused")
	l.endWindows()
	if got := l.lines(); len(got) != refusedLinesPerCaller+2 || !strings.Contains(got[len(got)-1], "method=Reload") {
		t.Errorf("the next window:\n%s", strings.Join(got, "\n"))
	}
}

// One caller's flood does not take another's lines; callers beyond
// refusedCallers in a window (or that the bus could not name) share one
// window, and its summary says so.
func TestRefusedCallersEachHaveTheirLines(t *testing.T) {
	l := newTestRefusedLog()
	for range 100 {
		l.note(refusedCaller{sender: ":1.1", uid: 1000, known: true}, "SetRoCE", ReasonDenied, "call refused")
	}
	l.note(refusedCaller{sender: ":1.2", uid: 1001, known: true}, "SetRoCE", ReasonDenied, "call refused")
	if got := l.lines(); len(got) != refusedLinesPerCaller+1 || !strings.Contains(got[len(got)-1], "uid=1001") {
		t.Fatalf("another user's refusal after a flood:\n%s", strings.Join(got, "\n"))
	}
	for uid := range uint32(2 * refusedCallers) {
		for range refusedLinesPerCaller + 1 {
			l.note(refusedCaller{sender: ":1.9", uid: 2000 + uid, known: true}, "Plan", ReasonBusy, "call refused")
		}
	}
	l.endWindows()
	var others, summaries int
	for _, line := range l.lines() {
		if strings.Contains(line, "from callers beyond the first 64") {
			others++
		}
		if strings.Contains(line, "more refused calls than logged") {
			summaries++
		}
	}
	if others != 1 || summaries != refusedCallers {
		t.Errorf("%d summaries, %d of the shared window; want %d and 1:\n%s", summaries, others, refusedCallers, strings.Join(l.lines(), "\n"))
	}
	if n := len(l.lines()); n > (refusedCallers+1)*(refusedLinesPerCaller+1) {
		t.Errorf("%d lines in a window, more than the bound", n)
	}
}
