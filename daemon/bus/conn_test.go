package bus

import (
	"bytes"
	"context"
	"encoding/binary"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/rdmad/rdmad/dbusapi"
)

// recordLog keeps the records logged through it.
type recordLog struct {
	mu      sync.Mutex
	records []slog.Record
}

func (l *recordLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *recordLog) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.records = append(l.records, r.Clone())
	return nil
}
func (l *recordLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *recordLog) WithGroup(string) slog.Handler      { return l }

// at lists the records of one level as "message why=...".
func (l *recordLog) at(level slog.Level) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, r := range l.records {
		if r.Level != level {
			continue
		}
		line := r.Message
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "why" {
				line += " why=" + a.Value.String()
			}
			return true
		})
		out = append(out, line)
	}
	return out
}

// socketPair is a connected pair of unix stream sockets.
func socketPair(t *testing.T) (*net.UnixConn, *net.UnixConn) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	var conns [2]*net.UnixConn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "socketpair")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = c.(*net.UnixConn)
		t.Cleanup(func() { c.Close() })
	}
	return conns[0], conns[1]
}

func otherOrder() binary.ByteOrder {
	if wireOrder.Uint16([]byte{1, 0}) == 1 {
		return binary.BigEndian
	}
	return binary.LittleEndian
}

// An announced GetManagedObjects reply the rewriter cannot fill goes out
// as godbus made it, and that is logged: once as a warning naming why,
// later ones at debug. From then on the rewriter is not used.
func TestRewriterLogsADeclinedReplyOnce(t *testing.T) {
	local, remote := socketPair(t)
	log := &recordLog{}
	rw := &replyRewriter{UnixConn: local, bodies: map[replyKey]pendingBody{}}
	rw.setLogger(slog.New(log))
	empty := map[dbus.ObjectPath]props{}

	// godbus writes the reply in the other byte order.
	rw.expect(":1.7", 42, sampleManagedBody())
	msg := encodeReply(t, otherOrder(), ":1.7", 42, empty)
	if n, err := rw.Write(msg); err != nil || n != len(msg) {
		t.Fatalf("Write = %d, %v", n, err)
	}
	got := make([]byte, len(msg))
	if err := remote.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := remote.Read(got); err != nil || !bytes.Equal(got, msg) {
		t.Errorf("the declined reply went out as %q (%v), want it unchanged", got, err)
	}
	warns := log.at(slog.LevelWarn)
	if len(warns) != 1 || !strings.Contains(warns[0], "GetManagedObjects reply was not rewritten") || !strings.Contains(warns[0], "byte order") {
		t.Errorf("warnings %q", warns)
	}
	if rw.usable() || rw.pending() != 0 {
		t.Errorf("after a decline: usable %v, %d bodies pending", rw.usable(), rw.pending())
	}

	// godbus writes the header and the body apart; an empty array of
	// another signature: each declined again, without another warning.
	rw.expect(":1.7", 43, sampleManagedBody())
	whole := encodeReply(t, wireOrder, ":1.7", 43, empty)
	h, err := parseHeader(whole)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := rw.rewrite(whole[:h.bodyStart]); ok {
		t.Error("rewrote a header without its body")
	}
	rw.expect(":1.7", 44, sampleManagedBody())
	if _, ok := rw.rewrite(encodeReply(t, wireOrder, ":1.7", 44, map[string]int{})); ok {
		t.Error("rewrote an empty array of another signature")
	}
	if warns := log.at(slog.LevelWarn); len(warns) != 1 {
		t.Errorf("%d warnings, want the first decline only: %q", len(warns), warns)
	}
	if debug := log.at(slog.LevelDebug); len(debug) != 2 || !strings.Contains(debug[0], "short message") || !strings.Contains(debug[1], "signature") {
		t.Errorf("debug records %q, want both later declines with their reasons", debug)
	}
}

// An announced body whose reply never came through (the rewriter did not
// recognise it at all) is declined when it expires.
func TestRewriterDeclinesAnExpiredBody(t *testing.T) {
	log := &recordLog{}
	rw := &replyRewriter{bodies: map[replyKey]pendingBody{}}
	rw.setLogger(slog.New(log))
	rw.bodies[replyKey{":1.7", 42}] = pendingBody{sampleManagedBody(), time.Now().Add(-2 * pendingTTL)}
	rw.expect(":1.7", 43, sampleManagedBody())
	if warns := log.at(slog.LevelWarn); len(warns) != 1 || !strings.Contains(warns[0], "no reply") {
		t.Errorf("warnings %q", warns)
	}
	if rw.usable() || rw.pending() != 1 {
		t.Errorf("usable %v, %d pending", rw.usable(), rw.pending())
	}
}

// Once the rewriter declined, GetManagedObjects is encoded by godbus (the
// whole answer, nothing announced); before, it announces its body. A call
// that expects no reply announces nothing.
func TestGetManagedObjectsFallsBackAfterADecline(t *testing.T) {
	rw := &replyRewriter{bodies: map[replyKey]pendingBody{}}
	rw.setLogger(slog.New(&recordLog{}))
	s := &Server{conn: &Conn{rewriter: rw}, log: slog.New(&recordLog{}), objects: map[dbus.ObjectPath]*object{}}
	port := sampleObjects()[dbusapi.PortPath("mlx5_0", 1)]
	var model dbusapi.Port
	if err := dbusapi.FromProps(port[dbusapi.PortIface], &model); err != nil {
		t.Fatal(err)
	}
	o := &object{iface: dbusapi.PortIface, model: model}
	s.objects["/a"] = o
	s.encode("/a", o)
	call := func(flags dbus.Flags) dbus.Message {
		return dbus.Message{Flags: flags, Headers: map[dbus.HeaderField]dbus.Variant{dbus.FieldSender: dbus.MakeVariant(":1.7")}}
	}
	if out, _ := s.getManagedObjects(call(dbus.FlagNoReplyExpected)); len(out) != 0 || rw.pending() != 0 {
		t.Errorf("a call without reply: %d objects, %d bodies announced", len(out), rw.pending())
	}
	if out, _ := s.getManagedObjects(call(0)); len(out) != 0 || rw.pending() != 1 {
		t.Errorf("before a decline: %d objects by godbus, %d bodies announced; want 0 and 1", len(out), rw.pending())
	}
	rw.decline(replyKey{":1.7", 1}, "test")
	out, _ := s.getManagedObjects(call(0))
	if len(out) != 1 || out["/a"][dbusapi.PortIface]["Device"].Value() != "mlx5_0" {
		t.Errorf("after a decline: godbus answers %v, want the object", out)
	}
	if rw.pending() != 1 {
		t.Errorf("after a decline, %d bodies announced", rw.pending())
	}
}
