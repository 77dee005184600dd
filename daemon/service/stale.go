package service

import (
	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host"
)

// ManagedFiles are the files rdmad writes atomically (host.WriteFileAtomic):
// its drop-in, the parts' files (Parts.Files: memlock, the netns
// modprobe.d file), the last good configuration and the [metrics] textfile
// of the policy in force.
func (s *Service) ManagedFiles() []string {
	files := []string{config.PersistedPath(s.DropInDir()), s.host.Path(config.LastGoodFile)}
	for _, rel := range s.parts.Files {
		files = append(files, s.host.Path(rel))
	}
	if pol := s.PolicyInForce(); pol != nil && pol.Metrics.Textfile != "" {
		files = append(files, s.host.Path(pol.Metrics.Textfile))
	}
	return files
}

// RemoveStaleTemps deletes the temp files a crash between an atomic
// write and its rename left beside rdmad's files (the files themselves
// are whole: the old or the new content). Call it only while holding the
// instance lock, before the first pass. Failures are logged; they stop
// nothing.
func (s *Service) RemoveStaleTemps() []string {
	var all []string
	for _, f := range s.ManagedFiles() {
		removed, err := host.RemoveStaleTemps(f)
		if err != nil {
			s.log.Warn("cannot remove stale temp files", "file", f, "err", err)
		}
		for _, r := range removed {
			s.log.Info("removed a temp file left by an interrupted write", "file", r)
		}
		all = append(all, removed...)
	}
	return all
}
