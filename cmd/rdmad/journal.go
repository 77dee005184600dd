package main

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"sync"
)

// priorityHandler is slog's text handler with each line prefixed by its
// syslog priority as sd-daemon(3) defines it ("<3>" ... "<7>"), which
// journald reads off a stream (SyslogLevelPrefix=, on by default) and
// strips. One record is one line: the text handler quotes newlines.
type priorityHandler struct {
	inner slog.Handler
	w     *priorityWriter
}

// priorityWriter is shared by a handler and those derived from it
// (WithAttrs, WithGroup): the prefix is set and the line written under
// its lock.
type priorityWriter struct {
	mu     sync.Mutex
	prefix []byte
	out    io.Writer
	line   []byte
}

// Write is called by the text handler, once per record, from Handle,
// which holds mu.
func (w *priorityWriter) Write(p []byte) (int, error) {
	w.line = append(append(w.line[:0], w.prefix...), p...)
	if _, err := w.out.Write(w.line); err != nil {
		return 0, err
	}
	return len(p), nil
}

func newPriorityHandler(out io.Writer, opts *slog.HandlerOptions) *priorityHandler {
	w := &priorityWriter{out: out}
	return &priorityHandler{inner: slog.NewTextHandler(w, opts), w: w}
}

// priority is the syslog priority of a slog level: error 3, warning 4,
// info 6, debug 7 (and the nearest one for levels in between).
func priority(l slog.Level) int {
	switch {
	case l >= slog.LevelError:
		return 3
	case l >= slog.LevelWarn:
		return 4
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
	h.w.prefix = append(strconv.AppendInt(append(h.w.prefix[:0], '<'), int64(priority(r.Level)), 10), '>')
	return h.inner.Handle(ctx, r)
}

func (h *priorityHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &priorityHandler{inner: h.inner.WithAttrs(as), w: h.w}
}

func (h *priorityHandler) WithGroup(name string) slog.Handler {
	return &priorityHandler{inner: h.inner.WithGroup(name), w: h.w}
}
