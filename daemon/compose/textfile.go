package compose

import (
	"log/slog"

	"github.com/rdmad/rdmad/daemon/bus"
	"github.com/rdmad/rdmad/daemon/doctor"
	"github.com/rdmad/rdmad/daemon/metrics"
	"github.com/rdmad/rdmad/daemon/service"
)

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

// CountRefused has the textfile tf count the calls the bus server srv
// refuses (rdmad_refused_calls_total), and write again when one is.
func CountRefused(srv *bus.Server, tf *metrics.Textfile) {
	tf.SetRefusedCalls(func() []metrics.CallCount {
		var out []metrics.CallCount
		for _, c := range srv.RefusedCalls() {
			out = append(out, metrics.CallCount{Method: c.Method, Reason: c.Reason, Calls: c.Calls})
		}
		return out
	})
	srv.OnRefused(tf.CallRefused)
}
