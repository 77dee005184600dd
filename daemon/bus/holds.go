package bus

import (
	"context"
	"fmt"
	"sync"

	"github.com/godbus/dbus/v5"

	"github.com/rdmad/rdmad/daemon/audit"
	"github.com/rdmad/rdmad/daemon/reconcile"
	"github.com/rdmad/rdmad/daemon/service"
	"github.com/rdmad/rdmad/dbusapi"
)

// A hold (HoldCorrections) is a lease: it lasts while its caller is on
// the bus. The bus follows each holder's unique name (a match on
// NameOwnerChanged for that name alone) and ends its holds when the name
// goes, or when rdmad's own connection goes (every holder with it). The
// service keeps the holds; the bus only knows who holds.

// ActionHold is the polkit action of HoldCorrections: suspending rdmad's
// corrections is a change of what rdmad does to the host.
const ActionHold = "org.rdmad1.hold"

// leases follows the holders of one connection.
type leases struct {
	conn    *dbus.Conn
	watch   *senderWatch
	mu      sync.Mutex
	holders map[string]*lease // by unique name
}

// lease is a holder the bus follows.
type lease struct {
	text     string        // the holder's text in holds
	followed chan struct{} // closed once the bus follows the holder, or cannot
	err      error         // why it cannot, once followed is closed
}

// holder follows sender from its first hold on, and returns the text
// that names it in holds: text, the first time (a holder keeps one text
// for as long as it is on the bus). gone is called once sender leaves the
// bus. A holder is followed once, by one match rule: its first holds that
// arrive together wait for the first to follow it.
func (s *Server) holder(sender, text string, gone func(holder string)) (string, error) {
	conn := s.conn.Load()
	s.leaseMu.Lock()
	l := s.leases
	if l == nil || l.conn != conn {
		l = &leases{conn: conn, watch: newSenderWatch(conn), holders: map[string]*lease{}}
		s.leases = l
	}
	s.leaseMu.Unlock()

	l.mu.Lock()
	h, known := l.holders[sender]
	if !known {
		h = &lease{text: text, followed: make(chan struct{})}
		l.holders[sender] = h
	}
	l.mu.Unlock()
	if !known {
		_, err := l.watch.follow(sender, func() { l.leave(sender, gone) })
		l.mu.Lock()
		if h.err = err; err != nil && l.holders[sender] == h {
			delete(l.holders, sender)
		}
		l.mu.Unlock()
		close(h.followed)
	}
	<-h.followed
	if h.err != nil {
		return "", h.err
	}
	if !s.following(sender) {
		return "", fmt.Errorf("the caller %s left the bus", sender)
	}
	return h.text, nil
}

// following says whether the bus still follows sender as a holder on
// rdmad's current connection.
func (s *Server) following(sender string) bool {
	s.leaseMu.Lock()
	l := s.leases
	s.leaseMu.Unlock()
	if l == nil || l.conn != s.conn.Load() {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.holders[sender]
	return ok
}

// leave ends the holds of name, which left the bus.
func (l *leases) leave(name string, gone func(string)) {
	l.mu.Lock()
	h, ok := l.holders[name]
	delete(l.holders, name)
	l.mu.Unlock()
	if ok {
		gone(h.text)
	}
}

// dropLeases forgets every holder: rdmad's connection is gone, and every
// holder with it.
func (s *Server) dropLeases() {
	s.leaseMu.Lock()
	s.leases = nil
	s.leaseMu.Unlock()
	s.svc.ReleaseAllHolds()
	s.mark(reconcile.Change{})
}

// callerHolder is the holder text of a call's caller: its bus name, then
// who it is as the call's audit line names it (":1.42 (root (uid 0), pid
// 4242 rdmactl)"), kept from its first hold on.
func (m *manager) callerHolder(ctx context.Context, msg dbus.Message) (string, *dbus.Error) {
	sender, _ := msg.Headers[dbus.FieldSender].Value().(string)
	text := sender
	if c, ok := audit.From(ctx); ok {
		text = fmt.Sprintf("%s (%s)", sender, c.Who())
	}
	text, err := m.s.holder(sender, text, func(holder string) {
		m.s.svc.ReleaseHolder(holder)
		m.s.mark(reconcile.Change{})
	})
	if err != nil {
		return "", dbus.NewError(dbusapi.ErrFailed, []any{dbusapi.Escape(err.Error())})
	}
	return text, nil
}

// HoldCorrections starts the caller's hold on settings of a port.
func (m *manager) HoldCorrections(msg dbus.Message, device string, port uint32, settings []string) *dbus.Error {
	h := service.HoldRequest{Device: dbusapi.Unescape(device), Port: int(port), Settings: settings}
	ctx, e := m.admit(msg, "HoldCorrections", call{check: func() error {
		if err := portArg(port); err != nil {
			return err
		}
		return m.s.svc.CheckHoldCorrections(h)
	}})
	if e != nil {
		return e
	}
	holder, e := m.callerHolder(ctx, msg)
	if e != nil {
		return e
	}
	h.Holder = holder
	if err := m.s.svc.HoldCorrections(h); err != nil {
		return busError(err)
	}
	// The caller, or rdmad's connection, may have left between the
	// lease and the hold: its leave released nothing then, so the hold
	// would outlive its holder. Once the hold is in, a leave releases it.
	if sender, _ := msg.Headers[dbus.FieldSender].Value().(string); !m.s.following(sender) {
		m.s.svc.ReleaseHolder(holder)
		m.s.mark(reconcile.Change{})
		return dbus.NewError(dbusapi.ErrFailed, []any{dbusapi.Escape(fmt.Sprintf("the caller %s left the bus", sender))})
	}
	m.s.mark(reconcile.Change{})
	m.s.flushForReply()
	return nil
}

// ReleaseCorrections ends the caller's own hold on a port: it needs no
// authorization beyond being the caller that holds it.
func (m *manager) ReleaseCorrections(msg dbus.Message, device string, port uint32) *dbus.Error {
	if _, e := m.admit(msg, "ReleaseCorrections", call{check: func() error { return portArg(port) }}); e != nil {
		return e
	}
	sender, _ := msg.Headers[dbus.FieldSender].Value().(string)
	m.s.leaseMu.Lock()
	l := m.s.leases
	m.s.leaseMu.Unlock()
	holder := ""
	if l != nil {
		l.mu.Lock()
		if h, ok := l.holders[sender]; ok {
			holder = h.text
		}
		l.mu.Unlock()
	}
	if err := m.s.svc.ReleaseCorrections(holder, dbusapi.Unescape(device), int(port)); err != nil {
		return busError(err)
	}
	m.s.mark(reconcile.Change{})
	m.s.flushForReply()
	return nil
}
