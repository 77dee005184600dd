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
	s.log.Error("the configuration does not load; rdmad starts with the last good one, if one can be used", "err", loadErr)
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
		s.unusable = err
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
		s.setSaveError(fmt.Errorf("save the last good configuration: %w", err))
		return
	}
	s.saved = &snap
	s.setSaveError(nil)
	s.log.Debug("saved the last good configuration", "file", name, "files", len(snap.Files))
}

// setSaveError records how the last save went (under loadMu). A failure
// is logged at error priority once per distinct error (it is retried
// after every pass: the journal would fill), and every change of it is
// published (ConfigChanged: the bus, doctor, the metrics read InForce).
func (s *Service) setSaveError(err error) {
	old := s.saveErr
	s.saveErr = err
	if err == nil {
		s.unusable = nil // the saved copy is a good one now
	}
	switch {
	case err != nil && (old == nil || old.Error() != err.Error()):
		s.log.Error("could not save the last good configuration: the next boot whose files do not load will not have it; retried after every pass", "err", err)
	case err == nil && old != nil:
		s.log.Info("saved the last good configuration again")
	default:
		s.refreshInForce()
		return
	}
	s.refreshInForce()
	s.configChanged()
}

// retrySave saves the configuration in force again after a pass when the
// last save failed (a full disk, a file rdmad did not write at the path).
func (s *Service) retrySave() {
	s.loadMu.Lock()
	defer s.loadMu.Unlock()
	if s.saveErr != nil {
		s.saveLastGood()
	}
}

// InForce says which policy is in force: the files, the last good
// configuration (when it was saved, its files), or nothing; and how the
// saved copy stands. It takes no lock a reload holds: the bus, STATUS=,
// doctor and the metrics read it from listeners that run during one.
func (s *Service) InForce() config.InForce {
	f := config.InForce{Origin: config.OriginNothing}
	if p := s.inForce.Load(); p != nil {
		f = *p
	}
	f.Files = []string{}
	if f.Origin != config.OriginNothing {
		f.Files = s.PolicyInForce().Files
	}
	return f
}

// refreshInForce records which policy is in force (under loadMu, after
// every change of the config error, the snapshots or the save error).
func (s *Service) refreshInForce() {
	snapshot, saved := s.snapshot, s.saved
	f := config.InForce{Unusable: s.unusable, SaveError: s.saveErr}
	switch {
	case s.ConfigError() == nil && snapshot != nil:
		f.Origin = config.OriginFiles
	case snapshot != nil: // loaded by this rdmad before the files broke
		f.Origin = config.OriginLastGood
		if saved.Same(snapshot) {
			f.Saved = saved.Saved
		}
	case saved != nil: // read from the saved copy at start
		f.Origin, f.Saved = config.OriginLastGood, saved.Saved
	default:
		f.Origin = config.OriginNothing
	}
	s.inForce.Store(&f)
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
