package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/rdmad/rdmad/daemon/service"
	"github.com/rdmad/rdmad/dbusapi"
)

// startBus publishes the service on D-Bus: "system", "session", "none" (no
// bus, for hosts without D-Bus) or a bus address such as unix:path=/run/x.
// The objects are exported before the name is taken, so a client activated
// by name never sees a half-built tree.
func startBus(ctx context.Context, svc *service.Service, bus string, log *slog.Logger) (stop func(), err error) {
	if bus == "none" {
		log.Info("not publishing on D-Bus (--bus none)")
		return func() {}, nil
	}
	conn, err := dbusapi.Dial(bus)
	if err != nil {
		return nil, fmt.Errorf("bus: %w", err)
	}
	srv, err := dbusapi.NewServer(conn, svc, &dbusapi.BusAuthorizer{Conn: conn}, log)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("bus: %w", err)
	}
	if err := srv.RequestName(dbusapi.BusName); err != nil {
		conn.Close()
		return nil, fmt.Errorf("bus: %w", err)
	}
	log.Info("serving on D-Bus", "bus", bus, "name", dbusapi.BusName)
	return func() {
		srv.Close()
		_, _ = conn.ReleaseName(dbusapi.BusName)
		conn.Close()
	}, nil
}
