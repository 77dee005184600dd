package service

import "github.com/rdmad/rdmad/daemon/metrics"

// startMetrics keeps the [metrics] textfile of the policy in force: it is
// rewritten after passes and follows every configuration change (a reload
// that sets, moves or removes the path, or that fails: the file shows the
// config error). Run writes it; --once writes none.
func (s *Service) startMetrics() {
	s.textfile = metrics.New(metrics.Options{Source: s.rec, ConfigError: s.ConfigError, Log: s.log})
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
