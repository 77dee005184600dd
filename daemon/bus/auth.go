package bus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/godbus/dbus/v5"
)

// Authorizer decides whether the sender of a call may perform action.
type Authorizer interface {
	Authorize(ctx context.Context, sender, action string, interactive bool) error
}

var _ Authorizer = (*PolkitAuthorizer)(nil)

// ErrNotAuthorized is returned (wrapped) when the caller is refused.
var ErrNotAuthorized = errors.New("not authorized")

// PolkitAuthorizer is the production Authorizer, as systemd-hostnamed does it:
// uid 0 is allowed outright; anyone else is asked of polkit on the same bus.
// No polkit, or polkit answering an error, means no.
type PolkitAuthorizer struct {
	Conn *dbus.Conn
	// PolkitTimeout bounds a non-interactive CheckAuthorization; interactive
	// ones wait for the user up to InteractiveTimeout.
	PolkitTimeout      time.Duration
	InteractiveTimeout time.Duration
}

const (
	polkitName  = "org.freedesktop.PolicyKit1"
	polkitPath  = dbus.ObjectPath("/org/freedesktop/PolicyKit1/Authority")
	polkitIface = "org.freedesktop.PolicyKit1.Authority"

	polkitAllowUserInteraction = 1
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
func (a *PolkitAuthorizer) Authorize(ctx context.Context, sender, action string, interactive bool) error {
	if sender == "" {
		return fmt.Errorf("auth: %s: call without a sender: %w", action, ErrNotAuthorized)
	}
	var uid uint32
	if err := a.Conn.BusObject().CallWithContext(ctx, "org.freedesktop.DBus.GetConnectionUnixUser", 0, sender).Store(&uid); err != nil {
		return fmt.Errorf("auth: %s: cannot identify caller %s: %v: %w", action, sender, err, ErrNotAuthorized)
	}
	if uid == 0 {
		return nil
	}
	timeout := a.PolkitTimeout
	if timeout == 0 {
		timeout = 25 * time.Second
	}
	var flags uint32
	if interactive {
		flags |= polkitAllowUserInteraction
		timeout = a.InteractiveTimeout
		if timeout == 0 {
			timeout = 5 * time.Minute
		}
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	subject := PolkitSubject{Kind: "system-bus-name", Details: map[string]dbus.Variant{"name": dbus.MakeVariant(sender)}}
	var res PolkitResult
	call := a.Conn.Object(polkitName, polkitPath).CallWithContext(ctx, polkitIface+".CheckAuthorization", 0,
		subject, action, map[string]string{}, flags, "")
	if err := call.Store(&res); err != nil {
		return fmt.Errorf("auth: %s for uid %d: polkit did not answer (%v): %w", action, uid, err, ErrNotAuthorized)
	}
	if res.IsAuthorized {
		return nil
	}
	if res.IsChallenge {
		return fmt.Errorf("auth: %s for uid %d: authentication required (run as root, or with a polkit agent): %w", action, uid, ErrNotAuthorized)
	}
	return fmt.Errorf("auth: %s for uid %d: %w", action, uid, ErrNotAuthorized)
}
