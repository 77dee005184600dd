package service

import (
	"context"
	"errors"
	"fmt"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/reconcile"
)

// change is one mutating call: how it changes the declared policy (the
// runtime overlay, or rdmad's drop-in plus the overlay statements the
// persisted value replaces), how it reaches the kernel, and what it
// declares, whose records must hold after its pass.
type change struct {
	runtime func(*Overlay)          // persist=false
	persist func(*config.Persisted) // persist=true
	forget  func(*Overlay)          // persist=true

	// kernel does what a pass does not (deleting a link) after the
	// declaration changed; a failure there skips the pass.
	kernel func(context.Context) []reconcile.Action
	scope  reconcile.Scope // what the pass that applies the change reads again
	// call is the subjects and keys the call declares (Report.Outcome).
	call reconcile.Call
	// anySource accepts the call's records whatever declares them: a
	// runtime netns mode still leaves the files' mode for the next boot.
	anySource bool
	// withdraws is set for a change that only removes declarations made
	// over D-Bus (Withdraw): [api] changes does not govern it, since it
	// hands the host back to the files.
	withdraws bool
}

// commit is the one path of every mutating call: change the declaration,
// reconcile once, ask the pass whether what the call declares holds
// (Report.Outcome), and when it does not, withdraw the declaration, have
// the parts put back the values the call had set, and reconcile again. It
// runs under runtime.mutation.
func (s *Service) commit(ctx context.Context, persist bool, c change) error {
	if s.stopping.Load() {
		return ErrStopping
	}
	// The bus checked [api] before authorizing; the files may have been
	// reloaded while the caller answered polkit.
	if !c.withdraws {
		if err := s.CheckAPI(persist); err != nil {
			return err
		}
	}
	var undo func() error
	if !persist {
		next := s.RuntimeOverlay()
		c.runtime(&next)
		if len(next.RoCE) > s.maxRuntime || len(next.QoS) > s.maxRuntime || len(next.Links)+len(next.DeletedLinks) > s.maxRuntime {
			return fmt.Errorf("rdmad keeps at most %d runtime RoCE settings, %d runtime QoS settings and %d runtime links; persist the change or restart rdmad to drop the runtime ones", s.maxRuntime, s.maxRuntime, s.maxRuntime)
		}
	}
	if persist {
		// A persisted change is a drop-in in a set of files that does not
		// load: it would not be in force, and could not be checked
		// against the rest. Runtime changes still work.
		if err := s.ConfigError(); err != nil {
			return &ConfigError{Err: fmt.Errorf("the configuration files do not load, so nothing can be persisted until they are fixed (runtime changes, without persist, still work): %w", err)}
		}
		// Saved as the last good configuration only once its pass
		// succeeded (or, withdrawn, the files as they were again).
		s.beginTentative()
		defer s.endTentative()
		u, err := s.persistDropIn(c.persist, c.forget, s.noteOf(ctx))
		if err != nil {
			return err
		}
		undo = u
	} else {
		note := s.noteOf(ctx)
		prev := s.changeOverlay(func(o *Overlay) {
			before := o.clone()
			c.runtime(o)
			noteOverlay(before, o, note)
		})
		undo = func() error {
			s.changeOverlay(func(o *Overlay) { *o = prev })
			return nil
		}
	}
	if !c.anySource {
		c.call.Mine = config.Position.IsRuntime
		if persist {
			c.call.Mine = config.IsPersistedFile
		}
	}
	var rep reconcile.Report
	if c.kernel != nil {
		rep.Actions = c.kernel(ctx)
	}
	if !rep.Failed() {
		pass := s.pass(ctx, c.scope)
		rep.Actions = append(rep.Actions, pass.Actions...)
		rep.Records = pass.Records
	}
	bad, deferred := rep.Outcome(c.call)
	if len(bad) == 0 {
		if len(deferred) > 0 {
			return &NextBootError{Err: deferred[0].Why}
		}
		return nil
	}
	ae := &ApplyError{Failed: bad}
	undoErr := undo()
	restored, err := s.putBack(ctx, rep.Changed(c.call))
	ae.Restored, ae.UndoErr = restored, errors.Join(undoErr, err)
	s.pass(ctx, c.scope)
	return ae
}

// putBack has the parts undo a refused call's changes (reconcile.Undo),
// so the call leaves the kernel as it found it; the pass after the
// rollback then re-applies what the files declare.
func (s *Service) putBack(ctx context.Context, changed []reconcile.Action) ([]reconcile.Action, error) {
	var done []reconcile.Action
	var errs []error
	for _, a := range changed {
		if err := s.rec.Undo(ctx, a); err != nil {
			errs = append(errs, err)
			continue
		}
		done = append(done, reconcile.Action{Subject: a.Subject, Kind: a.Kind, Setting: a.Setting, From: a.To, To: a.From, Old: a.New, New: a.Old, Status: reconcile.Changed})
	}
	return done, errors.Join(errs...)
}

// persistDropIn edits rdmad's drop-in, the entries the edit changes noted
// with note (who and when), drops what the overlay said about the same
// setting (the persisted value must be the one in force) and reloads the
// policy (without a pass: the caller runs the one pass). It returns how to
// undo all three; on a reload error it has undone them already.
func (s *Service) persistDropIn(edit func(*config.Persisted), forget func(*Overlay), note config.Note) (undo func() error, err error) {
	dir := s.DropInDir()
	file := config.PersistedPath(dir)
	old, err := config.LoadPersisted(s.files(), dir)
	if err != nil {
		return nil, &ConfigError{Err: err}
	}
	next := config.Persisted{
		RoCE:  append([]config.RoCERule(nil), old.RoCE...),
		QoS:   append([]config.QoSRule(nil), old.QoS...),
		Links: append([]config.Link(nil), old.Links...),
		Netns: old.Netns, NetnsNote: old.NetnsNote,
	}
	edit(&next)
	notePersisted(old, &next, note)
	if err := writePersisted(file, next); err != nil {
		return nil, err
	}
	prevOverlay := s.changeOverlay(forget)
	undo = func() error {
		var errs []error
		if err := writePersisted(file, old); err != nil {
			errs = append(errs, fmt.Errorf("restore rdmad's drop-in %s: %w", file, err))
		}
		s.changeOverlay(func(o *Overlay) { *o = prevOverlay })
		if _, err := s.reload(); err != nil {
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	}
	if _, err := s.reload(); err != nil {
		if uerr := undo(); uerr != nil {
			s.log.Error("could not undo a persisted change after a failed reload", "dir", dir, "err", uerr)
		}
		return nil, &ConfigError{Err: errors.Unwrap(err)}
	}
	return undo, nil
}

// writePersisted validates p and writes rdmad's drop-in through the one
// managed-file writer: atomically, only when it changes, never over a file
// rdmad did not write; an empty p removes it.
func writePersisted(file string, p config.Persisted) error {
	if err := p.Validate(); err != nil {
		return &ConfigError{Err: err}
	}
	if p.Empty() {
		if _, err := host.RemoveManaged(file, config.PersistedHeader); err != nil {
			return fmt.Errorf("remove rdmad's drop-in %s: %w", file, err)
		}
		return nil
	}
	if _, err := host.WriteManaged(file, config.PersistedHeader, p.Render()); err != nil {
		return fmt.Errorf("write rdmad's drop-in %s: %w", file, err)
	}
	return nil
}
