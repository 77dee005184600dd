package bus

import "github.com/godbus/dbus/v5"

// A bus daemon that goes away (restarted, killed) takes rdmad's connection
// with it. The server outlives it: passes keep marking and the applier
// keeps the objects current, so once the bus is back Attach serves them on
// a new connection and RequestName takes the name again. Nothing of the
// server is rebuilt, and nothing registered on the service is added twice.

// Detach stops the signals of a lost connection: nobody follows rdmad's
// objects until the name is taken again on the next one. Every hold ends:
// its holder was on the lost connection's bus.
func (s *Server) Detach() {
	s.mu.Lock()
	s.named = false
	s.told = nil
	clear(s.unsent)
	s.unsentNews = nil
	s.mu.Unlock()
	s.dropLeases()
}

// Attach serves the objects on conn, a new connection to the bus after
// Detach. It does not take the name: call RequestName once it returns.
func (s *Server) Attach(conn *dbus.Conn) error {
	if err := s.export(conn); err != nil {
		return err
	}
	s.conn.Store(conn)
	return nil
}
