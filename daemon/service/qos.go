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
	dev, targets, err := s.qosTargets(c.Device, c.Port)
	if err != nil {
		return dev, nil, err
	}
	rule := config.QoSRule{Selector: config.Selector{Device: config.Exact(dev.Name)}, Trust: c.Trust, PFC: c.PFC, HasPFC: c.HasPFC}
	if err := argProblems(rule.Validate(), "trust"); err != nil {
		return dev, nil, err
	}
	return dev, targets, nil
}

// qosTargets is the device a QoS call names and its Ethernet ports among
// port (0: all of them).
func (s *Service) qosTargets(device string, port int) (host.Device, []int, error) {
	dev, err := s.deviceArg(device)
	if err != nil {
		return host.Device{}, nil, err
	}
	ports, err := portsArg(dev, port)
	if err != nil {
		return dev, nil, err
	}
	var targets []int
	for _, n := range ports {
		switch t := dev.PortTransport(dev.Port(n)); t {
		case host.TransportRoCE, host.TransportIWARP:
			targets = append(targets, n)
		default:
			if port != 0 {
				return dev, nil, &ArgError{"port", fmt.Sprintf("%s port %d is %s: QoS applies to the netdev of Ethernet ports", dev.Name, n, t)}
			}
		}
	}
	if len(targets) == 0 {
		return dev, nil, &ArgError{"device", fmt.Sprintf("%s has no Ethernet port", dev.Name)}
	}
	return dev, targets, nil
}

// QoSSettingsChange is a SetQoSSettings request: any [[qos]] settings,
// as a rule declares them (config.DecodeQoSSettings validated them).
type QoSSettingsChange struct {
	Device   string
	Port     int // 0: every Ethernet port of the device
	Settings config.QoSRule
	Persist  bool
}

// SetQoSSettings declares [[qos]] settings for a device's Ethernet ports
// as SetQoS does for trust and PFC: one path, one pass, and a refusal of
// any setting withdraws the declaration and puts back what the call set.
func (s *Service) SetQoSSettings(ctx context.Context, c QoSSettingsChange) error {
	s.runtime.mutation.Lock()
	defer s.runtime.mutation.Unlock()
	dev, targets, err := s.validateQoSSettings(c)
	if err != nil {
		return err
	}
	call := reconcile.Call{Keys: c.Settings.Keys()}
	for _, n := range targets {
		call.Subjects = append(call.Subjects, reconcile.PortSubject(dev.Name, n))
	}
	var all []int
	for _, p := range dev.Ports {
		all = append(all, p.Number)
	}
	rule := c.Settings
	rule.Selector, rule.Port, rule.Source = config.Selector{Device: config.Exact(dev.Name)}, c.Port, config.Position{}
	return s.commit(ctx, c.Persist, change{
		runtime: func(o *Overlay) { o.QoS = config.MergeRule(o.QoS, config.Runtime(rule)) },
		persist: func(p *config.Persisted) { p.QoS = config.MergeRule(p.QoS, rule) },
		forget:  func(o *Overlay) { o.QoS = config.ForgetRule(o.QoS, rule, all) },
		scope:   portScope(dev.Name, c.Port),
		call:    call,
	})
}

// validateQoSSettings is the device and ports of a SetQoSSettings
// request, with at least one setting and a device name the drop-in can
// hold. The settings' values were validated as they were decoded
// (config.DecodeQoSSettings); the rule they make is checked again as a
// file's is.
func (s *Service) validateQoSSettings(c QoSSettingsChange) (host.Device, []int, error) {
	if len(c.Settings.Keys()) == 0 {
		return host.Device{}, nil, &ArgError{"settings", "nothing to set: give at least one [[qos]] setting"}
	}
	dev, targets, err := s.qosTargets(c.Device, c.Port)
	if err != nil {
		return dev, nil, err
	}
	rule := c.Settings
	rule.Selector = config.Selector{Device: config.Exact(dev.Name)}
	if ps := rule.Validate(); len(ps) > 0 {
		msg := ps[0].Err.Error()
		if ps[0].Key != "" {
			msg = ps[0].Key + ": " + msg
		}
		return dev, nil, &ArgError{"settings", msg}
	}
	if err := storable(c.Persist, "device", dev.Name); err != nil {
		return dev, nil, err
	}
	return dev, targets, nil
}
