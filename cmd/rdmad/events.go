package main

import (
	"context"
	"log/slog"

	"github.com/rdmad/rdmad/daemon/service"
)

// startEvents feeds kernel and config events into the service until ctx
// ends. Placeholder until the live-events work lands.
func startEvents(ctx context.Context, svc *service.Service, log *slog.Logger) error {
	<-ctx.Done()
	return nil
}
