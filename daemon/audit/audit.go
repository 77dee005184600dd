// Package audit says who made a change: the caller of an accepted D-Bus
// call, identified from the bus's credentials and the kernel's view of
// its process (identify.go), or the signal that asked for it. The caller
// travels in the call's context to the log lines the change causes, so
// that every accepted mutating call is logged once at LevelNotice with its
// caller, method and arguments, and each "applied" line it causes names
// the same caller. Under systemd rdmad sends these lines to the journal
// with a field per key (JournalField), so `journalctl -u rdmad
// RDMAD_CALLER_UID=1000` answers who changed what.
//
// It decides nothing and imports nothing of rdmad but host's bounded
// readers: the bus identifies callers with it (accepted and refused ones),
// the service and the reconciler only carry and log what it gives.
package audit

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
)

// LevelNotice is syslog's notice (priority 5), between info and warning:
// what a change was asked for, and by whom.
const LevelNotice = slog.Level(2)

// NameLevel is a slog.HandlerOptions.ReplaceAttr that names LevelNotice
// "NOTICE" (slog would write INFO+2).
func NameLevel(groups []string, a slog.Attr) slog.Attr {
	if len(groups) == 0 && a.Key == slog.LevelKey && a.Value.Any() == LevelNotice {
		return slog.String(slog.LevelKey, "NOTICE")
	}
	return a
}

// The log keys of a caller and its call.
const (
	KeyCaller = "caller" // ":1.42", or "signal SIGHUP"
	KeyUID    = "uid"
	KeyUser   = "user"
	KeyPID    = "pid"
	KeyComm   = "comm"
	KeyUnit   = "unit"
	KeyMethod = "method"
	KeyArgs   = "args"
)

// journalFields are the journal's fields of the keys (JournalField).
var journalFields = map[string]string{
	KeyCaller: "RDMAD_CALLER",
	KeyUID:    "RDMAD_CALLER_UID",
	KeyUser:   "RDMAD_CALLER_USER",
	KeyPID:    "RDMAD_CALLER_PID",
	KeyComm:   "RDMAD_CALLER_COMM",
	KeyUnit:   "RDMAD_CALLER_UNIT",
	KeyMethod: "RDMAD_METHOD",
	KeyArgs:   "RDMAD_ARGS",
}

// JournalField is the journal field of a log key of this package
// (uid: RDMAD_CALLER_UID); false for any other key.
func JournalField(key string) (string, bool) {
	f, ok := journalFields[key]
	return f, ok
}

// Caller is who asked for a change. Empty fields are not known.
type Caller struct {
	// Name is the caller's unique bus name (":1.42"); "" for a signal.
	Name string
	// Signal is the signal that asked ("SIGHUP": systemctl reload).
	Signal string
	// UID is the caller's uid as the bus authenticated it, when HasUID.
	UID    uint32
	HasUID bool
	// User is the uid's name in the host's /etc/passwd ("" when it lists
	// none: rdmad does no NSS lookup).
	User string
	// PID is the caller's process as the bus names it (0: not given).
	PID uint32
	// Comm and Unit are the process's command (/proc/PID/comm) and
	// systemd unit (from /proc/PID/cgroup), read while the process was
	// pinned; "" when it could not be (gone, in another pid namespace).
	Comm string
	Unit string
}

// Signal is the caller of a change a signal asked for.
func Signal(name string) Caller { return Caller{Signal: name} }

// String is the caller as the caller= key shows it.
func (c Caller) String() string {
	if c.Signal != "" {
		return "signal " + c.Signal
	}
	return c.Name
}

// Attrs are the caller's log attributes: caller, then what is known of
// uid, user, pid, comm and unit.
func (c Caller) Attrs() []any {
	out := []any{KeyCaller, c.String()}
	if c.HasUID {
		out = append(out, KeyUID, c.UID)
	}
	if c.User != "" {
		out = append(out, KeyUser, c.User)
	}
	if c.PID != 0 {
		out = append(out, KeyPID, c.PID)
	}
	if c.Comm != "" {
		out = append(out, KeyComm, c.Comm)
	}
	if c.Unit != "" {
		out = append(out, KeyUnit, c.Unit)
	}
	return out
}

// Who is the caller in a few words, for a persisted entry's comment and
// rdmactl status: "root (uid 0), pid 4242 busctl, session-3.scope". What
// the host gave (the user name, the command) is as read: whoever writes
// or publishes it escapes it (the drop-in's comment keeps it on one line,
// Describe escapes it as D-Bus publishes host strings).
func (c Caller) Who() string {
	if c.Signal != "" {
		return "signal " + c.Signal
	}
	var b strings.Builder
	switch {
	case c.User != "" && c.HasUID:
		b.WriteString(c.User + " (uid " + strconv.FormatUint(uint64(c.UID), 10) + ")")
	case c.HasUID:
		b.WriteString("uid " + strconv.FormatUint(uint64(c.UID), 10))
	default:
		b.WriteString("bus name " + c.Name)
	}
	if c.PID != 0 {
		b.WriteString(", pid " + strconv.FormatUint(uint64(c.PID), 10))
		if c.Comm != "" {
			b.WriteString(" " + c.Comm)
		}
	}
	if c.Unit != "" {
		b.WriteString(", " + c.Unit)
	}
	return b.String()
}

type callerKey struct{}

// With returns ctx carrying c: the log lines of what the call causes name
// it.
func With(ctx context.Context, c Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// From is the caller ctx carries.
func From(ctx context.Context) (Caller, bool) {
	c, ok := ctx.Value(callerKey{}).(Caller)
	return c, ok
}

// Attrs are the log attributes of the caller ctx carries; nil when it
// carries none (a pass an event asked for).
func Attrs(ctx context.Context) []any {
	if c, ok := From(ctx); ok {
		return c.Attrs()
	}
	return nil
}
