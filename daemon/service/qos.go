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

// The values of the QoS part's actions (Old, New), as the service reads
// them without importing the part: the priorities a PFC value has on, the
// trust a trust value amounts to.
type (
	pfcValue   interface{ Priorities() []uint8 }
	trustValue interface{ TrustMode() config.QoSTrust }
)

// qosKinds are the kinds SetQoS sets, in the order a rollback undoes them.
var qosKinds = []reconcile.Kind{reconcile.KindQoSPFC, reconcile.KindQoSTrust}

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
	wanted := map[reconcile.Kind]any{}
	if c.HasPFC {
		wanted[reconcile.KindQoSPFC] = pfc
	}
	if c.Trust != "" {
		wanted[reconcile.KindQoSTrust] = c.Trust
	}
	var all []int
	for _, p := range dev.Ports {
		all = append(all, p.Number)
	}
	var scopePorts []int
	if c.Port != 0 {
		scopePorts = []int{c.Port}
	}
	return s.commit(ctx, c.Persist, change{
		runtime: func(o *Overlay) { o.setQoS(dev.Name, c.Port, c.Trust, pfc, c.HasPFC) },
		persist: func(p *config.Persisted) {
			p.SetQoS(config.Selector{Device: config.Exact(dev.Name)}, c.Port, c.Trust, pfc, c.HasPFC)
		},
		forget: func(o *Overlay) { o.forgetQoS(dev.Name, c.Port, all, c.Trust != "", c.HasPFC) },
		scope:  reconcile.Scope{Devices: map[string][]int{dev.Name: scopePorts}},
		failed: func(rep reconcile.Report) []reconcile.Action {
			return qosFailures(rep, dev.Name, dev.Driver == host.DriverMLX4, targets, wanted)
		},
		restore: func(ctx context.Context, rep reconcile.Report) ([]reconcile.Action, error) {
			return s.undo(ctx, rep, dev.Name, targets, qosKinds, wanted)
		},
	})
}

// qosFailures picks a SetQoS call's failures from its pass: the requested
// kinds on the targeted ports that failed, set another value than the
// requested one (a later rule wins), or were not set at all (the part said
// why in a not-applicable action: a VF, another owner of the netdev's DCB),
// and, for a call on an mlx4 device, a failed host-wide mlx4_en options
// file (two mlx4 ports asking different priorities). That file is no
// other device's business: a broken one must not refuse a call on mlx5.
func qosFailures(rep reconcile.Report, dev string, mlx4 bool, ports []int, wanted map[reconcile.Kind]any) []reconcile.Action {
	var out []reconcile.Action
	if a, ok := rep.Find(reconcile.HostSubject(), reconcile.KindQoSMLX4); mlx4 && ok && a.Status == reconcile.Failed {
		out = append(out, a)
	}
	for _, n := range ports {
		subject := reconcile.PortSubject(dev, n)
		for _, k := range qosKinds {
			want, asked := wanted[k]
			if !asked {
				continue
			}
			a, ok := rep.Find(subject, k)
			switch {
			case ok && a.Status == reconcile.Failed:
				out = append(out, a)
			case ok && !sameQoSValue(a.New, want):
				a.Status = reconcile.Failed
				a.Err = fmt.Errorf("service: the policy in force sets %s, not the requested %v", a.To, want)
				out = append(out, a)
			case !ok:
				why := fmt.Errorf("service: the pass did not set it: %s port %d went away or is not an Ethernet port", dev, n)
				for _, nk := range []reconcile.Kind{reconcile.KindQoSOwner, reconcile.KindQoSVF, reconcile.KindQoS} {
					if na, found := rep.Find(subject, nk); found && na.Err != nil {
						why = fmt.Errorf("service: not set: %w", na.Err)
						break
					}
				}
				out = append(out, reconcile.Action{Subject: subject, Kind: k, Status: reconcile.Failed, Err: why})
			}
		}
	}
	return out
}

func sameQoSValue(got, want any) bool {
	switch w := want.(type) {
	case []uint8:
		v, ok := got.(pfcValue)
		return ok && slices.Equal(v.Priorities(), w)
	case config.QoSTrust:
		v, ok := got.(trustValue)
		return ok && v.TrustMode() == w
	}
	return false
}

func (s *Service) validateQoS(c QoSChange) (host.Device, []int, error) {
	dev, err := s.deviceArg(c.Device)
	if err != nil {
		return host.Device{}, nil, err
	}
	switch c.Trust {
	case "", config.TrustDSCP, config.TrustPCP:
	default:
		return dev, nil, &ArgError{"trust", fmt.Sprintf("%s is not a QoS trust mode: use dscp, pcp, or \"\" to keep", config.QuoteName(string(c.Trust)))}
	}
	var seen uint8
	for _, p := range c.PFC {
		if p > 7 {
			return dev, nil, &ArgError{"pfc", fmt.Sprintf("priority %d is out of range 0..7", p)}
		}
		if seen&(1<<p) != 0 {
			return dev, nil, &ArgError{"pfc", fmt.Sprintf("priority %d is listed twice", p)}
		}
		seen |= 1 << p
	}
	if c.Trust == "" && !c.HasPFC {
		return dev, nil, &ArgError{"trust", "nothing to set: give a trust mode, PFC priorities, or both"}
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
