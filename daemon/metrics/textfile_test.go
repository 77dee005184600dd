package metrics

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rdmad/rdmad/daemon/doctor"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/daemon/reconcile"
	"github.com/rdmad/rdmad/daemon/roce"
)

// fakeSource is a reconciler state for Textfile's own tests; the real
// reconciler drives it in service_test.go.
type fakeSource struct {
	mu     sync.Mutex
	states map[string]reconcile.DeviceState
	asked  []string // names DeviceStates was asked for, in order
}

func newFakeSource(names ...string) *fakeSource {
	f := &fakeSource{states: map[string]reconcile.DeviceState{}}
	for _, n := range names {
		f.set(n, "RoCE v2")
	}
	return f
}

// set puts a RoCE device whose port 1 shows mode (v1 declared).
func (f *fakeSource) set(name, mode string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ds := reconcile.DeviceState{Device: host.Device{Name: name}, Ports: []reconcile.PortState{rocePort(mode, 106)}}
	f.states[name] = ds
}

func (f *fakeSource) Settings() []*reconcile.Setting {
	return []*reconcile.Setting{roce.Mode.Setting(), roce.TOS.Setting()}
}

func (f *fakeSource) remove(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.states, name)
}

func (f *fakeSource) Summary() reconcile.Summary {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := reconcile.Summary{LastReconcile: time.Now()}
	for n := range f.states {
		s.Devices = append(s.Devices, n)
	}
	sort.Strings(s.Devices)
	return s
}

func (f *fakeSource) DeviceStates(names []string) []reconcile.DeviceState {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, names...)
	var out []reconcile.DeviceState
	for _, n := range names {
		if ds, ok := f.states[n]; ok {
			out = append(out, ds)
		}
	}
	return out
}

func (f *fakeSource) takeAsked() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	a := f.asked
	f.asked = nil
	sort.Strings(a)
	return a
}

func newTextfile(src Source, logs io.Writer) *Textfile {
	if logs == nil {
		logs = io.Discard
	}
	return New(Options{Source: src, Log: slog.New(slog.NewTextHandler(logs, nil)), MinInterval: -1})
}

func readFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func inode(t testing.TB, path string) uint64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Sys().(*syscall.Stat_t).Ino
}

func TestTextfileWritesAtomicallyWithMode0644(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rdmad.prom")
	src := newFakeSource("mlx5_0")
	tf := newTextfile(src, nil)
	tf.SetPath(path)
	if tf.flush() {
		t.Error("flush wrote before any pass ended")
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("file written before the first pass: %v", err)
	}

	old := syscall.Umask(0o077) // the mode must not depend on rdmad's umask
	tf.Changed(reconcile.Change{Full: true, Updated: []string{"mlx5_0"}})
	ok := tf.flush()
	syscall.Umask(old)
	if !ok {
		t.Fatal("flush did not keep the file")
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644 (node_exporter reads it as another user)", st.Mode().Perm())
	}
	fams := ParseText(t, readFile(t, path))
	mustValue(t, fams, 1, "rdmad_port_drift", "device=mlx5_0", "port=1", "setting=roce_mode")

	// The next write replaces the file by rename: a reader holding the old
	// one never sees it change under it, and no temporary is left behind.
	before := inode(t, path)
	src.set("mlx5_0", "IB/RoCE v1")
	tf.Changed(reconcile.Change{Updated: []string{"mlx5_0"}})
	tf.flush()
	if inode(t, path) == before {
		t.Error("file rewritten in place, not replaced by rename")
	}
	mustValue(t, ParseText(t, readFile(t, path)), 0, "rdmad_port_drift", "device=mlx5_0", "port=1", "setting=roce_mode")
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 {
		t.Errorf("directory holds %d entries, want only rdmad.prom", len(ents))
	}
}

// A pass over one device renders that device only: the per-event cost of
// the file does not include reading every device's state again.
func TestTextfileRendersOnlyChangedDevices(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rdmad.prom")
	src := newFakeSource("a", "b", "c")
	tf := newTextfile(src, nil)
	tf.SetPath(path)
	tf.Changed(reconcile.Change{Full: true, Updated: []string{"a", "b", "c"}})
	tf.flush()
	if got := src.takeAsked(); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Errorf("full pass rendered %v, want every device", got)
	}

	src.set("b", "IB/RoCE v1")
	src.remove("c")
	tf.Changed(reconcile.Change{Updated: []string{"b"}})
	tf.Changed(reconcile.Change{Removed: []string{"c"}})
	tf.flush()
	if got := src.takeAsked(); !slices.Equal(got, []string{"b", "c"}) {
		t.Errorf("partial passes rendered %v, want b and c only", got)
	}
	fams := ParseText(t, readFile(t, path))
	mustValue(t, fams, 1, "rdmad_port_drift", "device=a", "port=1", "setting=roce_mode")
	mustValue(t, fams, 0, "rdmad_port_drift", "device=b", "port=1", "setting=roce_mode")
	if _, ok := Sample(fams, "rdmad_port_drift", "device=c", "port=1", "setting=roce_mode"); ok {
		t.Error("removed device c still has drift samples")
	}
	mustValue(t, fams, 2, "rdmad_devices")

	// A heartbeat with nothing changed reads no device.
	tf.flush()
	if got := src.takeAsked(); len(got) != 0 {
		t.Errorf("heartbeat rendered %v, want nothing", got)
	}
}

func TestTextfileFollowsPathChanges(t *testing.T) {
	dir := t.TempDir()
	first, second := filepath.Join(dir, "a", "rdmad.prom"), filepath.Join(dir, "b", "rdmad.prom")
	tf := newTextfile(newFakeSource("mlx5_0"), nil)
	tf.SetPath(first)
	tf.Changed(reconcile.Change{Full: true, Updated: []string{"mlx5_0"}})
	tf.flush()
	ParseText(t, readFile(t, first))

	tf.SetPath(second)
	tf.flush()
	if _, err := os.Stat(first); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("old textfile left behind after the path moved: %v", err)
	}
	mustValue(t, ParseText(t, readFile(t, second)), 1, "rdmad_devices")

	tf.SetPath("")
	if tf.flush() {
		t.Error("flush keeps a file with metrics off")
	}
	if _, err := os.Stat(second); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("textfile left behind after metrics were turned off: %v", err)
	}

	// On again: everything is rendered afresh.
	tf.SetPath(first)
	tf.Changed(reconcile.Change{Updated: []string{"mlx5_0"}})
	tf.flush()
	mustValue(t, ParseText(t, readFile(t, first)), 1, "rdmad_port_drift", "device=mlx5_0", "port=1", "setting=roce_mode")
}

// A file rdmad did not write (another exporter's, a FIFO) is neither
// replaced nor removed, and the error says why.
func TestTextfileLeavesForeignFilesAlone(t *testing.T) {
	dir := t.TempDir()
	foreign := filepath.Join(dir, "smartmon.prom")
	const content = "# HELP smartmon_x x\n# TYPE smartmon_x gauge\nsmartmon_x 1\n"
	if err := os.WriteFile(foreign, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo.prom")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer // flush logs on the test goroutine
	tf := newTextfile(newFakeSource("mlx5_0"), &logs)
	tf.Changed(reconcile.Change{Full: true})
	for _, p := range []string{foreign, fifo} {
		tf.SetPath(p)
		tf.flush()
	}
	if got := string(readFile(t, foreign)); got != content {
		t.Errorf("foreign file rewritten:\n%s", got)
	}
	if st, err := os.Lstat(fifo); err != nil || st.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("FIFO replaced: %v", err)
	}
	if !strings.Contains(logs.String(), "was not written by rdmad") || !strings.Contains(logs.String(), "not a regular file") {
		t.Errorf("logs do not explain the refusals:\n%s", logs.String())
	}

	// Moving away from a path rdmad never wrote removes nothing there.
	tf.SetPath(filepath.Join(dir, "rdmad.prom"))
	tf.flush()
	if got := string(readFile(t, foreign)); got != content {
		t.Error("foreign file changed when the path moved away from it")
	}
}

// A write that fails is logged once and retried: the next write succeeds
// once the cause is gone.
func TestTextfileRetriesAfterWriteError(t *testing.T) {
	dir := t.TempDir()
	blocker := filepath.Join(dir, "sub")
	if err := os.WriteFile(blocker, nil, 0o644); err != nil { // a file where the directory should be
		t.Fatal(err)
	}
	path := filepath.Join(blocker, "rdmad.prom")
	var logs bytes.Buffer // flush logs on the test goroutine
	tf := newTextfile(newFakeSource("mlx5_0"), &logs)
	tf.SetPath(path)
	tf.Changed(reconcile.Change{Full: true})
	tf.flush()
	tf.flush()
	if n := strings.Count(logs.String(), "cannot write the textfile"); n != 1 {
		t.Errorf("the same error logged %d times, want once:\n%s", n, logs.String())
	}
	if err := os.Remove(blocker); err != nil {
		t.Fatal(err)
	}
	tf.flush()
	ParseText(t, readFile(t, path))
	if !strings.Contains(logs.String(), "textfile written again") {
		t.Errorf("recovery not logged:\n%s", logs.String())
	}
}

// Run writes after a change, coalesces changes within the minimum
// interval into one later write, and rewrites the file every heartbeat.
func TestTextfileRunCoalescesAndBeats(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "rdmad.prom")
	src := newFakeSource("mlx5_0")
	tf := New(Options{Source: src, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		MinInterval: time.Second, Heartbeat: 1500 * time.Millisecond})
	tf.SetPath(path)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { tf.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	drift := func() (float64, bool) {
		b, err := os.ReadFile(path)
		if err != nil {
			return 0, false
		}
		return Sample(ParseText(t, b), "rdmad_port_drift", "device=mlx5_0", "port=1", "setting=roce_mode")
	}

	tf.Changed(reconcile.Change{Full: true})
	waitFor("the first write", func() bool { v, ok := drift(); return ok && v == 1 })
	first := inode(t, path)

	// Two passes right after the first write: both land in one write.
	src.set("mlx5_0", "IB/RoCE v1")
	tf.Changed(reconcile.Change{Updated: []string{"mlx5_0"}})
	tf.Changed(reconcile.Change{Updated: []string{"mlx5_0"}})
	waitFor("the coalesced write", func() bool { v, ok := drift(); return ok && v == 0 })
	if got := src.takeAsked(); !slices.Equal(got, []string{"mlx5_0", "mlx5_0"}) {
		t.Errorf("rendered %v: want the full pass once, then both partial passes in one write", got)
	}

	// Nothing happens: the heartbeat rewrites the file anyway.
	second := inode(t, path)
	if second == first {
		t.Fatal("no new file after the change")
	}
	waitFor("a heartbeat write", func() bool { return inode(t, path) != second })
	if got := src.takeAsked(); len(got) != 0 {
		t.Errorf("heartbeat rendered %v, want nothing", got)
	}
}

// After a first write, the owner of node_exporter's directory swaps it for
// a symlink to a directory of their choice holding a file of rdmad's name:
// rdmad must neither write there nor replace that file. And a foreign file
// put in place of rdmad's after its first write is left alone: the header
// check runs before every replace, not only the first.
func TestTextfileNeverFollowsASwappedDirectory(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "node-exporter")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "rdmad.prom")
	var logs bytes.Buffer
	tf := newTextfile(newFakeSource("mlx5_0"), &logs)
	tf.SetPath(path)
	tf.Changed(reconcile.Change{Full: true})
	tf.flush()
	ParseText(t, readFile(t, path))

	elsewhere := filepath.Join(base, "etc")
	if err := os.Mkdir(elsewhere, 0o755); err != nil {
		t.Fatal(err)
	}
	const victim = "root's own file\n"
	if err := os.WriteFile(filepath.Join(elsewhere, "rdmad.prom"), []byte(victim), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(dir, dir+".old"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, dir); err != nil {
		t.Fatal(err)
	}
	tf.Changed(reconcile.Change{Full: true})
	tf.flush()
	if got := string(readFile(t, filepath.Join(elsewhere, "rdmad.prom"))); got != victim {
		t.Errorf("rdmad wrote through the swapped-in symlink:\n%s", got)
	}
	if ents, _ := os.ReadDir(elsewhere); len(ents) != 1 {
		t.Errorf("files left in the symlink's target: %v", ents)
	}
	if !strings.Contains(logs.String(), "symlink") {
		t.Errorf("the refusal is not logged:\n%s", logs.String())
	}

	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(dir+".old", dir); err != nil {
		t.Fatal(err)
	}
	const foreign = "# HELP other_x x\n# TYPE other_x gauge\nother_x 1\n"
	if err := os.WriteFile(path, []byte(foreign), 0o644); err != nil {
		t.Fatal(err)
	}
	tf.Changed(reconcile.Change{Full: true})
	tf.flush()
	if got := string(readFile(t, path)); got != foreign {
		t.Errorf("a foreign file put in place of rdmad's was replaced:\n%s", got)
	}
}

// fakeClock is Textfile's clock in tests.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// Doctor runs off the pass: on the writer's goroutine at a write, after a
// full pass, and when its last run is FindingsInterval old; a pass over
// one device does not run it again. The clock is injected.
func TestTextfileFindingsOffThePass(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rdmad.prom")
	clock := &fakeClock{now: time.Unix(1700000000, 0)}
	runs := 0
	severity := doctor.SeverityWarn
	tf := New(Options{Source: newFakeSource("mlx5_0"), Log: slog.New(slog.NewTextHandler(io.Discard, nil)), MinInterval: -1, Now: clock.Now,
		Findings: func() []doctor.Finding {
			runs++
			return []doctor.Finding{{ID: "port-link-down", Subject: reconcile.PortSubject("mlx5_0", 1), Severity: severity}}
		}})
	tf.SetPath(path)
	tf.Changed(reconcile.Change{Full: true, Updated: []string{"mlx5_0"}})
	tf.flush()
	if runs != 1 {
		t.Fatalf("doctor ran %d times at the first write, want 1", runs)
	}
	fams := ParseText(t, readFile(t, path))
	mustValue(t, fams, 1, "rdmad_doctor_findings", "severity=warn")
	mustValue(t, fams, 1, "rdmad_doctor_finding", "id=port-link-down", "subject=mlx5_0/1", "severity=warn")
	if d := tf.nextWrite(); d != time.Minute {
		t.Errorf("next write in %v, want %v", d, time.Minute)
	}

	// A pass over one device, 30 s later: the file is rewritten, doctor
	// does not run; its last findings stay in the file.
	severity = doctor.SeverityFail
	clock.add(30 * time.Second)
	tf.Changed(reconcile.Change{Updated: []string{"mlx5_0"}})
	tf.flush()
	if runs != 1 {
		t.Errorf("doctor ran after a pass over one device (%d runs)", runs)
	}
	mustValue(t, ParseText(t, readFile(t, path)), 1, "rdmad_doctor_finding", "id=port-link-down", "subject=mlx5_0/1", "severity=warn")
	if d := tf.nextWrite(); d != 30*time.Second {
		t.Errorf("next write in %v, want 30s (when the findings are a minute old)", d)
	}

	// A minute after its last run (the heartbeat's write), it runs again.
	clock.add(30 * time.Second)
	tf.flush()
	if runs != 2 {
		t.Errorf("doctor ran %d times a minute later, want 2", runs)
	}
	fams = ParseText(t, readFile(t, path))
	mustValue(t, fams, 1, "rdmad_doctor_finding", "id=port-link-down", "subject=mlx5_0/1", "severity=fail")
	mustValue(t, fams, 0, "rdmad_doctor_findings", "severity=warn")

	// A full pass (a reload, a rescan) runs it at the next write.
	clock.add(time.Second)
	tf.Changed(reconcile.Change{Full: true})
	tf.flush()
	if runs != 3 {
		t.Errorf("doctor ran %d times after a full pass, want 3", runs)
	}

	// A device that goes, or comes, changes what [[expect]] finds
	// (rdmad_expect_missing): doctor runs at the next write.
	clock.add(time.Second)
	tf.Changed(reconcile.Change{Removed: []string{"mlx5_1"}})
	tf.flush()
	if runs != 4 {
		t.Errorf("doctor ran %d times after a device went, want 4", runs)
	}
	clock.add(time.Second)
	tf.Changed(reconcile.Change{Updated: []string{"mlx5_1"}, Added: []string{"mlx5_1"}})
	tf.flush()
	if runs != 5 {
		t.Errorf("doctor ran %d times after a device came, want 5", runs)
	}

	// Metrics off: doctor is not run for nothing.
	tf.SetPath("")
	clock.add(time.Hour)
	tf.flush()
	if runs != 5 {
		t.Errorf("doctor ran with metrics off (%d runs)", runs)
	}
}

// The textfile rdmad writes for the generated 1,024-device host (2,048
// RoCE ports, lossless RoCE declared on each, every netdev with DCB)
// passes promtool check metrics, has two QoS value series per RoCE port,
// and as many series in all as docs/metrics.md says.
func TestTextfile1024DevicesPromtool(t *testing.T) {
	if testing.Short() {
		t.Skip("a real pass over 1,024 devices")
	}
	r, names := synthHost(t, 1024, true)
	tf, path := benchTextfile(t, r, names)
	if !tf.flush() || tf.lastErr != "" {
		t.Fatalf("write: %s", tf.lastErr)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fams := ParseText(t, data)
	Promtool(t, data)
	series := 0
	for _, f := range fams {
		series += len(f.Metric)
	}
	for _, name := range []string{"rdmad_qos_pfc_mask", "rdmad_qos_trust_info"} {
		if n := len(fams[name].GetMetric()); n != 2048 {
			t.Errorf("%s: %d series, want one per RoCE port (2048)", name, n)
		}
	}
	mustValue(t, fams, 8, "rdmad_qos_pfc_mask", "device=mlx5_7", "port=2", "netdev="+hosttest.SynthNetdev(7), "policy=holds")
	mustValue(t, fams, 1, "rdmad_qos_trust_info", "device=mlx5_7", "port=2", "netdev="+hosttest.SynthNetdev(7), "trust=dscp", "policy=holds")
	doc, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("%d,%03d series", series/1000, series%1000)
	if !strings.Contains(string(doc), want) {
		t.Errorf("docs/metrics.md does not say that a 1,024-device host writes %s (%d bytes)", want, len(data))
	}
	t.Logf("1,024 devices: %d series, %d bytes", series, len(data))
}
