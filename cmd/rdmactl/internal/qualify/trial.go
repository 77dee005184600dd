package qualify

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"reflect"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdmad/rdmad/daemon/dcb"
	"github.com/rdmad/rdmad/daemon/fixturekernel"
	"github.com/rdmad/rdmad/daemon/host"
)

// trial is one setting of a port as qualify tries it.
type trial interface {
	name() string
	title() string
	run(ctx context.Context, r *portRun) Result
}

// noNotice is a setting no notification is known to announce.
const noNotice EventKind = 255

// trialOf tries a setting whose value is a V.
type trialOf[V any] struct {
	setting, heading string
	// notice is the event that announces a change (EventInotify,
	// EventDCB, EventPause) or noNotice; dir the directory of an
	// EventInotify.
	notice EventKind
	dir    string
	// read reads the value now; an error wrapping errNotOffered says the
	// port has no such setting.
	read func() (V, error)
	// alt is a different legal value.
	alt func(V) V
	// write sets a value; restore puts the value found back (nil: write).
	write   func(V) error
	restore func(V) error
	// same compares two values as the setting holds them (nil: equal).
	same func(a, b V) bool
	text func(V) string // nil: fmt.Sprint
	// files are the files (relative to the host root) the setting is
	// kept in: on a fixture, whose files are plain files, qualify puts
	// back their bytes.
	files []string
}

func (t trialOf[V]) name() string  { return t.setting }
func (t trialOf[V]) title() string { return t.heading }

// errNotOffered is a setting the port does not have.
var errNotOffered = errors.New("not offered")

type notOffered struct{ why string }

func (e notOffered) Error() string { return e.why }
func (notOffered) Unwrap() error   { return errNotOffered }

func (t trialOf[V]) show(v V) string {
	if t.text != nil {
		return t.text(v)
	}
	return fmt.Sprint(v)
}

func (t trialOf[V]) equal(a, b V) bool {
	if t.same != nil {
		return t.same(a, b)
	}
	return reflect.DeepEqual(a, b)
}

func noticeName(k EventKind) string {
	switch k {
	case EventInotify:
		return "inotify"
	case EventDCB:
		return "dcb"
	case EventPause:
		return "ethtool"
	}
	return "none"
}

// run reads, writes another value, reads it back, waits for the
// notification and a carrier drop, puts the value back and checks it.
func (t trialOf[V]) run(ctx context.Context, r *portRun) Result {
	res := Result{Setting: t.setting, Title: t.heading, Notice: noticeName(t.notice)}
	orig, err := t.read()
	if err != nil {
		res.Result, res.Detail = readFailure(err)
		res.Restored = true // nothing was changed
		return res
	}
	next := t.alt(orig)
	res.Was, res.Tried = t.show(orig), t.show(next)
	raw := map[string][]byte{}
	if r.k.Fixture {
		for _, f := range t.files {
			if b, err := host.ReadAttr(r.k.Host.Path(f)); err == nil {
				raw[f] = b
			}
		}
	}
	put := func() error {
		if len(raw) > 0 {
			for _, f := range t.files {
				if b, ok := raw[f]; ok {
					if err := host.WriteAttr(r.k.Host.Path(f), b); err != nil {
						return err
					}
				}
			}
			return nil
		}
		if t.restore != nil {
			return t.restore(orig)
		}
		return t.write(orig)
	}
	check := func() error {
		if err := put(); err != nil {
			return fmt.Errorf("%s: put back %s: %w", t.setting, t.show(orig), err)
		}
		back, err := t.read()
		if err != nil {
			return fmt.Errorf("%s: read back after putting back %s: %w", t.setting, t.show(orig), err)
		}
		if !t.equal(back, orig) {
			return fmt.Errorf("%s: put back %s, the kernel kept %s", t.setting, t.show(orig), t.show(back))
		}
		return nil
	}
	r.undo = append(r.undo, check)

	start := time.Now()
	werr := t.write(next)
	res.WriteMS = msSince(start)
	switch {
	case werr != nil:
		res.Result, res.Errno, res.Detail = Refused, errnoName(werr), werr.Error()
	default:
		back, err := t.read()
		switch {
		case err != nil:
			res.Result, res.Detail = Unreadable, "read back: "+err.Error()
		case !t.equal(back, next):
			res.ReadBack = t.show(back)
			res.Result, res.Detail = Ignored, fmt.Sprintf("wrote %s, the kernel kept %s", res.Tried, res.ReadBack)
		default:
			res.ReadBack = t.show(back)
		}
	}
	// The notification and the carrier: what came within the wait.
	deadline := start.Add(r.o.Wait)
	if t.notice != noNotice {
		if e, ok := r.events.waitFor(ctx, start, deadline, t.announces); ok {
			res.Notified, res.NotificationMS = true, max(0, ms64(e.At.Sub(start)))
		}
	}
	r.events.waitFor(ctx, start, deadline, func(Event) bool { return false }) // the rest of the wait: a late drop
	if down, ok := firstOf(r.events.since(start), EventCarrierDown); ok {
		res.LinkToggled = true
		if up, ok := r.events.waitFor(ctx, down.At, time.Now().Add(carrierWait), isKind(EventCarrierUp)); ok {
			res.LinkDownMS = ms64(up.At.Sub(down.At))
		} else {
			res.Detail = join(res.Detail, fmt.Sprintf("the carrier did not come back within %s", carrierWait))
		}
	}
	if res.Result == "" {
		switch {
		case res.LinkToggled:
			res.Result = InterruptsTraffic
		case t.notice == noNotice || !res.Notified:
			res.Result = NoNotification
		default:
			res.Result = Works
		}
	}

	// Put it back, even when ctx ended, and let its own notification and
	// carrier drop pass before the next setting.
	r.undo = r.undo[:len(r.undo)-1]
	back := time.Now()
	if err := check(); err != nil {
		res.RestoreError = err.Error()
		r.broken = true
		return res
	}
	res.Restored = true
	if ctx.Err() == nil {
		settle := back.Add(r.o.Wait)
		if t.notice != noNotice {
			r.events.waitFor(ctx, back, settle, t.announces)
		}
		if _, ok := firstOf(r.events.since(back), EventCarrierDown); ok || res.LinkToggled {
			r.events.waitFor(ctx, back, time.Now().Add(carrierWait), isKind(EventCarrierUp))
		}
	}
	return res
}

// announces says whether e is this setting's notification.
func (t trialOf[V]) announces(e Event) bool {
	return e.Kind == t.notice && (e.Kind != EventInotify || e.Dir == t.dir)
}

func isKind(k EventKind) func(Event) bool { return func(e Event) bool { return e.Kind == k } }

func firstOf(evs []Event, k EventKind) (Event, bool) {
	for _, e := range evs {
		if e.Kind == k {
			return e, true
		}
	}
	return Event{}, false
}

func msSince(t time.Time) float64 { return ms64(time.Since(t)) }

func ms64(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func join(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// readFailure is the result of a setting that does not read.
func readFailure(err error) (result, detail string) {
	switch {
	case errors.Is(err, errNotOffered), errors.Is(err, syscall.EOPNOTSUPP), errors.Is(err, syscall.ENOTSUP),
		errors.Is(err, fs.ErrNotExist), errors.Is(err, fixturekernel.ErrNotListed):
		return NotOffered, err.Error()
	}
	return Unreadable, err.Error()
}

// errnoName is the errno a write failed with ("EINVAL"), as the driver
// returned it (a DCB set's status byte, a DCBX status), or "".
func errnoName(err error) string {
	var st *dcb.StatusError
	if errors.As(err, &st) && st.Status < 0 {
		return unix.ErrnoName(syscall.Errno(-int(st.Status)))
	}
	var dx *dcb.DCBXRefusedError
	if errors.As(err, &dx) {
		return fmt.Sprintf("status %d", dx.Status)
	}
	var e syscall.Errno
	if errors.As(err, &e) {
		return unix.ErrnoName(e)
	}
	return ""
}
