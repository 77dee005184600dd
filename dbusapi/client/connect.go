package client

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/godbus/dbus/v5"
)

// DefaultConnectTimeout bounds connecting to rdmad: dialling the bus (or
// starting ssh), authenticating, Hello and asking whether rdmad runs. A bus
// that does not get that far in D-Bus's default method timeout is stuck.
const DefaultConnectTimeout = 25 * time.Second

// maxAuthLine bounds a line of the authentication exchange. godbus reads
// those lines without a bound (and its Hello takes no context), so rdmactl
// opens the stream itself, bounds what it reads until Hello returns and
// closes it when the time is up.
const maxAuthLine = 16 << 10

// errAuthLine says the bus answered the authentication with a line longer
// than any the protocol has.
var errAuthLine = fmt.Errorf("the bus answered the authentication with a line over %d bytes", maxAuthLine)

// errConnectTimeout says the bus did not complete the connection in time.
var errConnectTimeout = errors.New("the connection was not complete in time")

// openBus authenticates on stream and says Hello, or gives up at deadline
// (closing the stream, which ends any read godbus waits in).
func openBus(stream io.ReadWriteCloser, methods []dbus.Auth, deadline time.Time) (*dbus.Conn, error) {
	g := &authGuard{ReadWriteCloser: stream}
	g.guarding.Store(true)
	var late atomic.Bool
	timer := time.AfterFunc(time.Until(deadline), func() {
		late.Store(true)
		g.Close()
	})
	conn, err := dbus.NewConn(g)
	if err == nil {
		if err = conn.Auth(methods); err == nil {
			err = conn.Hello()
		}
	}
	g.guarding.Store(false)
	if !timer.Stop() || late.Load() {
		err = errConnectTimeout
	}
	if err != nil {
		if conn != nil {
			conn.Close()
		} else {
			g.Close()
		}
		return nil, err
	}
	return conn, nil
}

// authGuard fails a read that makes a line longer than maxAuthLine while
// it guards: the authentication is lines of text, the Hello reply a small
// message.
type authGuard struct {
	io.ReadWriteCloser
	guarding atomic.Bool
	line     int // bytes since the last newline; read by one goroutine at a time
	once     sync.Once
	closeErr error
}

func (g *authGuard) Read(p []byte) (int, error) {
	n, err := g.ReadWriteCloser.Read(p)
	if g.guarding.Load() {
		for _, c := range p[:n] {
			if c == '\n' {
				g.line = 0
			} else if g.line++; g.line > maxAuthLine {
				return 0, errAuthLine
			}
		}
	}
	return n, err
}

// Close closes the stream once (the timer and godbus may both close it).
func (g *authGuard) Close() error {
	g.once.Do(func() { g.closeErr = g.ReadWriteCloser.Close() })
	return g.closeErr
}

// busAddress is the address of "system", "session" or an address given.
func busAddress(bus string) (string, error) {
	switch bus {
	case "system":
		if a := os.Getenv("DBUS_SYSTEM_BUS_ADDRESS"); a != "" {
			return a, nil
		}
		return "unix:path=" + systemBusSocket, nil
	case "session":
		a := os.Getenv("DBUS_SESSION_BUS_ADDRESS")
		if a == "" {
			// godbus would start dbus-launch to make one up.
			return "", &BusError{Bus: bus, Reason: "DBUS_SESSION_BUS_ADDRESS is not set"}
		}
		return a, nil
	}
	if !strings.Contains(bus, ":") {
		return "", &BusError{Bus: bus, Reason: "want system, session or an address like unix:path=/run/bus"}
	}
	return bus, nil
}

// dialAddress connects to the first entry of a D-Bus address (entries
// separated by ';') that answers: unix:path=, unix:abstract= or
// tcp:host=,port=, the transports a bus listens on.
func dialAddress(addr string, deadline time.Time) (net.Conn, error) {
	var errs []error
	d := net.Dialer{Deadline: deadline}
	for _, entry := range strings.Split(addr, ";") {
		transport, params, ok := strings.Cut(entry, ":")
		if !ok {
			errs = append(errs, fmt.Errorf("%q is not a bus address", entry))
			continue
		}
		kv := map[string]string{}
		for _, p := range strings.Split(params, ",") {
			k, v, _ := strings.Cut(p, "=")
			val, err := unescapeAddressValue(v)
			if err != nil {
				return nil, fmt.Errorf("bus address %q: %w", entry, err)
			}
			kv[k] = val
		}
		var network, target string
		switch {
		case transport == "unix" && kv["path"] != "":
			network, target = "unix", kv["path"]
		case transport == "unix" && kv["abstract"] != "":
			network, target = "unix", "@"+kv["abstract"]
		case transport == "tcp" && kv["host"] != "" && kv["port"] != "":
			network, target = "tcp", net.JoinHostPort(kv["host"], kv["port"])
		default:
			errs = append(errs, fmt.Errorf("rdmactl connects to unix:path=, unix:abstract= and tcp: bus addresses, not %q", entry))
			continue
		}
		c, err := d.Dial(network, target)
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

// unescapeAddressValue decodes the %XX escapes of a bus address value.
func unescapeAddressValue(v string) (string, error) {
	if !strings.Contains(v, "%") {
		return v, nil
	}
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		if v[i] != '%' {
			b.WriteByte(v[i])
			continue
		}
		if i+2 >= len(v) || !isHexDigit(v[i+1]) || !isHexDigit(v[i+2]) {
			return "", fmt.Errorf("bad escape in %q", v)
		}
		b.WriteByte(hexValue(v[i+1])<<4 | hexValue(v[i+2]))
		i += 2
	}
	return b.String(), nil
}

func isHexDigit(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func hexValue(c byte) byte {
	switch {
	case c >= 'a':
		return c - 'a' + 10
	case c >= 'A':
		return c - 'A' + 10
	}
	return c - '0'
}
