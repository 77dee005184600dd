package service

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"syscall"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/reconcile"
)

// RoCEChange is a SetRoCE request.
type RoCEChange struct {
	Device  string
	Port    int             // 0: every port of the device
	Mode    config.RoCEMode // "": keep
	TOS     int             // -1: keep
	Persist bool
}

// ReloadNow re-reads the configuration and reconciles before returning, so
// the caller sees the result: one full pass. A config error is a
// *ConfigError.
func (s *Service) ReloadNow(ctx context.Context) (reconcile.Report, error) {
	s.runtime.mutation.Lock()
	defer s.runtime.mutation.Unlock()
	if _, err := s.reload(); err != nil {
		return reconcile.Report{}, &ConfigError{Err: s.ConfigError()}
	}
	return s.pass(ctx, reconcile.Scope{Full: true, Forced: true}), nil
}

// SetRoCE changes the RoCE mode and/or TOS of a device's ports. It fails
// when the kernel refuses a requested field on a targeted port, or the
// device's configfs rdma_cm cannot be reached; failures of other fields,
// ports or devices (an old declaration the kernel keeps refusing) are not
// this call's.
func (s *Service) SetRoCE(ctx context.Context, c RoCEChange) error {
	s.runtime.mutation.Lock()
	defer s.runtime.mutation.Unlock()
	dev, ports, err := s.validateRoCE(c)
	if err != nil {
		return err
	}
	if err := storable(c.Persist, "device", dev.Name); err != nil {
		return err
	}
	var tos *int
	if c.TOS >= 0 {
		v := c.TOS
		tos = &v
	}
	wanted := map[reconcile.Kind]any{} // the requested value of each kind, typed as the RoCE part's New
	if c.Mode != "" {
		wanted[reconcile.KindRoCEMode] = c.Mode
	}
	if tos != nil {
		wanted[reconcile.KindRoCETOS] = *tos
	}
	var targets, all []int // RoCE ports the call sets; every port
	for _, n := range ports {
		if dev.PortTransport(dev.Port(n)) == host.TransportRoCE {
			targets = append(targets, n)
		}
	}
	for _, p := range dev.Ports {
		all = append(all, p.Number)
	}
	var scopePorts []int // nil: the whole device
	if c.Port != 0 {
		scopePorts = []int{c.Port}
	}
	return s.commit(ctx, c.Persist, change{
		runtime: func(o *Overlay) { o.setRoCE(dev.Name, c.Port, c.Mode, tos) },
		persist: func(p *config.Persisted) {
			p.SetRoCE(config.Selector{Device: config.Exact(dev.Name)}, c.Port, c.Mode, tos)
		},
		forget: func(o *Overlay) { o.forgetRoCE(dev.Name, c.Port, all, c.Mode != "", tos != nil) },
		scope:  reconcile.Scope{Devices: map[string][]int{dev.Name: scopePorts}},
		failed: func(rep reconcile.Report) []reconcile.Action { return roceFailures(rep, dev.Name, targets, wanted) },
		restore: func(ctx context.Context, rep reconcile.Report) ([]reconcile.Action, error) {
			return s.undo(ctx, rep, dev.Name, targets, []reconcile.Kind{reconcile.KindRoCEMode, reconcile.KindRoCETOS}, wanted)
		},
	})
}

// roceFailures picks a SetRoCE call's failures from its pass: the requested
// kinds on the targeted ports, and device-level failures of the device
// (configfs rdma_cm missing or refusing mkdir, after which no port is
// tried). A requested kind with no action at all was not applied either:
// the device or port went away during the call; nor was one whose action
// set another value than the requested one (the call's rule did not
// select the port: it must never pass for a success).
func roceFailures(rep reconcile.Report, dev string, ports []int, wanted map[reconcile.Kind]any) []reconcile.Action {
	kinds := make([]reconcile.Kind, 0, len(wanted))
	for _, k := range []reconcile.Kind{reconcile.KindRoCEMode, reconcile.KindRoCETOS} {
		if _, ok := wanted[k]; ok {
			kinds = append(kinds, k)
		}
	}
	var out []reconcile.Action
	for _, a := range rep.Actions {
		if a.Status == reconcile.Failed && a.Subject == reconcile.DeviceSubject(dev) {
			out = append(out, a)
		}
	}
	deviceFailed := len(out) > 0
	for _, n := range ports {
		subject := reconcile.PortSubject(dev, n)
		for _, k := range kinds {
			a, ok := rep.Find(subject, k)
			switch {
			case ok && a.Status == reconcile.Failed:
				out = append(out, a)
			case ok && a.New != wanted[k]:
				a.Status = reconcile.Failed
				a.Err = fmt.Errorf("service: the policy in force sets %q, not the requested %v", a.To, wanted[k])
				out = append(out, a)
			case !ok && !deviceFailed:
				out = append(out, reconcile.Action{Subject: subject, Kind: k, Status: reconcile.Failed,
					Err: fmt.Errorf("service: the pass did not set it: %s port %d went away or is no longer a RoCE port", dev, n)})
			}
		}
	}
	return out
}

// undo has the parts put back the values a refused SetRoCE or SetQoS had
// changed (the requested kinds, in order, on the targeted ports), so the
// call leaves the kernel as it found it. The pass after the rollback then
// re-applies what the files declare.
func (s *Service) undo(ctx context.Context, rep reconcile.Report, dev string, ports []int, order []reconcile.Kind, kinds map[reconcile.Kind]any) ([]reconcile.Action, error) {
	var done []reconcile.Action
	var errs []error
	for _, n := range ports {
		subject := reconcile.PortSubject(dev, n)
		for _, k := range order {
			if _, asked := kinds[k]; !asked {
				continue
			}
			a, ok := rep.Find(subject, k)
			if !ok || a.Status != reconcile.Changed {
				continue
			}
			if err := s.rec.Undo(ctx, a); err != nil {
				errs = append(errs, fmt.Errorf("service: put back %s %s %q: %w", subject, k, a.From, err))
				continue
			}
			done = append(done, reconcile.Action{Subject: subject, Kind: k, From: a.To, To: a.From, Old: a.New, New: a.Old, Status: reconcile.Changed})
		}
	}
	return done, errors.Join(errs...)
}

// AddLink declares a soft RDMA link (rxe or siw on a netdev). The links part
// of the reconciler creates it in the pass that follows.
func (s *Service) AddLink(ctx context.Context, l config.Link, persist bool) error {
	s.runtime.mutation.Lock()
	defer s.runtime.mutation.Unlock()
	if err := s.checkAddLink(l, persist); err != nil {
		return err
	}
	return s.commit(ctx, persist, change{
		runtime: func(o *Overlay) { o.addLink(l) },
		persist: func(p *config.Persisted) { p.AddLink(l) },
		forget:  func(o *Overlay) { o.forgetLink(l.Name) },
		failed: func(rep reconcile.Report) []reconcile.Action {
			a, ok := rep.Find(reconcile.LinkSubject(l.Name), reconcile.KindLinkCreate)
			switch {
			case !ok:
				return []reconcile.Action{{Subject: reconcile.LinkSubject(l.Name), Kind: reconcile.KindLinkCreate, Status: reconcile.Failed,
					Err: fmt.Errorf("service: the pass did not consider link %s", l.Name)}}
			case a.Status == reconcile.Failed:
				return []reconcile.Action{a}
			}
			return nil
		},
	})
}

// DeleteLink stops declaring a link and deletes it from the kernel. With
// persist, a link an administrator's file declares is refused before
// anything is touched, also when rdmad's drop-in or the overlay shadows
// that declaration: it would come back with the next pass.
func (s *Service) DeleteLink(ctx context.Context, name string, persist bool) error {
	s.runtime.mutation.Lock()
	defer s.runtime.mutation.Unlock()
	if err := s.checkDeleteLink(name, persist); err != nil {
		return err
	}
	exists := s.host.Exists(host.ClassInfiniband + "/" + name)
	if exists && s.parts.Links == nil {
		return fmt.Errorf("service: delete link %s: this rdmad has no RDMA netlink link support", name)
	}
	subject := reconcile.LinkSubject(name)
	return s.commit(ctx, persist, change{
		runtime: func(o *Overlay) { o.deleteLink(name) },
		persist: func(p *config.Persisted) { p.RemoveLink(name) },
		forget:  func(o *Overlay) { o.forgetLink(name) },
		kernel: func(ctx context.Context) []reconcile.Action {
			if !exists {
				return nil
			}
			return []reconcile.Action{s.parts.Links.Delete(ctx, name)}
		},
		scope:  reconcile.Scope{Devices: map[string][]int{name: nil}},
		failed: func(rep reconcile.Report) []reconcile.Action { return failedOn(rep, subject) },
	})
}

// SetNetnsMode declares the RDMA network namespace mode. Without persist
// the running kernel is switched and the next boot is not affected; with
// persist, modprobe.d gives ib_core the mode at every boot too.
func (s *Service) SetNetnsMode(ctx context.Context, mode config.NetnsMode, persist bool) error {
	s.runtime.mutation.Lock()
	defer s.runtime.mutation.Unlock()
	if err := s.checkNetnsMode(mode); err != nil {
		return err
	}
	kinds := []reconcile.Kind{reconcile.KindNetnsMode}
	if persist {
		kinds = append(kinds, reconcile.KindNetnsModprobe)
	}
	// A persisted mode the running kernel refuses to take now (EBUSY: other
	// network namespaces exist) still holds for the next boot: the
	// declaration stays, and the call says the switch waits.
	busy := func(a reconcile.Action) bool {
		return persist && a.Kind == reconcile.KindNetnsMode && errors.Is(a.Err, syscall.EBUSY)
	}
	return s.commit(ctx, persist, change{
		runtime: func(o *Overlay) { o.Netns = mode },
		persist: func(p *config.Persisted) { p.Netns = mode },
		forget:  func(o *Overlay) { o.Netns = config.NetnsUnmanaged },
		failed: func(rep reconcile.Report) []reconcile.Action {
			return slices.DeleteFunc(failedOn(rep, reconcile.HostSubject(), kinds...), busy)
		},
		after: func(rep reconcile.Report) error {
			if a, ok := rep.Find(reconcile.HostSubject(), reconcile.KindNetnsMode); ok && a.Status == reconcile.Failed && busy(a) {
				return &NextBootError{Err: a.Err} // the netns part says what waits for the boot
			}
			return nil
		},
	})
}

// failedOn returns the failed actions on subject, limited to the given
// kinds when there are any.
func failedOn(rep reconcile.Report, subject reconcile.Subject, kinds ...reconcile.Kind) []reconcile.Action {
	var out []reconcile.Action
	for _, a := range rep.Actions {
		if a.Status == reconcile.Failed && a.Subject == subject && (len(kinds) == 0 || slices.Contains(kinds, a.Kind)) {
			out = append(out, a)
		}
	}
	return out
}

// change is one mutating call: how it changes the declared policy (the
// runtime overlay, or rdmad's drop-in plus the overlay statements the
// persisted value replaces), how it reaches the kernel, which failures are
// its own, and how a refused call is undone in the kernel.
type change struct {
	runtime func(*Overlay)          // persist=false
	persist func(*config.Persisted) // persist=true
	forget  func(*Overlay)          // persist=true

	// kernel does what a pass does not (deleting a link) after the
	// declaration changed; a failure there skips the pass.
	kernel func(context.Context) []reconcile.Action
	scope  reconcile.Scope // what the pass that applies the change reads again

	failed  func(reconcile.Report) []reconcile.Action
	restore func(context.Context, reconcile.Report) ([]reconcile.Action, error) // nil: nothing to put back
	// after, when set, runs once the change stands and may still say it is
	// not complete (a NextBootError); nil: done.
	after func(reconcile.Report) error
	// withdraws is set for a change that only removes declarations made
	// over D-Bus (Withdraw): [api] changes does not govern it, since it
	// hands the host back to the files.
	withdraws bool
}

// commit is the one path of every mutating call: change the declaration,
// reconcile once, check the call's own failures, and on failure withdraw
// the declaration, put back the kernel values the call had set, and
// reconcile again. It runs under runtime.mutation.
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
			return fmt.Errorf("service: rdmad keeps at most %d runtime RoCE settings, %d runtime QoS settings and %d runtime links; persist the change or restart rdmad to drop the runtime ones", s.maxRuntime, s.maxRuntime, s.maxRuntime)
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
		u, err := s.persistDropIn(c.persist, c.forget)
		if err != nil {
			return err
		}
		undo = u
	} else {
		prev := s.changeOverlay(c.runtime)
		undo = func() error {
			s.changeOverlay(func(o *Overlay) { *o = prev })
			return nil
		}
	}
	var rep reconcile.Report
	if c.kernel != nil {
		rep.Actions = c.kernel(ctx)
	}
	if !rep.Failed() {
		pass := s.pass(ctx, c.scope)
		rep.Actions = append(rep.Actions, pass.Actions...)
	}
	bad := c.failed(rep)
	if len(bad) == 0 {
		if c.after != nil {
			return c.after(rep)
		}
		return nil
	}
	ae := &ApplyError{Failed: bad}
	undoErr := undo()
	if c.restore != nil {
		restored, err := c.restore(ctx, rep)
		ae.Restored = restored
		undoErr = errors.Join(undoErr, err)
	}
	ae.UndoErr = undoErr
	s.pass(ctx, c.scope)
	return ae
}

// persistDropIn edits rdmad's drop-in, drops what the overlay said about
// the same setting (the persisted value must be the one in force) and
// reloads the policy (without a pass: the caller runs the one pass). It
// returns how to undo all three; on a reload error it has undone them
// already.
func (s *Service) persistDropIn(edit func(*config.Persisted), forget func(*Overlay)) (undo func() error, err error) {
	dir := s.DropInDir()
	file := config.PersistedPath(dir)
	old, err := config.LoadPersisted(host.Files{}, dir)
	if err != nil {
		return nil, &ConfigError{Err: err}
	}
	next := config.Persisted{
		RoCE:  append([]config.RoCERule(nil), old.RoCE...),
		QoS:   append([]config.QoSRule(nil), old.QoS...),
		Links: append([]config.Link(nil), old.Links...),
		Netns: old.Netns,
	}
	edit(&next)
	if err := writePersisted(file, next); err != nil {
		return nil, err
	}
	prevOverlay := s.changeOverlay(forget)
	undo = func() error {
		var errs []error
		if err := writePersisted(file, old); err != nil {
			errs = append(errs, fmt.Errorf("service: restore rdmad's drop-in: %w", err))
		}
		s.changeOverlay(func(o *Overlay) { *o = prevOverlay })
		if _, err := s.reload(); err != nil {
			errs = append(errs, fmt.Errorf("service: %w", err))
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
			return fmt.Errorf("service: persist: %w", err)
		}
		return nil
	}
	if _, err := host.WriteManaged(file, config.PersistedHeader, p.Render()); err != nil {
		return fmt.Errorf("service: persist: %w", err)
	}
	return nil
}
