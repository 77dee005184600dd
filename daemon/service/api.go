package service

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"unicode/utf8"

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

// Missing is the kind of thing a NotFoundError says does not exist.
type Missing int

const (
	MissingDevice Missing = iota // an RDMA device, or the netdev of a link
	MissingPort                  // a port of an existing device
	MissingLink                  // a declared soft link
)

// NotFoundError says a well-formed name given to a call names nothing that
// exists. Like an ArgError it is returned before anything was touched; the
// bus maps it to org.rdmad1.Error.NoSuchDevice, NoSuchPort or NoSuchLink
// (a malformed name is an ArgError: InvalidArgs).
type NotFoundError struct {
	What Missing
	Arg  string // name of the argument, as in the D-Bus signature
	Msg  string
}

func (e *NotFoundError) Error() string { return fmt.Sprintf("argument %s: %s", e.Arg, e.Msg) }

// ConfigError wraps a configuration that does not load: the last good
// policy stays in force.
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string { return e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

// ApplyError says the kernel refused a change. The change was withdrawn
// (the runtime overlay or rdmad's drop-in restored) so the policy in force
// does not keep failing on every pass, and the kernel values the same call
// had already set were put back, so nothing stays half-applied.
type ApplyError struct {
	Failed   []reconcile.Action // what this call asked for and the kernel refused
	Restored []reconcile.Action // values the call had set, put back: From is the refused call's value, To the one restored
	UndoErr  error              // what could not be undone; nil when everything was
}

func (e *ApplyError) Error() string {
	var b strings.Builder
	b.WriteString("the kernel refused the change: ")
	for i, a := range e.Failed {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s %s", a.Subject, a.Kind)
		if a.To != "" {
			fmt.Fprintf(&b, " %q", a.To)
		}
		fmt.Fprintf(&b, ": %v", a.Err)
	}
	b.WriteString(". The declaration was withdrawn")
	if len(e.Restored) > 0 {
		b.WriteString(" and the values this call had already set were put back (")
		for i, a := range e.Restored {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%s %s %q -> %q", a.Subject, a.Kind, a.From, a.To)
		}
		b.WriteString(")")
	}
	if e.UndoErr != nil {
		fmt.Fprintf(&b, ", but undoing it failed: %v", e.UndoErr)
	}
	return b.String()
}

// Unwrap gives the kernel's errors (errors.Is(err, syscall.EIO)) and the
// undo error.
func (e *ApplyError) Unwrap() []error {
	var errs []error
	for _, a := range e.Failed {
		if a.Err != nil {
			errs = append(errs, a.Err)
		}
	}
	if e.UndoErr != nil {
		errs = append(errs, e.UndoErr)
	}
	return errs
}

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

// deviceArg is the device a call names: the argument checks every
// per-port call shares (SetRoCE, SetQoS), then the device as last read.
func (s *Service) deviceArg(name string) (host.Device, error) {
	if name == "" {
		return host.Device{}, &ArgError{"device", "empty device name"}
	}
	if len(name) > host.MaxDeviceNameLen {
		return host.Device{}, &ArgError{"device", fmt.Sprintf("%s is %d bytes long; RDMA device names have at most %d", argName(name), len(name), host.MaxDeviceNameLen)}
	}
	return s.device(name)
}

// portsArg is the ports of dev a call's port argument names: every port
// for 0, else that one (NoSuchPort when dev has none of that number).
func portsArg(dev host.Device, port int) ([]int, error) {
	if port < 0 {
		return nil, &ArgError{"port", fmt.Sprintf("%d is not a port number", port)}
	}
	var ports []int
	for _, p := range dev.Ports {
		if port == 0 || p.Number == port {
			ports = append(ports, p.Number)
		}
	}
	if len(ports) == 0 {
		return nil, &NotFoundError{MissingPort, "port", fmt.Sprintf("%s has no port %d (ports: %s)", dev.Name, port, portList(dev))}
	}
	return ports, nil
}

func (s *Service) validateRoCE(c RoCEChange) (host.Device, []int, error) {
	dev, err := s.deviceArg(c.Device)
	if err != nil {
		return host.Device{}, nil, err
	}
	switch c.Mode {
	case "", config.RoCEv1, config.RoCEv2:
	default:
		return dev, nil, &ArgError{"mode", fmt.Sprintf("%s is not a RoCE mode: use v1, v2, or \"\" to keep", config.QuoteName(string(c.Mode)))}
	}
	if c.TOS < -1 || c.TOS > 255 {
		return dev, nil, &ArgError{"tos", fmt.Sprintf("%d is out of range 0..255 (-1 keeps the TOS)", c.TOS)}
	}
	if c.Mode == "" && c.TOS == -1 {
		return dev, nil, &ArgError{"mode", "nothing to set: give a mode, a TOS, or both"}
	}
	ports, err := portsArg(dev, c.Port)
	if err != nil {
		return dev, nil, err
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

// argName quotes a name taken from a D-Bus argument for its error message,
// as the caller spelled it: the bus escapes the whole message once
// (dbusapi.Escape), so a byte quoted here too would come back as "\\xff"
// and could not be pasted back. Cut after 64 bytes, as config.QuoteName.
func argName(s string) string {
	const keep = 64
	if len(s) <= keep {
		return `"` + s + `"`
	}
	return `"` + s[:keep] + `"...`
}

// storable refuses, for a persisted change, a name the drop-in cannot hold:
// TOML is UTF-8 only, and a name with another byte (which the kernel
// allows, and D-Bus clients send escaped) would come back as another name.
func storable(persist bool, arg, name string) error {
	if persist && !utf8.ValidString(name) {
		return &ArgError{arg, fmt.Sprintf("%s is not UTF-8: it cannot be stored in the TOML drop-in; set it without persist", argName(name))}
	}
	return nil
}

// validLinkName applies the config file's rules for link names, so a name
// D-Bus accepts is one the persisted drop-in can hold.
func validLinkName(name string) error {
	if err := config.ValidLinkName(name); err != nil {
		return &ArgError{"name", err.Error()}
	}
	return nil
}

// device returns a device as last observed, or as read now when no pass
// has seen it yet (its uevent is still queued).
func (s *Service) device(name string) (host.Device, error) {
	if d, ok := s.rec.Device(name); ok {
		return d, nil
	}
	d, err := s.host.ReadDevice(name, host.DetailPolicy)
	if errors.Is(err, host.ErrNoDevice) {
		if !host.ValidDeviceName(name) {
			return host.Device{}, &ArgError{"device", fmt.Sprintf("%s cannot be an RDMA device name", argName(name))}
		}
		return host.Device{}, &NotFoundError{MissingDevice, "device", fmt.Sprintf("no RDMA device %s", argName(name))}
	}
	if err != nil {
		return host.Device{}, fmt.Errorf("service: %w", err)
	}
	return d, nil
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
		return &ArgError{"type", fmt.Sprintf("%s is not a soft RDMA link type: use rxe or siw", config.QuoteName(string(l.Type)))}
	}
	if err := config.ValidNetdevName(l.Netdev); err != nil {
		return &ArgError{"netdev", err.Error()}
	}
	if err := storable(persist, "name", l.Name); err != nil {
		return err
	}
	if err := storable(persist, "netdev", l.Netdev); err != nil {
		return err
	}
	if !s.host.NetdevExists(l.Netdev) {
		return &NotFoundError{MissingDevice, "netdev", fmt.Sprintf("no network interface %s", argName(l.Netdev))}
	}
	if s.parts.Links == nil {
		return fmt.Errorf("service: add link %s: this rdmad does not manage soft links", l.Name)
	}
	pol := s.PolicyInForce()
	for _, other := range pol.Links {
		if other.Name != l.Name && other.Type == l.Type && other.Netdev == l.Netdev {
			return &ArgError{"netdev", fmt.Sprintf("%s already has %s link %s (%s); the kernel allows one per netdev", l.Netdev, l.Type, argName(other.Name), other.Source)}
		}
	}
	if _, declared := pol.LinkSource(l.Name); !declared && s.host.Exists(host.ClassInfiniband+"/"+l.Name) {
		return &ArgError{"name", fmt.Sprintf("an RDMA device %s already exists and is not a link rdmad manages", argName(l.Name))}
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
	if err := validLinkName(name); err != nil {
		return err
	}
	if _, declared := s.PolicyInForce().LinkSource(name); !declared {
		return &NotFoundError{MissingLink, "name", fmt.Sprintf("no link %s is declared", argName(name))}
	}
	if persist {
		admin, err := config.AdminLinkSources(host.Files{}, s.configFile, name)
		if err != nil {
			return &ConfigError{Err: err}
		}
		if len(admin) > 0 {
			where := make([]string, len(admin))
			for i, pos := range admin {
				where[i] = pos.String()
			}
			return &ArgError{"name", fmt.Sprintf("link %s is declared at %s, which rdmad does not edit: remove it there (without persist, the link is deleted until rdmad restarts)",
				argName(name), strings.Join(where, " and "))}
		}
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
	if mode != config.NetnsShared && mode != config.NetnsExclusive {
		return &ArgError{"mode", fmt.Sprintf("%s is not a netns mode: use shared or exclusive", config.QuoteName(string(mode)))}
	}
	if s.parts.Netns == nil {
		return fmt.Errorf("service: set netns mode: this rdmad does not manage the RDMA netns mode")
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

// NextBootError says a persisted change holds but the running kernel
// refused to take it now: it applies at the next boot. Nothing was
// withdrawn.
type NextBootError struct{ Err error }

func (e *NextBootError) Error() string { return e.Err.Error() }
func (e *NextBootError) Unwrap() error { return e.Err }

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
}

// commit is the one path of every mutating call: change the declaration,
// reconcile once, check the call's own failures, and on failure withdraw
// the declaration, put back the kernel values the call had set, and
// reconcile again. It runs under runtime.mutation.
func (s *Service) commit(ctx context.Context, persist bool, c change) error {
	if s.stopping.Load() {
		return ErrStopping
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
