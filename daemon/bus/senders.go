package bus

import (
	"context"
	"fmt"
	"sync"

	"github.com/godbus/dbus/v5"
)

// senderWatch tells its followers when a caller leaves the bus: a match on
// NameOwnerChanged for each followed unique name (so the bus sends only
// those), and one signal channel on the connection. The authorizer follows
// a caller while its polkit checks are outstanding, the holds a holder
// while it is on the bus.
type senderWatch struct {
	conn    *dbus.Conn
	mu      sync.Mutex
	waiting map[string]map[*follower]struct{} // unique name -> its followers
}

// follower is one follow of a caller: left is called once it leaves.
type follower struct{ left func() }

func newSenderWatch(conn *dbus.Conn) *senderWatch {
	w := &senderWatch{conn: conn, waiting: map[string]map[*follower]struct{}{}}
	ch := make(chan *dbus.Signal, 16)
	conn.Signal(ch)
	go w.run(ch)
	return w
}

func nameOwnerMatch(sender string) []dbus.MatchOption {
	return []dbus.MatchOption{
		dbus.WithMatchSender("org.freedesktop.DBus"),
		dbus.WithMatchInterface("org.freedesktop.DBus"),
		dbus.WithMatchMember("NameOwnerChanged"),
		dbus.WithMatchArg(0, sender),
	}
}

// follow calls left once sender leaves the bus, at once when it is gone
// already, unless the returned stop was called first. Each follow adds its
// own match rule, removed by stop or by the leave: the bus counts them, so
// concurrent follows of one sender need no bookkeeping here. It fails
// when the bus refuses the match; stop then does nothing.
func (w *senderWatch) follow(sender string, left func()) (stop func(), _ error) {
	if err := w.conn.AddMatchSignal(nameOwnerMatch(sender)...); err != nil {
		return func() {}, fmt.Errorf("follow the caller %s on the bus: %w", sender, err)
	}
	f := &follower{left: left}
	w.mu.Lock()
	if w.waiting[sender] == nil {
		w.waiting[sender] = map[*follower]struct{}{}
	}
	w.waiting[sender][f] = struct{}{}
	w.mu.Unlock()
	// It may have left before the match was in place.
	var has bool
	ctx, cancel := context.WithTimeout(context.Background(), identifyTimeout)
	defer cancel()
	if err := w.conn.BusObject().CallWithContext(ctx, "org.freedesktop.DBus.NameHasOwner", 0, sender).Store(&has); err == nil && !has && w.drop(sender, f) {
		left()
		_ = w.conn.RemoveMatchSignal(nameOwnerMatch(sender)...)
	}
	return func() {
		if w.drop(sender, f) {
			_ = w.conn.RemoveMatchSignal(nameOwnerMatch(sender)...)
		}
	}, nil
}

// drop forgets f, and says whether it was still followed: whoever drops
// it removes its match rule.
func (w *senderWatch) drop(sender string, f *follower) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.waiting[sender][f]; !ok {
		return false
	}
	delete(w.waiting[sender], f)
	if len(w.waiting[sender]) == 0 {
		delete(w.waiting, sender)
	}
	return true
}

func (w *senderWatch) run(ch <-chan *dbus.Signal) {
	for sig := range ch {
		if sig.Name != "org.freedesktop.DBus.NameOwnerChanged" || len(sig.Body) != 3 {
			continue
		}
		name, _ := sig.Body[0].(string)
		if newOwner, _ := sig.Body[2].(string); newOwner != "" {
			continue
		}
		// A unique name never comes back: its followers are done.
		w.mu.Lock()
		fs := w.waiting[name]
		delete(w.waiting, name)
		w.mu.Unlock()
		for f := range fs {
			f.left()
		}
		for range fs {
			_ = w.conn.RemoveMatchSignal(nameOwnerMatch(name)...)
		}
	}
}
