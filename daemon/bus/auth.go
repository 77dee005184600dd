package bus

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/godbus/dbus/v5"
)

// Authorizer decides whether the sender of a call may perform every one of
// actions, in order.
type Authorizer interface {
	Authorize(ctx context.Context, sender string, actions []string, interactive bool) error
}

var _ Authorizer = (*PolkitAuthorizer)(nil)

var (
	// ErrNotAuthorized is the kind of a refusal: AccessDenied.
	ErrNotAuthorized = errors.New("not authorized")
	// ErrBusy is the kind of a check a local limit stopped (too many
	// outstanding, no answer in time): org.rdmad1.Error.Busy, never a
	// denial.
	ErrBusy = errors.New("busy")
)

// authError is a refusal whose text says why; errors.Is finds its kind
// (ErrNotAuthorized or ErrBusy) without the kind's word in the text.
type authError struct {
	kind error
	msg  string
}

func (e *authError) Error() string { return e.msg }
func (e *authError) Unwrap() error { return e.kind }

func denied(format string, args ...any) error {
	return &authError{ErrNotAuthorized, fmt.Sprintf(format, args...)}
}

func busyError(format string, args ...any) error {
	return &authError{ErrBusy, fmt.Sprintf(format, args...)}
}

// Bounds of the outstanding polkit checks. polkitd leaves an interactive
// check pending while the user's agent shows its prompt, and a bus daemon
// limits the replies a connection may wait for (dbus-daemon: 128 by
// default); without a bound, one user's pending checks would take every
// one of rdmad's and refuse everybody else. A user can open many
// connections, so the bound is per uid.
const (
	DefaultChecksPerUser      = 2
	DefaultChecks             = 32
	DefaultPolkitTimeout      = 25 * time.Second // a non-interactive check, D-Bus's default call timeout
	DefaultInteractiveTimeout = 60 * time.Second // a user answering polkit's prompt
)

// PolkitAuthorizer is the production Authorizer, as systemd-hostnamed does
// it: uid 0 is allowed outright; anyone else is asked of polkit on the same
// bus, one check per action. No polkit, or polkit answering an error or a
// challenge, means no.
//
// Each check carries a cancellation id unique to this rdmad, and is
// cancelled (CancelCheckAuthorization) when it times out or its caller
// leaves the bus, so polkit's agent stops asking.
type PolkitAuthorizer struct {
	Conn *dbus.Conn
	// PolkitTimeout bounds a non-interactive CheckAuthorization (0:
	// DefaultPolkitTimeout); InteractiveTimeout an interactive one (0:
	// DefaultInteractiveTimeout).
	PolkitTimeout      time.Duration
	InteractiveTimeout time.Duration
	// ChecksPerUser and Checks bound the outstanding checks per uid and in
	// all (0: DefaultChecksPerUser, DefaultChecks).
	ChecksPerUser, Checks int

	mu      sync.Mutex
	perUser map[uint32]int
	total   int

	nextID  atomic.Uint64
	watchMu sync.Mutex
	watch   *senderWatch
}

const (
	polkitName  = "org.freedesktop.PolicyKit1"
	polkitPath  = dbus.ObjectPath("/org/freedesktop/PolicyKit1/Authority")
	polkitIface = "org.freedesktop.PolicyKit1.Authority"

	polkitAllowUserInteraction = 1

	errLimitsExceeded = "org.freedesktop.DBus.Error.LimitsExceeded"
)

// PolkitSubject is polkit's (sa{sv}) subject.
type PolkitSubject struct {
	Kind    string
	Details map[string]dbus.Variant
}

// PolkitResult is polkit's (bba{ss}) authorization result.
type PolkitResult struct {
	IsAuthorized bool
	IsChallenge  bool
	Details      map[string]string
}

// Authorize implements Authorizer.
func (a *PolkitAuthorizer) Authorize(ctx context.Context, sender string, actions []string, interactive bool) error {
	if sender == "" {
		return denied("%v: a call without a sender", actions)
	}
	var uid uint32
	if err := a.Conn.BusObject().CallWithContext(ctx, "org.freedesktop.DBus.GetConnectionUnixUser", 0, sender).Store(&uid); err != nil {
		return denied("cannot identify caller %s: %v", sender, err)
	}
	if uid == 0 {
		return nil
	}
	release, err := a.take(uid)
	if err != nil {
		return err
	}
	defer release()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	unwatch, _ := a.watcher().follow(sender, cancel) // one the bus cannot follow is checked until the timeout
	defer unwatch()
	for _, action := range actions {
		if action == "" {
			return denied("no polkit action for this call")
		}
		if err := a.check(ctx, sender, uid, action, interactive); err != nil {
			return err
		}
	}
	return nil
}

// take counts one outstanding check of uid, or refuses it when uid, or
// everybody, has as many as the bounds allow.
func (a *PolkitAuthorizer) take(uid uint32) (release func(), _ error) {
	perUser, total := a.ChecksPerUser, a.Checks
	if perUser <= 0 {
		perUser = DefaultChecksPerUser
	}
	if total <= 0 {
		total = DefaultChecks
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.perUser == nil {
		a.perUser = map[uint32]int{}
	}
	switch {
	case a.perUser[uid] >= perUser:
		return nil, busyError("uid %d already has %d authorization checks waiting for polkit (at most %d a user); try again once they are answered", uid, a.perUser[uid], perUser)
	case a.total >= total:
		return nil, busyError("%d authorization checks are waiting for polkit (at most %d); try again later", a.total, total)
	}
	a.perUser[uid]++
	a.total++
	return func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.perUser[uid]--; a.perUser[uid] <= 0 {
			delete(a.perUser, uid)
		}
		a.total--
	}, nil
}

// check asks polkit for one action and cancels the check when ctx ends
// (the caller left) or the timeout passes first.
func (a *PolkitAuthorizer) check(ctx context.Context, sender string, uid uint32, action string, interactive bool) error {
	timeout := cmpOr(a.PolkitTimeout, DefaultPolkitTimeout)
	var flags uint32
	if interactive {
		flags |= polkitAllowUserInteraction
		timeout = cmpOr(a.InteractiveTimeout, DefaultInteractiveTimeout)
	}
	id := fmt.Sprintf("rdmad-%d-%d", os.Getpid(), a.nextID.Add(1))
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	subject := PolkitSubject{Kind: "system-bus-name", Details: map[string]dbus.Variant{"name": dbus.MakeVariant(sender)}}
	var res PolkitResult
	call := a.Conn.Object(polkitName, polkitPath).CallWithContext(cctx, polkitIface+".CheckAuthorization", 0,
		subject, action, map[string]string{}, flags, id)
	err := call.Store(&res)
	var de dbus.Error
	switch {
	case err == nil:
	case ctx.Err() != nil:
		go a.cancelCheck(id)
		return denied("%s for uid %d: the caller left the bus before polkit answered", action, uid)
	case cctx.Err() != nil:
		go a.cancelCheck(id)
		what := "polkit did not answer"
		if interactive {
			what = "nobody answered polkit's authentication prompt"
		}
		return busyError("%s for uid %d: %s within %s; try again", action, uid, what, timeout)
	case errors.As(err, &de) && de.Name == errLimitsExceeded:
		return busyError("%s for uid %d: the bus refused to pass on another authorization check (%v); try again later", action, uid, err)
	default:
		return denied("%s for uid %d: polkit did not answer (%v)", action, uid, err)
	}
	if res.IsAuthorized {
		return nil
	}
	if res.IsChallenge {
		return denied("%s for uid %d: authentication required (run as root, or with a polkit agent)", action, uid)
	}
	return denied("polkit refused %s to uid %d", action, uid)
}

// cancelCheck has polkit drop the check of id (its agent stops asking).
func (a *PolkitAuthorizer) cancelCheck(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), DefaultPolkitTimeout)
	defer cancel()
	_ = a.Conn.Object(polkitName, polkitPath).CallWithContext(ctx, polkitIface+".CancelCheckAuthorization", 0, id).Err
}

func cmpOr(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

func (a *PolkitAuthorizer) watcher() *senderWatch {
	a.watchMu.Lock()
	defer a.watchMu.Unlock()
	if a.watch == nil {
		a.watch = newSenderWatch(a.Conn)
	}
	return a.watch
}
