package dbusapi

import (
	"fmt"
	"strings"

	"github.com/godbus/dbus/v5"
)

// Dial opens a private connection to "system", "session" or a bus address.
// Private, because the daemon and tests may hold several at once.
func Dial(bus string) (*dbus.Conn, error) {
	where := DescribeBus(bus)
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
		return nil, fmt.Errorf("bus %q: want system, session or an address like unix:path=/run/bus", bus)
	}
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", where, err)
	}
	if err := conn.Auth(nil); err != nil {
		conn.Close()
		return nil, fmt.Errorf("authenticate to %s: %w", where, err)
	}
	if err := conn.Hello(); err != nil {
		conn.Close()
		return nil, fmt.Errorf("say Hello to %s: %w", where, err)
	}
	return conn, nil
}

// DescribeBus names a bus as --bus gives it, for a sentence: "the system
// bus", "the session bus" or "the bus at unix:path=/run/x".
func DescribeBus(bus string) string {
	switch bus {
	case "system", "session":
		return "the " + bus + " bus"
	}
	return "the bus at " + bus
}
