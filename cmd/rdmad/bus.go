package main

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/rdmad/rdmad/daemon/bus"
	"github.com/rdmad/rdmad/daemon/compose"
	"github.com/rdmad/rdmad/daemon/service"
	"github.com/rdmad/rdmad/dbusapi"
)

// Reconnecting to a lost bus waits reconnectMin after the loss, doubling
// after each failed attempt up to reconnectMax: a bus restarted at once is
// back within a second or two, one that stays down costs an attempt every
// half minute.
const (
	reconnectMin = time.Second
	reconnectMax = 30 * time.Second
)

// busLink is rdmad's presence on D-Bus. The bus daemon may go away
// (restarted, killed); rdmad does not: passes go on, the loss is logged at
// error priority and shown in STATUS=, and the link reconnects with
// back-off, serves the same objects on the new connection and takes the
// name again. Exiting instead would be worse: with the unit's start limit,
// a bus down for a few seconds would leave rdmad failed and the host
// unmanaged.
type busLink struct {
	arg     string
	log     *slog.Logger
	srv     *bus.Server
	auth    *currentAuthorizer
	changed func() // the bus was lost or is back (STATUS=)

	mu       sync.Mutex
	conn     *dbus.Conn
	stopping bool
	lost     atomic.Bool
	done     chan struct{}
}

// startBus exports the service's objects on D-Bus: "system", "session",
// "none" (no bus, for hosts without D-Bus: nil link) or a bus address such
// as unix:path=/run/x. The well-known name is taken only by Publish,
// after the first pass, so a client activated by name never sees an empty
// or half-built tree.
func startBus(ctx context.Context, svc *service.Service, busArg string, log *slog.Logger) (*busLink, error) {
	if busArg == "none" {
		log.Info("not publishing on D-Bus (--bus none)")
		return nil, nil
	}
	conn, err := dial(ctx, busArg)
	if err != nil {
		return nil, err // it names the bus and the step
	}
	auth := &currentAuthorizer{}
	auth.set(conn)
	srv, err := compose.Bus(conn, svc, auth, log)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("serve the objects on %s: %w", dbusapi.DescribeBus(busArg), err)
	}
	return &busLink{arg: busArg, log: log, srv: srv, auth: auth, conn: conn, changed: func() {}, done: make(chan struct{})}, nil
}

// Publish takes the name, then follows the connection: a lost one is
// reconnected until ctx ends or Stop.
func (b *busLink) Publish(ctx context.Context) error {
	if b == nil {
		return nil
	}
	if err := b.srv.RequestName(dbusapi.BusName); err != nil {
		return fmt.Errorf("publish on %s: %w", dbusapi.DescribeBus(b.arg), err)
	}
	b.log.Info("serving on D-Bus", "bus", b.arg, "name", dbusapi.BusName)
	go b.follow(ctx)
	return nil
}

// Lost says whether the bus connection is lost and not yet back.
func (b *busLink) Lost() bool { return b != nil && b.lost.Load() }

// Stop releases the name and closes the connection; no reconnect follows.
func (b *busLink) Stop() {
	if b == nil {
		return
	}
	b.mu.Lock()
	b.stopping = true
	conn := b.conn
	b.mu.Unlock()
	close(b.done)
	b.srv.Close()
	_, _ = conn.ReleaseName(dbusapi.BusName)
	conn.Close()
}

// follow waits for the connection to end and, unless rdmad is stopping,
// reconnects.
func (b *busLink) follow(ctx context.Context) {
	for {
		b.mu.Lock()
		conn := b.conn
		b.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-b.done:
			return
		case <-conn.Context().Done():
		}
		b.mu.Lock()
		stopping := b.stopping
		b.mu.Unlock()
		if stopping || ctx.Err() != nil {
			return
		}
		b.log.Error("lost the D-Bus connection: rdmad keeps applying its policy and reconnects; rdmactl and Cockpit cannot reach it meanwhile", "bus", b.arg)
		b.srv.Detach()
		b.lost.Store(true)
		b.changed()
		if !b.reconnect(ctx) {
			return
		}
		b.lost.Store(false)
		b.changed()
	}
}

// reconnect dials the bus again with back-off until it serves the objects
// and owns the name on a new connection (true), or rdmad stops (false).
func (b *busLink) reconnect(ctx context.Context) bool {
	wait := reconnectMin
	for attempt := 1; ; attempt++ {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-b.done:
			t.Stop()
			return false
		case <-t.C:
		}
		err := b.attach(ctx)
		if err == nil {
			b.log.Info("the D-Bus connection is back: serving again", "bus", b.arg, "name", dbusapi.BusName, "attempts", attempt)
			return true
		}
		b.log.Debug("could not reconnect to D-Bus yet", "bus", b.arg, "err", err, "next_in", min(2*wait, reconnectMax))
		wait = min(2*wait, reconnectMax)
	}
}

// attach dials a new connection, serves the objects on it and takes the
// name.
func (b *busLink) attach(ctx context.Context) error {
	conn, err := dial(ctx, b.arg)
	if err != nil {
		return err
	}
	b.mu.Lock()
	if b.stopping {
		b.mu.Unlock()
		conn.Close()
		return context.Canceled
	}
	b.conn = conn
	b.mu.Unlock()
	b.auth.set(conn)
	if err := b.srv.Attach(conn); err != nil {
		conn.Close()
		return err
	}
	if err := b.srv.RequestName(dbusapi.BusName); err != nil {
		conn.Close()
		return err
	}
	return nil
}

// currentAuthorizer asks polkit over the connection in use: the method
// handlers keep one Authorizer while the connection under it changes.
type currentAuthorizer struct {
	p atomic.Pointer[bus.PolkitAuthorizer]
}

func (a *currentAuthorizer) set(conn *dbus.Conn) { a.p.Store(&bus.PolkitAuthorizer{Conn: conn}) }

func (a *currentAuthorizer) Authorize(ctx context.Context, sender string, actions []string, interactive bool) error {
	return a.p.Load().Authorize(ctx, sender, actions, interactive)
}

// dial connects to the bus, or gives up when ctx ends: at boot the bus
// socket may accept long before dbus-daemon answers, and a SIGTERM
// meanwhile must still stop rdmad.
func dial(ctx context.Context, busArg string) (*dbus.Conn, error) {
	type result struct {
		conn *dbus.Conn
		err  error
	}
	done := make(chan result, 1)
	go func() {
		c, err := dbusapi.Dial(busArg)
		done <- result{c, err}
	}()
	select {
	case r := <-done:
		return r.conn, r.err
	case <-ctx.Done():
		go func() { // the connection may still come: close it
			if r := <-done; r.conn != nil {
				r.conn.Close()
			}
		}()
		return nil, fmt.Errorf("connect to %s: %w", dbusapi.DescribeBus(busArg), ctx.Err())
	}
}
