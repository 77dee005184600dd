package bus

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/rdmad/rdmad/dbusapi"
)

// Conn is the daemon's bus connection.
type Conn struct {
	*dbus.Conn
	rewriter *replyRewriter // nil: godbus encodes every reply
}

// Wrap uses a connection made elsewhere; its replies are all encoded by
// godbus.
func Wrap(c *dbus.Conn) *Conn { return &Conn{Conn: c} }

// Dial connects the daemon to "system", "session" or a bus address. On a
// unix socket the connection goes through a replyRewriter, so
// GetManagedObjects replies carry their pre-encoded body; on any other
// transport rdmad works the same with godbus encoding every reply.
func Dial(bus string) (*Conn, error) {
	sock, ok := unixSocket(bus)
	if !ok {
		conn, err := dbusapi.Dial(bus)
		if err != nil {
			return nil, err
		}
		return Wrap(conn), nil
	}
	raw, err := net.DialUnix("unix", nil, sock)
	if err != nil {
		return nil, fmt.Errorf("bus: connect to %s bus: %w", bus, err)
	}
	rw := &replyRewriter{UnixConn: raw, bodies: map[replyKey]pendingBody{}}
	conn, err := dbus.NewConn(rw)
	if err != nil {
		raw.Close()
		return nil, fmt.Errorf("bus: connect to %s bus: %w", bus, err)
	}
	if err := conn.Auth([]dbus.Auth{dbus.AuthExternal(fmt.Sprint(os.Getuid()))}); err != nil {
		conn.Close()
		return nil, fmt.Errorf("bus: authenticate to %s bus: %w", bus, err)
	}
	if err := conn.Hello(); err != nil {
		conn.Close()
		return nil, fmt.Errorf("bus: hello to %s bus: %w", bus, err)
	}
	return &Conn{Conn: conn, rewriter: rw}, nil
}

// unixSocket finds the unix socket of a bus: the system bus's well-known
// path or $DBUS_SYSTEM_BUS_ADDRESS, $DBUS_SESSION_BUS_ADDRESS, or the first
// unix:path= / unix:abstract= of an address.
func unixSocket(bus string) (*net.UnixAddr, bool) {
	addr := bus
	switch bus {
	case "system":
		addr = os.Getenv("DBUS_SYSTEM_BUS_ADDRESS")
		if addr == "" {
			addr = "unix:path=/run/dbus/system_bus_socket"
		}
	case "session":
		addr = os.Getenv("DBUS_SESSION_BUS_ADDRESS")
	}
	for _, a := range strings.Split(addr, ";") {
		kind, params, ok := strings.Cut(a, ":")
		if !ok || kind != "unix" {
			continue
		}
		for _, kv := range strings.Split(params, ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "path":
				return &net.UnixAddr{Name: v, Net: "unix"}, v != ""
			case "abstract":
				return &net.UnixAddr{Name: "@" + v, Net: "unix"}, v != ""
			}
		}
	}
	return nil, false
}

type replyKey struct {
	dest   string
	serial uint32
}

type pendingBody struct {
	body []byte
	at   time.Time
}

// replyRewriter is the daemon connection's transport. It passes every
// message through, except the reply to a call the GetManagedObjects
// handler announced with expect: godbus sends that reply with an empty
// array of the same signature, and the rewriter puts the pre-encoded body
// in its place. godbus writes each message with one Write.
//
// Should that stop being so (a godbus that writes a message in pieces,
// in another byte order, or with another header), an announced reply goes
// out as godbus made it: an empty answer. The rewriter then declines: it
// logs it once, as a warning, and the server lets godbus encode every
// GetManagedObjects reply from then on (usable).
type replyRewriter struct {
	*net.UnixConn

	mu     sync.Mutex
	bodies map[replyKey]pendingBody

	declined atomic.Bool
	log      atomic.Pointer[slog.Logger] // nil: slog.Default()
}

// pendingTTL bounds how long an announced body waits for its reply. The
// handler announces none for a call that expects no reply, so a body that
// waits this long is a reply the rewriter did not recognise.
const pendingTTL = time.Minute

// setLogger makes the rewriter log through log.
func (r *replyRewriter) setLogger(log *slog.Logger) { r.log.Store(log) }

// usable reports whether GetManagedObjects may announce its replies: false
// once an announced reply went out without its body.
func (r *replyRewriter) usable() bool { return !r.declined.Load() }

// expect announces the body of the reply to call serial from dest.
func (r *replyRewriter) expect(dest string, serial uint32, body []byte) {
	r.mu.Lock()
	now := time.Now()
	var expired []replyKey
	for k, p := range r.bodies {
		if now.Sub(p.at) > pendingTTL {
			delete(r.bodies, k)
			expired = append(expired, k)
		}
	}
	r.bodies[replyKey{dest, serial}] = pendingBody{body, now}
	r.mu.Unlock()
	for _, k := range expired {
		r.decline(k, fmt.Sprintf("no reply to the call was seen within %s", pendingTTL))
	}
}

// decline records that the announced reply to key went out without its
// body, and stops the announcing (usable). The first one is a warning: a
// client got an empty GetManagedObjects.
func (r *replyRewriter) decline(key replyKey, why string) {
	log := r.log.Load()
	if log == nil {
		log = slog.Default()
	}
	level := slog.LevelDebug
	if !r.declined.Swap(true) {
		level = slog.LevelWarn
	}
	log.Log(context.Background(), level, "GetManagedObjects reply was not rewritten: the caller got an empty answer; godbus encodes these replies from now on",
		"caller", key.dest, "serial", key.serial, "why", why)
}

// pending reports how many announced bodies wait (tests).
func (r *replyRewriter) pending() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.bodies)
}

func (r *replyRewriter) Write(p []byte) (int, error) {
	r.mu.Lock()
	waiting := len(r.bodies) > 0
	r.mu.Unlock()
	if waiting {
		if out, ok := r.rewrite(p); ok {
			if _, err := r.UnixConn.Write(out); err != nil {
				return 0, err
			}
			return len(p), nil
		}
	}
	return r.UnixConn.Write(p)
}

// rewrite returns p with its body replaced when p is the method return
// announced by expect. An announced reply it cannot fill is declined.
func (r *replyRewriter) rewrite(p []byte) ([]byte, bool) {
	h, err := parseHeader(p)
	// The header fields name the call even when the rest of p is not what
	// the rewriter can fill.
	if h.msgType != 2 || h.replySerial == 0 {
		return nil, false
	}
	key := replyKey{h.destination, h.replySerial}
	r.mu.Lock()
	pb, ok := r.bodies[key]
	delete(r.bodies, key)
	r.mu.Unlock()
	if !ok {
		return nil, false
	}
	// The pre-encoded body is in wireOrder: only a message in that order
	// (godbus sends in the native one) can take it, in place of the empty
	// array the handler returned.
	var why string
	switch {
	case err != nil:
		why = err.Error()
	case h.signature != managedObjectsSig:
		why = fmt.Sprintf("reply signature %q", h.signature)
	case h.bodyLen != emptyArrayLen:
		why = fmt.Sprintf("reply body of %d bytes", h.bodyLen)
	case h.order.Uint32([]byte{1, 0, 0, 0}) != wireOrder.Uint32([]byte{1, 0, 0, 0}):
		why = "reply in the other byte order"
	}
	if why != "" {
		r.decline(key, why)
		return nil, false
	}
	out := make([]byte, 0, h.bodyStart+len(pb.body))
	out = append(out, p[:h.bodyStart]...)
	h.order.PutUint32(out[4:8], uint32(len(pb.body)))
	return append(out, pb.body...), true
}

// managedObjectsSig is the signature of GetManagedObjects' reply.
const managedObjectsSig = "a{oa{sa{sv}}}"

// emptyArrayLen is the body of an empty a{...}: its length and the
// padding to its 8-aligned elements.
const emptyArrayLen = 8

type header struct {
	order       binary.ByteOrder
	msgType     byte
	bodyLen     int
	bodyStart   int
	replySerial uint32
	destination string
	signature   string
}

var errShort = errors.New("bus: short message")

// parseHeader reads what the rewriter needs of a message header.
func parseHeader(p []byte) (header, error) {
	var h header
	if len(p) < 16 {
		return h, errShort
	}
	switch p[0] {
	case 'l':
		h.order = binary.LittleEndian
	case 'B':
		h.order = binary.BigEndian
	default:
		return h, errors.New("bus: not a message")
	}
	h.msgType = p[1]
	h.bodyLen = int(h.order.Uint32(p[4:8]))
	fieldsLen := int(h.order.Uint32(p[12:16]))
	end := 16 + fieldsLen
	if end > len(p) {
		return h, errShort
	}
	for i := 16; i < end; {
		i = (i + 7) &^ 7
		if i+2 > end {
			break
		}
		code := p[i]
		sl := int(p[i+1])
		if i+2+sl+1 > end {
			return h, errShort
		}
		sig := string(p[i+2 : i+2+sl])
		i += 2 + sl + 1
		switch sig {
		case "u":
			i = (i + 3) &^ 3
			if i+4 > end {
				return h, errShort
			}
			if code == 5 { // REPLY_SERIAL
				h.replySerial = h.order.Uint32(p[i:])
			}
			i += 4
		case "s", "o":
			i = (i + 3) &^ 3
			if i+4 > end {
				return h, errShort
			}
			n := int(h.order.Uint32(p[i:]))
			if i+4+n+1 > end {
				return h, errShort
			}
			if code == 6 { // DESTINATION
				h.destination = string(p[i+4 : i+4+n])
			}
			i += 4 + n + 1
		case "g":
			if i+1 > end || i+1+int(p[i])+1 > end {
				return h, errShort
			}
			if code == 8 { // SIGNATURE
				h.signature = string(p[i+1 : i+1+int(p[i])])
			}
			i += 1 + int(p[i]) + 1
		default:
			return h, fmt.Errorf("bus: header field %d of type %q", code, sig)
		}
	}
	h.bodyStart = (end + 7) &^ 7
	if h.bodyStart+h.bodyLen != len(p) {
		return h, errShort
	}
	return h, nil
}
