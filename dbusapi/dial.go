package dbusapi

import (
	"fmt"
	"strings"

	"github.com/godbus/dbus/v5"
)

// Dial opens a private connection to "system", "session" or a bus address.
// Private, because the daemon and tests may hold several at once.
func Dial(bus string) (*dbus.Conn, error) {
	var conn *dbus.Conn
	var err error
	switch {
	case bus == "system":
		conn, err = dbus.SystemBusPrivate()
	case bus == "session":
		conn, err = dbus.SessionBusPrivate()
	case strings.Contains(bus, ":"):
		conn, err = dbus.Dial(bus)
	default:
		return nil, fmt.Errorf("dbusapi: bus %q: want system, session or an address like unix:path=/run/bus", bus)
	}
	if err != nil {
		return nil, fmt.Errorf("dbusapi: connect to %s bus: %w", bus, err)
	}
	if err := conn.Auth(nil); err != nil {
		conn.Close()
		return nil, fmt.Errorf("dbusapi: authenticate to %s bus: %w", bus, err)
	}
	if err := conn.Hello(); err != nil {
		conn.Close()
		return nil, fmt.Errorf("dbusapi: hello to %s bus: %w", bus, err)
	}
	return conn, nil
}
