package compose

import (
	"context"
	"log/slog"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/doctor"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/metrics"
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

// Textfile builds the [metrics] textfile of the running daemon s: the
// file follows the configured path of the policy in force (a reload that
// sets, moves or removes it, or that fails: the file shows the error), is
// rendered again after each pass, and shows doctor's findings, run on the
// writer's goroutine after full passes, configuration changes and when
// the health monitor's samples move. Nothing is written until the caller runs it
// (metrics.Textfile.Run); rdmad --once builds none.
func Textfile(s *service.Service, log *slog.Logger) *metrics.Textfile {
	rec := s.Reconciler()
	tf := metrics.New(metrics.Options{Source: rec, ConfigError: s.ConfigError, InForce: s.InForce, Log: log,
		Findings: func() []doctor.Finding { return Diagnose(s) }})
	rec.OnChange(tf.Changed)
	follow := func() {
		path := ""
		if p := s.PolicyInForce().Metrics.Textfile; p != "" {
			path = s.Host().Path(p)
		}
		tf.SetPath(path)
	}
	s.OnConfigChange(follow)
	// What is declared, and where, is what doctor judges (an override, a
	// rule that matches nothing): a reload or a change over D-Bus makes the
	// findings due, though its pass may be scoped to one device.
	s.OnConfigChange(tf.FindingsChanged)
	s.OnHealthChange(tf.FindingsChanged)
	follow()
	return tf
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
