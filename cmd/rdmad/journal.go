package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rdmad/rdmad/daemon/audit"
)

// priorityHandler is slog's text handler with each line prefixed by its
// syslog priority as sd-daemon(3) defines it ("<3>" ... "<7>"), which
// journald reads off a stream (SyslogLevelPrefix=, on by default) and
// strips. One record is one line: the text handler quotes newlines.
//
// A record that names a caller (audit.KeyCaller: an accepted call, the
// lines of what it caused) goes to the journal's native socket instead,
// with a field per audit key (RDMAD_CALLER_UID=...), so the journal can be
// asked who changed what; its MESSAGE is the same line. When that socket
// does not take it, the line goes on the stream as every other.
type priorityHandler struct {
	inner slog.Handler
	w     *priorityWriter
}

// priorityWriter is shared by a handler and those derived from it
// (WithAttrs, WithGroup): the prefix is set and the line written under
// its lock.
type priorityWriter struct {
	mu       sync.Mutex
	prefix   []byte
	priority int
	out      io.Writer
	line     []byte
	native   *nativeJournal // nil: every line on the stream
	fields   [][2]string    // the record's journal fields; nil: not an audit record
}

// Write is called by the text handler, once per record, from Handle,
// which holds mu.
func (w *priorityWriter) Write(p []byte) (int, error) {
	if w.fields != nil && w.native != nil {
		if w.native.send(w.priority, strings.TrimSuffix(string(p), "\n"), w.fields) == nil {
			return len(p), nil
		}
	}
	w.line = append(append(w.line[:0], w.prefix...), p...)
	if _, err := w.out.Write(w.line); err != nil {
		return 0, err
	}
	return len(p), nil
}

// newPriorityHandler writes to out; with journal, the path of journald's
// native socket, the records that name a caller go there.
func newPriorityHandler(out io.Writer, opts *slog.HandlerOptions, journal string) *priorityHandler {
	w := &priorityWriter{out: out}
	if journal != "" {
		w.native = &nativeJournal{addr: &net.UnixAddr{Name: journal, Net: "unixgram"}}
	}
	return &priorityHandler{inner: slog.NewTextHandler(w, opts), w: w}
}

// priority is the syslog priority of a slog level: error 3, warning 4,
// notice 5 (audit.LevelNotice), info 6, debug 7 (and the nearest one for
// levels in between).
func priority(l slog.Level) int {
	switch {
	case l >= slog.LevelError:
		return 3
	case l >= slog.LevelWarn:
		return 4
	case l >= audit.LevelNotice:
		return 5
	case l >= slog.LevelInfo:
		return 6
	}
	return 7
}

func (h *priorityHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.inner.Enabled(ctx, l)
}

func (h *priorityHandler) Handle(ctx context.Context, r slog.Record) error {
	h.w.mu.Lock()
	defer h.w.mu.Unlock()
	h.w.priority = priority(r.Level)
	h.w.prefix = append(strconv.AppendInt(append(h.w.prefix[:0], '<'), int64(h.w.priority), 10), '>')
	h.w.fields = nil
	if h.w.native != nil {
		h.w.fields = journalFields(r)
	}
	return h.inner.Handle(ctx, r)
}

// journalFields are the journal fields of a record that names a caller;
// nil for any other.
func journalFields(r slog.Record) [][2]string {
	var out [][2]string
	caller := false
	r.Attrs(func(a slog.Attr) bool {
		if f, ok := audit.JournalField(a.Key); ok {
			out = append(out, [2]string{f, a.Value.Resolve().String()})
			caller = caller || a.Key == audit.KeyCaller
		}
		return true
	})
	if !caller {
		return nil
	}
	return out
}

func (h *priorityHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &priorityHandler{inner: h.inner.WithAttrs(as), w: h.w}
}

func (h *priorityHandler) WithGroup(name string) slog.Handler {
	return &priorityHandler{inner: h.inner.WithGroup(name), w: h.w}
}

// journalSocket is journald's socket for its native protocol, under the
// host root like every path of the host's.
const journalSocket = "run/systemd/journal/socket"

// nativeJournalTimeout bounds one datagram to journald: a journal that
// does not take it within this gets the line on the stream instead.
const nativeJournalTimeout = time.Second

// nativeJournal sends entries to journald's native socket
// (https://systemd.io/JOURNAL_NATIVE_PROTOCOL/): one datagram an entry,
// a field a line, KEY=value, or KEY, a newline, the value's length as a
// little-endian 64-bit integer and the value for a value that holds a
// newline. go-systemd's journal.Send does the same, but always to
// /run/systemd/journal/socket: rdmad's host paths are under --root. Its
// callers hold the priorityWriter's lock.
type nativeJournal struct {
	addr *net.UnixAddr
	conn *net.UnixConn
	buf  bytes.Buffer
}

func (j *nativeJournal) send(priority int, message string, fields [][2]string) error {
	j.buf.Reset()
	appendJournalField(&j.buf, "PRIORITY", strconv.Itoa(priority))
	appendJournalField(&j.buf, "SYSLOG_IDENTIFIER", "rdmad")
	appendJournalField(&j.buf, "MESSAGE", message)
	for _, f := range fields {
		appendJournalField(&j.buf, f[0], f[1])
	}
	if j.conn == nil {
		c, err := net.DialUnix("unixgram", nil, j.addr)
		if err != nil {
			return err
		}
		j.conn = c
	}
	_ = j.conn.SetWriteDeadline(time.Now().Add(nativeJournalTimeout))
	if _, err := j.conn.Write(j.buf.Bytes()); err != nil {
		// journald restarted, or a message too long for a datagram:
		// dial again next time; this line goes on the stream.
		j.conn.Close()
		j.conn = nil
		return err
	}
	return nil
}

func appendJournalField(b *bytes.Buffer, key, value string) {
	b.WriteString(key)
	if !strings.Contains(value, "\n") {
		b.WriteByte('=')
		b.WriteString(value)
		b.WriteByte('\n')
		return
	}
	b.WriteByte('\n')
	_ = binary.Write(b, binary.LittleEndian, uint64(len(value)))
	b.WriteString(value)
	b.WriteByte('\n')
}
