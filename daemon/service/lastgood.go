package service

import (
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host"
)

// lastGood is the policy rdmad starts with when the files do not load
// (loadErr): the last configuration that loaded, parsed again from the
// copies rdmad saved of its files, or, when there is none, a policy that
// declares nothing (docs/decisions/last-good.md).
func (s *Service) lastGood(loadErr error) *config.Policy {
	s.log.Error("the configuration does not load; rdmad starts with the last good one", "err", loadErr)
	name := s.host.Path(config.LastGoodFile)
	snap, err := s.readLastGood()
	if err == nil {
		var pol *config.Policy
		if pol, err = snap.Load(); err == nil {
			s.saved = snap
			s.log.Warn("applying the last good configuration until the files load", "saved", snap.Saved.Format(time.RFC3339), "files", pol.Files, "from", name)
			return pol
		}
	}
	if errors.Is(err, fs.ErrNotExist) {
		s.log.Error("no last good configuration was saved; applying nothing declared until the files load", "file", name)
	} else {
		s.log.Error("the last good configuration cannot be used; applying nothing declared until the files load", "file", name, "err", err)
	}
	return config.NothingDeclared(s.configFile)
}

// readLastGood reads the last good configuration trusted as the files it
// stands for are (host.ReadTrustedFileLimit: root's, not writable by
// others, no symlink, its directory judged too), for this daemon's main
// file only, each file in it bounded as the files are.
func (s *Service) readLastGood() (*config.Snapshot, error) {
	name := s.host.Path(config.LastGoodFile)
	b, err := s.host.ReadTrustedFileLimit(config.LastGoodFile, maxLastGood)
	if err != nil {
		return nil, err
	}
	snap, err := config.ParseSnapshot(name, b)
	if err != nil {
		return nil, err
	}
	if err := snap.Verify(s.configFile, host.MaxConfigSize); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return snap, nil
}

// maxLastGood bounds the last good configuration file: its files are at
// most host.MaxConfigSize each, base64 in JSON.
const maxLastGood = 64 << 20

// SaveLastGood saves the configuration in force, if it came from the files,
// as the last good one. The daemon calls it once it holds the instance
// lock (nothing is written before), and every successful reload saves
// again. A failure is logged, never fatal: the files still load.
func (s *Service) SaveLastGood() {
	s.loadMu.Lock()
	defer s.loadMu.Unlock()
	s.saveLastGood()
}

// saveLastGood runs under loadMu. While a persisted call is tentative the
// files include a drop-in the kernel may still refuse: the call saves once
// its pass has succeeded (endTentative).
func (s *Service) saveLastGood() {
	if s.oneShot || s.tentative || s.snapshot == nil || s.snapshot.Same(s.saved) {
		return
	}
	name := s.host.Path(config.LastGoodFile)
	if old, err := s.readLastGood(); err == nil && old.Same(s.snapshot) {
		s.saved = old
		return
	}
	snap := *s.snapshot
	snap.Saved = time.Now().UTC().Truncate(time.Second)
	if _, err := host.WriteManaged(name, config.LastGoodHeader, snap.Marshal()); err != nil {
		s.log.Warn("could not save the last good configuration", "err", fmt.Errorf("service: %w", err))
		return
	}
	s.saved = &snap
	s.log.Debug("saved the last good configuration", "file", name, "files", len(snap.Files))
}

// beginTentative marks the files as holding a persisted call that has not
// yet been applied: reloads put them in force but do not save them.
func (s *Service) beginTentative() {
	s.loadMu.Lock()
	s.tentative = true
	s.loadMu.Unlock()
}

// endTentative ends a persisted call, applied or withdrawn, and saves the
// files then in force (nothing is written when they are the saved ones).
func (s *Service) endTentative() {
	s.loadMu.Lock()
	defer s.loadMu.Unlock()
	s.tentative = false
	s.saveLastGood()
}
