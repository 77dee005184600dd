package service

import (
	"context"
	"fmt"
	"slices"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/reconcile"
)

// QoSChange is a SetQoS request.
type QoSChange struct {
	Device  string
	Port    int             // 0: every Ethernet port of the device
	Trust   config.QoSTrust // "": keep
	PFC     []uint8         // priorities with PFC on when HasPFC; empty: PFC off
	HasPFC  bool            // false: keep
	Persist bool
}

// SetQoS changes the trust and/or PFC priorities of a device's Ethernet
// ports, with the same rules as SetRoCE: the declaration goes to the
// runtime overlay or rdmad's drop-in, one pass applies it, and a refusal
// (the netdev has no DCB, another agent owns it, the driver refused or did
// not keep the value) withdraws the declaration and has the QoS part put
// back what the call had already set.
func (s *Service) SetQoS(ctx context.Context, c QoSChange) error {
	s.runtime.mutation.Lock()
	defer s.runtime.mutation.Unlock()
	dev, targets, err := s.validateQoS(c)
	if err != nil {
		return err
	}
	if err := storable(c.Persist, "device", dev.Name); err != nil {
		return err
	}
	pfc := slices.Clone(c.PFC)
	slices.Sort(pfc)
	if c.HasPFC && pfc == nil {
		pfc = []uint8{}
	}
	call := reconcile.Call{}
	if c.HasPFC {
		call.Keys = append(call.Keys, config.KeyQoSPFC)
	}
	if c.Trust != "" {
		call.Keys = append(call.Keys, config.KeyQoSTrust)
	}
	for _, n := range targets {
		call.Subjects = append(call.Subjects, reconcile.PortSubject(dev.Name, n))
	}
	var all []int
	for _, p := range dev.Ports {
		all = append(all, p.Number)
	}
	rule := config.QoSRule{Selector: config.Selector{Device: config.Exact(dev.Name)}, Port: c.Port, Trust: c.Trust, HasPFC: c.HasPFC}
	if c.HasPFC {
		rule.PFC = pfc
	}
	return s.commit(ctx, c.Persist, change{
		runtime: func(o *Overlay) { o.QoS = config.MergeRule(o.QoS, config.Runtime(rule)) },
		persist: func(p *config.Persisted) { p.SetQoS(rule.Selector, c.Port, c.Trust, pfc, c.HasPFC) },
		forget:  func(o *Overlay) { o.QoS = config.ForgetRule(o.QoS, rule, all) },
		scope:   portScope(dev.Name, c.Port),
		call:    call,
	})
}

func (s *Service) validateQoS(c QoSChange) (host.Device, []int, error) {
	dev, err := s.deviceArg(c.Device)
	if err != nil {
		return host.Device{}, nil, err
	}
	rule := config.QoSRule{Selector: config.Selector{Device: config.Exact(dev.Name)}, Trust: c.Trust, PFC: c.PFC, HasPFC: c.HasPFC}
	if err := argProblems(rule.Validate(), "trust"); err != nil {
		return dev, nil, err
	}
	ports, err := portsArg(dev, c.Port)
	if err != nil {
		return dev, nil, err
	}
	var targets []int
	for _, n := range ports {
		switch t := dev.PortTransport(dev.Port(n)); t {
		case host.TransportRoCE, host.TransportIWARP:
			targets = append(targets, n)
		default:
			if c.Port != 0 {
				return dev, nil, &ArgError{"port", fmt.Sprintf("%s port %d is %s: QoS applies to the netdev of Ethernet ports", dev.Name, n, t)}
			}
		}
	}
	if len(targets) == 0 {
		return dev, nil, &ArgError{"device", fmt.Sprintf("%s has no Ethernet port", dev.Name)}
	}
	return dev, targets, nil
}
