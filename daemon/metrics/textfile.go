package metrics

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/doctor"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/reconcile"
)

// Source is the read side of the reconciler that the textfile renders.
type Source interface {
	Summary() reconcile.Summary
	DeviceStates(names []string) []reconcile.DeviceState
	// Settings are the settings the parts keep: a setting with a gauge
	// gets its family.
	Settings() []*reconcile.Setting
}

const (
	// DefaultMinInterval is the shortest time between two writes. Passes
	// closer together (a thousand devices arriving at boot) are written
	// together at the end of the interval: Prometheus scrapes every 15 s
	// or more, and the file's cost stays bounded whatever the event rate.
	DefaultMinInterval = time.Second
	// DefaultHeartbeat is how often the file is rewritten while nothing
	// happens, so that its heartbeat shows rdmad alive: an event-driven
	// daemon on a quiet host may not reconcile for days.
	DefaultHeartbeat = time.Minute
	// FindingsInterval is the longest time between two runs of doctor for
	// rdmad_doctor_findings: it also runs after every full pass, but what
	// it checks (files, other managers, limits) changes without one.
	FindingsInterval = time.Minute
)

// Options configures a Textfile.
type Options struct {
	Source Source
	// ConfigError returns the error of the last reload (nil: none); nil
	// means there never is one.
	ConfigError func() error
	// InForce says which policy is in force and whether the last save of
	// the last good configuration failed; nil: the files, saved.
	InForce func() config.InForce
	// Findings runs doctor (rdmad_doctor_findings, rdmad_doctor_finding);
	// nil leaves those families without samples. It runs on the writer's
	// goroutine, off the pass: after full passes, and at least every
	// FindingsInterval while a file is kept.
	Findings    func() []doctor.Finding
	Log         *slog.Logger
	MinInterval time.Duration    // 0: DefaultMinInterval; <0: none
	Heartbeat   time.Duration    // 0: DefaultHeartbeat
	Now         func() time.Time // the clock; nil: time.Now (tests inject one)
}

// Textfile keeps node_exporter textfile metrics at a path that can change
// with the configuration. Changed and SetPath only record what to do and
// never wait for the disk; Run does the writing on its own goroutine, so a
// slow file system never holds up a pass.
type Textfile struct {
	src         Source
	configErr   func() error
	inForce     func() config.InForce
	findingsFn  func() []doctor.Finding
	now         func() time.Time
	log         *slog.Logger
	minInterval time.Duration
	heartbeat   time.Duration
	wake        chan struct{}

	mu    sync.Mutex
	path  string              // where the file should be; "" none
	seen  bool                // a pass has ended: there is a state to write
	full  bool                // render every device again
	dirty map[string]struct{} // devices to render again
	// findingsDue: a full pass ended (or none has run doctor yet): run it
	// at the next write.
	findingsDue bool

	families []devFamily
	settings []*reconcile.Setting
	// refused counts the D-Bus calls refused (SetRefusedCalls); nil
	// before the bus is up.
	refused func() []CallCount

	// bus is rdmad_dbus_connected: busUnknown until BusConnected is
	// called (rdmad --bus none, tests), then busOff or busOn.
	bus atomic.Int32

	// Owned by Run's goroutine.
	written string // path holding rdmad's last file; "" none
	devices map[string]*deviceMetrics
	buf     bytes.Buffer
	lastErr string
	// findings is doctor's last run rendered; findingsAt when it ran.
	findings   []byte
	findingsAt time.Time
}

// New returns a Textfile that writes nothing until SetPath names a path
// and a pass has ended.
func New(o Options) *Textfile {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.ConfigError == nil {
		o.ConfigError = func() error { return nil }
	}
	if o.InForce == nil {
		o.InForce = func() config.InForce { return config.InForce{Origin: config.OriginFiles} }
	}
	if o.MinInterval == 0 {
		o.MinInterval = DefaultMinInterval
	}
	if o.Heartbeat <= 0 {
		o.Heartbeat = DefaultHeartbeat
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Textfile{
		src: o.Source, configErr: o.ConfigError, inForce: o.InForce, findingsFn: o.Findings, now: o.Now, log: o.Log,
		minInterval: max(o.MinInterval, 0), heartbeat: o.Heartbeat,
		wake: make(chan struct{}, 1), full: true, dirty: map[string]struct{}{}, findingsDue: true,
		families: devFamilies(o.Source.Settings()), settings: o.Source.Settings(),
	}
}

// SetPath makes path (absolute, under the host root already) the file to
// keep; "" stops writing and removes rdmad's file. It also asks for a
// write: the config error it shows may have changed.
func (t *Textfile) SetPath(path string) {
	t.mu.Lock()
	t.path = path
	t.mu.Unlock()
	t.signal()
}

// The states of rdmad_dbus_connected.
const (
	busUnknown int32 = iota
	busOff
	busOn
)

// BusConnected records whether rdmad is on D-Bus (rdmad_dbus_connected)
// and asks for a write. Until it is called the family has no sample: a
// daemon run with --bus none is not off the bus, it never joins one.
func (t *Textfile) BusConnected(on bool) {
	v := busOff
	if on {
		v = busOn
	}
	if t.bus.Swap(v) != v {
		t.signal()
	}
}

// Changed records what a pass changed; register it with
// reconcile.Reconciler.OnChange. Its cost is that of the change's names.
func (t *Textfile) Changed(ch reconcile.Change) {
	t.mu.Lock()
	t.seen = true
	switch {
	case ch.Full || t.path == "":
		// A full pass, or metrics off (no device is kept then): every
		// device is rendered at the next write.
		t.full = true
		clear(t.dirty)
		t.findingsDue = ch.Full || t.findingsDue
	case !t.full:
		for _, n := range ch.Updated {
			t.dirty[n] = struct{}{}
		}
		for _, n := range ch.Removed {
			t.dirty[n] = struct{}{}
		}
	}
	// A device that came or went changes what [[expect]] finds
	// (rdmad_expect_missing): doctor runs at the next write, not a
	// minute later.
	if len(ch.Added) > 0 || len(ch.Removed) > 0 {
		t.findingsDue = true
	}
	t.mu.Unlock()
	t.signal()
}

// CallCount is how many calls of a D-Bus method were refused for a reason
// since rdmad started: rdmad_refused_calls_total.
type CallCount struct {
	Method, Reason string
	Calls          uint64
}

// SetRefusedCalls has the file count the refused D-Bus calls fn lists
// (the bus, once it is up).
func (t *Textfile) SetRefusedCalls(fn func() []CallCount) {
	t.mu.Lock()
	t.refused = fn
	t.mu.Unlock()
	t.signal()
}

// CallRefused asks for a write: the counts of refused calls moved. Like
// every change it is written at most once per minimum interval.
func (t *Textfile) CallRefused() { t.signal() }

// FindingsChanged asks for doctor's findings to be run again at the next
// write: what they read changed without a pass (the error counters and
// link history of daemon/health).
func (t *Textfile) FindingsChanged() {
	t.mu.Lock()
	t.findingsDue = true
	t.mu.Unlock()
	t.signal()
}

func (t *Textfile) signal() {
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// Run writes the file until ctx ends: after changes, at most once per
// minimum interval, and every heartbeat interval while a path is set.
func (t *Textfile) Run(ctx context.Context) {
	timer := time.NewTimer(0)
	timer.Stop()
	defer timer.Stop()
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.wake:
		case <-timer.C:
		}
		if wait := time.Until(last.Add(t.minInterval)); wait > 0 {
			timer.Reset(wait)
			continue
		}
		if t.flush() {
			last = time.Now()
			timer.Reset(t.nextWrite())
		} else {
			timer.Stop()
		}
	}
}

// nextWrite is how long until the next unprompted write: the heartbeat,
// or sooner when doctor's findings are due before it.
func (t *Textfile) nextWrite() time.Duration {
	if t.findingsFn == nil || t.findingsAt.IsZero() {
		return t.heartbeat
	}
	return max(min(t.heartbeat, t.findingsAt.Add(FindingsInterval).Sub(t.now())), 0)
}

// updateFindings runs doctor when a full pass asked for it or the last
// run is FindingsInterval old.
func (t *Textfile) updateFindings(due bool) {
	if t.findingsFn == nil {
		return
	}
	now := t.now()
	if !due && !t.findingsAt.IsZero() && now.Sub(t.findingsAt) < FindingsInterval {
		return
	}
	t.findings = renderFindings(t.findingsFn())
	t.findingsAt = now
}

// flush brings the file up to date: it removes rdmad's file from a path no
// longer configured and writes the current one. It reports whether a file
// is being kept (and needs its heartbeat).
func (t *Textfile) flush() bool {
	t.mu.Lock()
	path, seen, full, findingsDue, refused := t.path, t.seen, t.full, t.findingsDue, t.refused
	var dirty []string
	if path != "" && seen {
		for n := range t.dirty {
			dirty = append(dirty, n)
		}
		clear(t.dirty)
		t.full = false
		t.findingsDue = false
	}
	t.mu.Unlock()

	if t.written != "" && t.written != path {
		if removed, err := removeOwn(t.written); err != nil {
			t.log.Error("metrics: cannot remove the textfile no longer configured", "err", err)
		} else if removed {
			t.log.Info("metrics: textfile no longer configured, removed", "path", t.written)
		}
		t.written = ""
	}
	if path == "" {
		t.devices = nil
		t.findings, t.findingsAt = nil, time.Time{}
		return false
	}
	if !seen {
		return false
	}
	sum := t.src.Summary()
	t.update(sum.Devices, full, dirty)
	t.updateFindings(findingsDue)
	var calls []CallCount
	if refused != nil {
		calls = refused()
	}
	if err := t.write(path, sum, calls); err != nil {
		if msg := err.Error(); msg != t.lastErr {
			t.log.Error("metrics: cannot write the textfile; retrying after the next pass or heartbeat", "err", err)
			t.lastErr = msg
		}
		return true
	}
	if t.lastErr != "" {
		t.log.Info("metrics: textfile written again", "path", path)
		t.lastErr = ""
	}
	return true
}

// update renders the devices a pass changed, or all of them.
func (t *Textfile) update(names []string, full bool, dirty []string) {
	if full || t.devices == nil {
		t.devices = make(map[string]*deviceMetrics, len(names))
		for _, ds := range t.src.DeviceStates(names) {
			t.devices[ds.Name] = buildDevice(&ds, t.families)
		}
		return
	}
	if len(dirty) == 0 {
		return
	}
	states := t.src.DeviceStates(dirty)
	known := make(map[string]bool, len(states))
	for i := range states {
		known[states[i].Name] = true
		t.devices[states[i].Name] = buildDevice(&states[i], t.families)
	}
	for _, n := range dirty {
		if !known[n] {
			delete(t.devices, n) // removed
		}
	}
}

// write renders the file and replaces path with it atomically: a temporary
// file in the same directory renamed over it, so node_exporter never reads
// half a file. A file there that rdmad did not write is left alone, checked
// before every replace through the directory's descriptor (host.WriteFile):
// the directory may be swapped for a symlink after the first write, which
// is refused, not followed.
func (t *Textfile) write(path string, sum reconcile.Summary, refused []CallCount) error {
	t.buf.Reset()
	render(&t.buf, &snapshot{
		sum:         sum,
		families:    t.families,
		settings:    t.settings,
		devices:     t.devices,
		configError: t.configErr() != nil,
		bus:         t.bus.Load(),
		inForce:     t.inForce(),
		now:         t.now(),
		findings:    t.findings,
		refused:     refused,
	})
	if _, err := host.WriteFile(path, t.buf.Bytes(), 0o644, textfileOptions); err != nil {
		switch {
		case errors.Is(err, host.ErrNotManaged):
			return fmt.Errorf("%w; choose another [metrics] textfile or remove it", err)
		case errors.Is(err, syscall.EROFS):
			return fmt.Errorf("write the metrics textfile %s: %w (rdmad.service runs with ProtectSystem=strict: allow the directory with ReadWritePaths=%s in a drop-in)",
				path, err, filepath.Dir(path))
		}
		return fmt.Errorf("write the metrics textfile %s: %w", path, err)
	}
	if t.written != path {
		t.log.Info("metrics: writing the textfile", "path", path)
		t.written = path
	}
	return nil
}

// textfileOptions: rdmad's mark at the start; the directory may be the
// exporter's (owned by the owner of its parent, node_exporter's home).
var textfileOptions = host.WriteOptions{Header: ownerMark, ParentOwner: true}

// removeOwn deletes path if rdmad wrote it.
func removeOwn(path string) (removed bool, err error) {
	removed, err = host.RemoveFile(path, textfileOptions)
	if err != nil {
		return false, fmt.Errorf("remove the metrics textfile %s: %w", path, err)
	}
	return removed, nil
}
