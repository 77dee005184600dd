package main

import (
	"context"
	"log/slog"

	"github.com/rdmad/rdmad/daemon/service"
)

// startBus publishes the service on D-Bus. Placeholder until the D-Bus
// object model lands: it only accepts --bus none.
func startBus(ctx context.Context, svc *service.Service, bus string, log *slog.Logger) (stop func(), err error) {
	log.Warn("D-Bus interface not built in yet", "bus", bus)
	return func() {}, nil
}
