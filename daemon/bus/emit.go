package bus

import (
	"errors"
	"slices"
	"strings"

	"github.com/godbus/dbus/v5"

	"github.com/rdmad/rdmad/dbusapi"
)

// The emitter: the signals that describe the difference between the
// object store and what the signals said last, sent outside every lock.

// signal is one signal to emit.
type signal struct {
	path dbus.ObjectPath
	name string
	args []any
}

func (s *Server) runEmitter() {
	for {
		select {
		case <-s.stop:
			return
		case <-s.emitWake:
		}
		conn := s.conn.Load()
		for _, sig := range s.signals() {
			select {
			case <-s.stop:
				return
			default:
			}
			if err := conn.Emit(sig.path, sig.name, sig.args...); err != nil {
				if errors.Is(err, dbus.ErrClosed) {
					// The bus is gone: Detach stops the signals until
					// Attach serves a new connection, whose first
					// signals start from the objects then served.
					break
				}
				s.log.Warn("cannot emit signal", "path", sig.path, "signal", sig.name, "err", err)
			}
		}
	}
}

// signals says, for every object that may differ from what the signals
// said last, what differs: InterfacesRemoved (children first), then
// InterfacesAdded (parents first) and PropertiesChanged; then the news
// that came with the state (news.go). It holds the
// server's lock only to take the objects, and emits nothing itself: the
// emitter sends them afterwards, so a stopped bus blocks no reader and no
// pass.
func (s *Server) signals() []signal {
	type pending struct {
		p        dbus.ObjectPath
		was, now *object
	}
	var todo []pending
	s.mu.Lock()
	if !s.named || s.closed {
		s.mu.Unlock()
		return nil
	}
	for p := range s.unsent {
		was, now := s.told[p], s.objects[p]
		todo = append(todo, pending{p, was, now})
		if now == nil {
			delete(s.told, p)
		} else {
			s.told[p] = now
		}
	}
	clear(s.unsent)
	news := s.unsentNews
	s.unsentNews = nil
	s.mu.Unlock()
	// An object's path sorts right before its children's: '/' sorts
	// below every character of an escaped name.
	slices.SortFunc(todo, func(a, b pending) int { return strings.Compare(string(a.p), string(b.p)) })
	var removed, rest []signal
	for _, x := range todo {
		switch {
		case x.was == x.now:
		case x.now == nil:
			removed = append(removed, signal{dbusapi.RootPath, objMgrIface + ".InterfacesRemoved", []any{x.p, []string{x.was.iface}}})
		case x.was == nil && x.p != dbusapi.RootPath:
			rest = append(rest, signal{dbusapi.RootPath, objMgrIface + ".InterfacesAdded", []any{x.p, x.now.entry()}})
		case x.was != nil:
			if changed := changedProps(x.was.props(), x.now.props()); len(changed) > 0 {
				rest = append(rest, signal{x.p, propsIface + ".PropertiesChanged", []any{x.now.iface, changed, []string{}}})
			}
		}
	}
	slices.Reverse(removed)
	return append(append(removed, rest...), news...)
}
