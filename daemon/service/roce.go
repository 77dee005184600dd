package service

import (
	"context"

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
// when a requested setting does not hold afterwards on a targeted port
// (the kernel refused it, or the device's configfs rdma_cm cannot be
// reached); failures of other settings, ports or devices (an old
// declaration the kernel keeps refusing) are not this call's.
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
	call := reconcile.Call{}
	if c.Mode != "" {
		call.Keys = append(call.Keys, config.KeyRoCEMode)
	}
	if tos != nil {
		call.Keys = append(call.Keys, config.KeyRoCETOS)
	}
	var all []int
	for _, n := range ports {
		if dev.PortTransport(dev.Port(n)) == host.TransportRoCE {
			call.Subjects = append(call.Subjects, reconcile.PortSubject(dev.Name, n))
		}
	}
	for _, p := range dev.Ports {
		all = append(all, p.Number)
	}
	rule := config.RoCERule{Selector: config.Selector{Device: config.Exact(dev.Name)}, Port: c.Port, Mode: c.Mode, TOS: tos}
	return s.commit(ctx, c.Persist, change{
		runtime: func(o *Overlay) { o.RoCE = config.MergeRule(o.RoCE, config.Runtime(rule)) },
		persist: func(p *config.Persisted) { p.SetRoCE(rule.Selector, c.Port, c.Mode, tos) },
		forget:  func(o *Overlay) { o.RoCE = config.ForgetRule(o.RoCE, rule, all) },
		scope:   portScope(dev.Name, c.Port),
		call:    call,
	})
}

// portScope is the pass a call on a device's port (0: every port) runs:
// that port read again, or the whole device.
func portScope(dev string, port int) reconcile.Scope {
	var ports []int // nil: the whole device
	if port != 0 {
		ports = []int{port}
	}
	return reconcile.Scope{Devices: map[string][]int{dev: ports}}
}
