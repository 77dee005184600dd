package service

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/reconcile"
)

// ArgError is an invalid argument to a mutating operation. It is returned
// before anything was touched; the bus maps it to InvalidArgs.
type ArgError struct {
	Arg string // name of the argument, as in the D-Bus signature
	Msg string
}

func (e *ArgError) Error() string { return fmt.Sprintf("invalid argument %s: %s", e.Arg, e.Msg) }

// ConfigError wraps a configuration that does not load: the last good
// policy stays in force.
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string { return e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

// ApplyError says the kernel refused a change. The change was undone (the
// runtime overlay or rdmad's drop-in restored) so the policy in force does
// not keep failing on every pass.
type ApplyError struct {
	Failed []reconcile.Action
}

func (e *ApplyError) Error() string {
	msgs := make([]string, 0, len(e.Failed))
	for _, a := range e.Failed {
		msgs = append(msgs, fmt.Sprintf("%s %s %q: %v", a.Target, a.What, a.To, a.Err))
	}
	return "the kernel refused the change, it was undone: " + strings.Join(msgs, "; ")
}

// LinkDeleter removes a soft RDMA link from the kernel ("rdma link delete").
// daemon/links provides the real one over RDMA netlink; the service only
// needs it for DeleteLink, since creation is the links part's job in a pass.
type LinkDeleter interface {
	DeleteLink(ctx context.Context, name string) error
}

// SetLinkDeleter installs the kernel side of DeleteLink. Call it before the
// bus is started.
func (s *Service) SetLinkDeleter(d LinkDeleter) { s.linkDeleter = d }

// RoCEChange is a SetRoCE request.
type RoCEChange struct {
	Device  string
	Port    int             // 0: every port of the device
	Mode    config.RoCEMode // "": keep
	TOS     int             // -1: keep
	Persist bool
}

// ReloadNow re-reads the configuration and reconciles before returning, so
// the caller sees the result. A config error is a *ConfigError.
func (s *Service) ReloadNow(ctx context.Context) (reconcile.Report, error) {
	s.runtime.mutation.Lock()
	defer s.runtime.mutation.Unlock()
	if err := s.Reload(); err != nil {
		return reconcile.Report{}, &ConfigError{Err: s.ConfigError()}
	}
	return s.rec.All(ctx), nil
}

// SetRoCE changes the RoCE mode and/or TOS of a device's ports.
func (s *Service) SetRoCE(ctx context.Context, c RoCEChange) error {
	s.runtime.mutation.Lock()
	defer s.runtime.mutation.Unlock()
	dev, ports, err := s.validateRoCE(c)
	if err != nil {
		return err
	}
	var tos *int
	if c.TOS >= 0 {
		v := c.TOS
		tos = &v
	}
	failed := func(rep reconcile.Report) []reconcile.Action {
		var out []reconcile.Action
		for _, a := range rep.Actions {
			if a.Status != reconcile.Failed || !strings.HasPrefix(a.What, "roce") {
				continue
			}
			for _, n := range ports {
				if a.Target == reconcile.PortTarget(dev.Name, n) {
					out = append(out, a)
				}
			}
		}
		return out
	}
	if !c.Persist {
		prev := s.changeOverlay(func(o *Overlay) { o.setRoCE(dev.Name, c.Port, c.Mode, tos) })
		if bad := failed(s.rec.Devices(ctx, dev.Name)); len(bad) > 0 {
			s.changeOverlay(func(o *Overlay) { *o = prev })
			s.rec.Devices(ctx, dev.Name)
			return &ApplyError{Failed: bad}
		}
		return nil
	}
	var all []int
	for _, p := range dev.Ports {
		all = append(all, p.Number)
	}
	return s.persist(ctx,
		func(p *config.Persisted) { p.SetRoCE(config.Selector{Device: dev.Name}, c.Port, c.Mode, tos) },
		func(o *Overlay) { o.forgetRoCE(dev.Name, c.Port, all, c.Mode != "", tos != nil) },
		func(ctx context.Context) []reconcile.Action { return failed(s.rec.Devices(ctx, dev.Name)) })
}

func (s *Service) validateRoCE(c RoCEChange) (host.Device, []int, error) {
	if c.Device == "" {
		return host.Device{}, nil, &ArgError{"device", "empty device name"}
	}
	dev, err := s.host.Device(c.Device)
	if errors.Is(err, host.ErrNoDevice) {
		return host.Device{}, nil, &ArgError{"device", fmt.Sprintf("no RDMA device %q", c.Device)}
	}
	if err != nil {
		return host.Device{}, nil, fmt.Errorf("service: %w", err)
	}
	switch c.Mode {
	case "", config.RoCEv1, config.RoCEv2:
	default:
		return dev, nil, &ArgError{"mode", fmt.Sprintf("%q is not a RoCE mode: use v1, v2, or \"\" to keep", c.Mode)}
	}
	if c.TOS < -1 || c.TOS > 255 {
		return dev, nil, &ArgError{"tos", fmt.Sprintf("%d is out of range 0..255 (-1 keeps the TOS)", c.TOS)}
	}
	if c.Mode == "" && c.TOS == -1 {
		return dev, nil, &ArgError{"mode", "nothing to set: give a mode, a TOS, or both"}
	}
	if c.Port < 0 {
		return dev, nil, &ArgError{"port", fmt.Sprintf("%d is not a port number", c.Port)}
	}
	var ports []int
	for _, p := range dev.Ports {
		if c.Port == 0 || p.Number == c.Port {
			ports = append(ports, p.Number)
		}
	}
	if len(ports) == 0 {
		return dev, nil, &ArgError{"port", fmt.Sprintf("%s has no port %d (ports: %s)", dev.Name, c.Port, portList(dev))}
	}
	for _, n := range ports {
		p := dev.Port(n)
		if t := dev.PortTransport(p); t != host.TransportRoCE {
			if c.Port == 0 && len(ports) > 1 {
				continue // mixed VPI device: the RoCE part skips non-Ethernet ports
			}
			return dev, nil, &ArgError{"port", fmt.Sprintf("%s port %d is %s, not RoCE: mode and TOS apply to Ethernet ports", dev.Name, n, t)}
		}
	}
	if !hasRoCEPort(dev, ports) {
		return dev, nil, &ArgError{"device", fmt.Sprintf("%s has no RoCE (Ethernet) port", dev.Name)}
	}
	return dev, ports, nil
}

func hasRoCEPort(dev host.Device, ports []int) bool {
	for _, n := range ports {
		if dev.PortTransport(dev.Port(n)) == host.TransportRoCE {
			return true
		}
	}
	return false
}

func portList(dev host.Device) string {
	var s []string
	for _, p := range dev.Ports {
		s = append(s, fmt.Sprint(p.Number))
	}
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// validLinkName applies the config file's rules for link names, so a name
// D-Bus accepts is one the persisted drop-in can hold.
func validLinkName(name string) error {
	if err := config.ValidLinkName(name); err != nil {
		return &ArgError{"name", err.Error()}
	}
	return nil
}

// AddLink declares a soft RDMA link (rxe or siw on a netdev). The links part
// of the reconciler creates it in the pass that follows.
func (s *Service) AddLink(ctx context.Context, l config.Link, persist bool) error {
	s.runtime.mutation.Lock()
	defer s.runtime.mutation.Unlock()
	if err := validLinkName(l.Name); err != nil {
		return err
	}
	if l.Type != config.LinkRXE && l.Type != config.LinkSIW {
		return &ArgError{"type", fmt.Sprintf("%q is not a soft RDMA link type: use rxe or siw", l.Type)}
	}
	if err := config.ValidNetdevName(l.Netdev); err != nil {
		return &ArgError{"netdev", err.Error()}
	}
	if !s.host.Exists(host.ClassNet + "/" + l.Netdev) {
		return &ArgError{"netdev", fmt.Sprintf("no network interface %q", l.Netdev)}
	}
	pol := s.Policy()
	for _, other := range pol.Links {
		if other.Name != l.Name && other.Type == l.Type && other.Netdev == l.Netdev {
			return &ArgError{"netdev", fmt.Sprintf("%s already has %s link %q (%s); the kernel allows one per netdev", l.Netdev, l.Type, other.Name, other.Source)}
		}
	}
	if _, declared := pol.LinkSource(l.Name); !declared && s.host.Exists(host.ClassInfiniband+"/"+l.Name) {
		return &ArgError{"name", fmt.Sprintf("an RDMA device %q already exists and is not a link rdmad manages", l.Name)}
	}
	failed := func(rep reconcile.Report) []reconcile.Action { return failedFor(rep, "link "+l.Name) }
	if !persist {
		prev := s.changeOverlay(func(o *Overlay) { o.addLink(l) })
		if bad := failed(s.rec.All(ctx)); len(bad) > 0 {
			s.changeOverlay(func(o *Overlay) { *o = prev })
			s.rec.All(ctx)
			return &ApplyError{Failed: bad}
		}
		return nil
	}
	return s.persist(ctx,
		func(p *config.Persisted) { p.AddLink(l) },
		func(o *Overlay) { o.forgetLink(l.Name) },
		func(ctx context.Context) []reconcile.Action { return failed(s.rec.All(ctx)) })
}

// DeleteLink stops declaring a link and deletes it from the kernel.
func (s *Service) DeleteLink(ctx context.Context, name string, persist bool) error {
	s.runtime.mutation.Lock()
	defer s.runtime.mutation.Unlock()
	if err := validLinkName(name); err != nil {
		return err
	}
	pol := s.Policy()
	if _, declared := pol.LinkSource(name); !declared {
		return &ArgError{"name", fmt.Sprintf("no link %q is declared", name)}
	}
	if persist {
		if err := pol.CheckLinkRemovable(name); err != nil {
			// A runtime-only link has no file: persisting its removal is
			// just forgetting it.
			if src, _ := pol.LinkSource(name); src.File != RuntimeSource {
				return &ArgError{"name", err.Error()}
			}
		}
	}
	exists := s.host.Exists(host.ClassInfiniband + "/" + name)
	deleter := s.linkDeleter
	if exists && deleter == nil {
		return fmt.Errorf("service: delete link %s: this rdmad has no RDMA netlink link support", name)
	}
	kernelDelete := func(ctx context.Context) []reconcile.Action {
		if !exists {
			return nil
		}
		if err := deleter.DeleteLink(ctx, name); err != nil {
			return []reconcile.Action{{Target: "link " + name, What: "delete", Status: reconcile.Failed, Err: err}}
		}
		s.rec.All(ctx)
		return nil
	}
	if !persist {
		prev := s.changeOverlay(func(o *Overlay) { o.deleteLink(name) })
		if bad := kernelDelete(ctx); len(bad) > 0 {
			s.changeOverlay(func(o *Overlay) { *o = prev })
			return &ApplyError{Failed: bad}
		}
		return nil
	}
	return s.persist(ctx,
		func(p *config.Persisted) { p.RemoveLink(name) },
		func(o *Overlay) { o.forgetLink(name) },
		kernelDelete)
}

// SetNetnsMode declares the RDMA network namespace mode.
func (s *Service) SetNetnsMode(ctx context.Context, mode config.NetnsMode, persist bool) error {
	s.runtime.mutation.Lock()
	defer s.runtime.mutation.Unlock()
	if mode != config.NetnsShared && mode != config.NetnsExclusive {
		return &ArgError{"mode", fmt.Sprintf("%q is not a netns mode: use shared or exclusive", mode)}
	}
	failed := func(rep reconcile.Report) []reconcile.Action { return failedFor(rep, "netns") }
	if !persist {
		prev := s.changeOverlay(func(o *Overlay) { o.Netns = mode })
		if bad := failed(s.rec.All(ctx)); len(bad) > 0 {
			s.changeOverlay(func(o *Overlay) { *o = prev })
			s.rec.All(ctx)
			return &ApplyError{Failed: bad}
		}
		return nil
	}
	return s.persist(ctx,
		func(p *config.Persisted) { p.Netns = mode },
		func(o *Overlay) { o.Netns = config.NetnsUnmanaged },
		func(ctx context.Context) []reconcile.Action { return failed(s.rec.All(ctx)) })
}

func failedFor(rep reconcile.Report, target string) []reconcile.Action {
	var out []reconcile.Action
	for _, a := range rep.Actions {
		if a.Status == reconcile.Failed && a.Target == target {
			out = append(out, a)
		}
	}
	return out
}

// persist edits rdmad's drop-in, drops what the overlay said about the same
// setting (the persisted value must be the one in force), reloads, and runs
// apply. If the reload or apply fails, the drop-in and overlay are restored.
func (s *Service) persist(ctx context.Context, edit func(*config.Persisted), forget func(*Overlay), apply func(context.Context) []reconcile.Action) error {
	dir := s.DropInDir()
	old, err := config.LoadPersisted(dir)
	if err != nil {
		return &ConfigError{Err: err}
	}
	next := config.Persisted{
		RoCE:  append([]config.RoCERule(nil), old.RoCE...),
		Links: append([]config.Link(nil), old.Links...),
		Netns: old.Netns,
	}
	edit(&next)
	if err := config.WritePersisted(dir, next); err != nil {
		return fmt.Errorf("service: persist: %w", err)
	}
	prevOverlay := s.changeOverlay(forget)
	undo := func() {
		if err := config.WritePersisted(dir, old); err != nil {
			s.log.Error("could not restore rdmad's drop-in after a refused change", "dir", dir, "err", err)
		}
		s.changeOverlay(func(o *Overlay) { *o = prevOverlay })
		_ = s.Reload()
	}
	if err := s.Reload(); err != nil {
		undo()
		return &ConfigError{Err: errors.Unwrap(err)}
	}
	if bad := apply(ctx); len(bad) > 0 {
		undo()
		s.rec.All(ctx)
		return &ApplyError{Failed: bad}
	}
	return nil
}
