package compose

import (
	"context"
	"log/slog"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/doctor"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/reconcile"
	"github.com/rdmad/rdmad/daemon/service"
)

// DiagnoseInput is what doctor gets from the daemon for the metrics
// textfile: the same input as the bus's Diagnose.
func DiagnoseInput(s *service.Service) doctor.Input {
	return doctor.RunningInput(s, s.Reconciler().Snapshot, s.Reconciler().Checkers())
}

// Diagnose runs doctor on the daemon's view of the host: the findings of
// the metrics textfile.
func Diagnose(s *service.Service) []doctor.Finding {
	return doctor.Diagnose(context.Background(), DiagnoseInput(s))
}

// HostInput is doctor's input for a host rdmad does not run on (a tool, a
// test): what the parts built on k read of it under pol, with nothing
// written (reconcile.Reconciler.Observe), and their checks.
func HostInput(ctx context.Context, h *host.Host, pol *config.Policy, k Kernel) doctor.Input {
	p := Parts(k)(h, true, func() {})
	r := reconcile.New(reconcile.Options{Host: h, Log: slog.New(slog.DiscardHandler), Early: p.Early, HostParts: p.Host, DeviceParts: p.Device, Detail: host.DetailFull})
	st := r.Observe(ctx, pol, nil)
	return doctor.Input{Host: h, Policy: pol, State: &st, Checks: r.Checkers()}
}
