package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/godbus/dbus/v5"

	"github.com/rdmad/rdmad/daemon/bus"
	"github.com/rdmad/rdmad/daemon/service"
	"github.com/rdmad/rdmad/dbusapi"
)

// startBus exports the service's objects on D-Bus: "system", "session",
// "none" (no bus, for hosts without D-Bus) or a bus address such as
// unix:path=/run/x. The well-known name is taken only when publish is called,
// after the first pass, so a client activated by name never sees an empty or
// half-built tree.
func startBus(ctx context.Context, svc *service.Service, busArg string, log *slog.Logger) (publish func() error, stop func(), err error) {
	if busArg == "none" {
		log.Info("not publishing on D-Bus (--bus none)")
		return func() error { return nil }, func() {}, nil
	}
	conn, err := dial(ctx, busArg)
	if err != nil {
		return nil, nil, fmt.Errorf("bus: %w", err)
	}
	srv, err := bus.New(conn, svc.Reconciler(), svc, &bus.PolkitAuthorizer{Conn: conn}, log)
	if err != nil {
		conn.Close()
		return nil, nil, fmt.Errorf("bus: %w", err)
	}
	publish = func() error {
		if err := srv.RequestName(dbusapi.BusName); err != nil {
			return fmt.Errorf("bus: %w", err)
		}
		log.Info("serving on D-Bus", "bus", busArg, "name", dbusapi.BusName)
		return nil
	}
	stop = func() {
		srv.Close()
		_, _ = conn.ReleaseName(dbusapi.BusName)
		conn.Close()
	}
	return publish, stop, nil
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
		return nil, ctx.Err()
	}
}
