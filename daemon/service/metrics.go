package service

import (
	"github.com/rdmad/rdmad/daemon/metrics"
	"github.com/rdmad/rdmad/dbusapi"
)

// startMetrics keeps the [metrics] textfile of the policy in force: it is
// rewritten after passes and follows every configuration change (a reload
// that sets, moves or removes the path, or that fails: the file shows the
// config error). Run writes it; --once writes none. Doctor's findings are
// computed on the writer's goroutine, off the pass.
func (s *Service) startMetrics() {
	var findings func() []dbusapi.Finding
	if s.findings != nil {
		findings = func() []dbusapi.Finding { return s.findings(s) }
	}
	s.textfile = metrics.New(metrics.Options{Source: s.rec, ConfigError: s.ConfigError, InForce: s.InForce, Log: s.log, Findings: findings})
	s.rec.OnChange(s.textfile.Changed)
	s.OnConfigChange(s.followMetricsPath)
	s.followMetricsPath()
}

func (s *Service) followMetricsPath() {
	path := ""
	if tf := s.PolicyInForce().Metrics.Textfile; tf != "" {
		path = s.host.Path(tf)
	}
	s.textfile.SetPath(path)
}
