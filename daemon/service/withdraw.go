package service

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/config/value"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/reconcile"
)

// WithdrawKind is the kind of declaration Withdraw removes.
type WithdrawKind string

const (
	WithdrawRoCE  WithdrawKind = "roce"  // a device's (port's) RoCE mode and TOS
	WithdrawQoS   WithdrawKind = "qos"   // a device's (port's) QoS settings
	WithdrawLink  WithdrawKind = "link"  // a soft link added or deleted
	WithdrawNetns WithdrawKind = "netns" // the RDMA netns mode
)

// Withdrawal is a Withdraw request.
type Withdrawal struct {
	Kind WithdrawKind
	// Name is the RDMA device (roce, qos) or the link (link); "" for
	// netns.
	Name string
	// Port is the port (roce, qos), 0 for every port; 0 for link and
	// netns.
	Port int
	// Persist also withdraws what rdmad's drop-in declares; without it
	// only the runtime declaration goes.
	Persist bool
}

// withdrawal is a validated Withdrawal: how it edits the overlay and
// rdmad's drop-in, and what the pass after it reads again.
type withdrawal struct {
	overlay   func(*Overlay)
	persisted func(*config.Persisted)
	scope     reconcile.Scope
}

// Withdraw removes a declaration made over D-Bus, at runtime or (with
// Persist) also in rdmad's drop-in, so the administrator's files decide
// again, and runs one pass. It is always allowed by [api] changes: it
// hands the host back to the files. Nothing declared over D-Bus for an
// existing device, port or declared link is not an error; a name that
// exists nowhere is a *NotFoundError, and a runtime withdrawal of what
// only rdmad's drop-in declares an *ArgError saying to persist it.
func (s *Service) Withdraw(ctx context.Context, w Withdrawal) error {
	s.runtime.mutation.Lock()
	defer s.runtime.mutation.Unlock()
	plan, err := s.planWithdraw(w)
	if err != nil {
		return err
	}
	return s.commit(ctx, w.Persist, change{
		runtime: plan.overlay,
		persist: plan.persisted,
		forget:  plan.overlay,
		scope:   plan.scope,
		// No call: what the files declare again is not this call's to hold.
		withdraws: true,
	})
}

// CheckWithdraw validates a Withdraw request (see CheckSetRoCE).
func (s *Service) CheckWithdraw(w Withdrawal) error {
	_, err := s.planWithdraw(w)
	return err
}

func (s *Service) planWithdraw(w Withdrawal) (withdrawal, error) {
	var plan withdrawal
	switch w.Kind {
	case WithdrawRoCE, WithdrawQoS:
		return s.planWithdrawPort(w)
	case WithdrawLink:
		if err := validLinkName(w.Name); err != nil {
			return plan, err
		}
		if w.Port != 0 {
			return plan, &ArgError{"port", fmt.Sprintf("%d: a link has no ports; give 0", w.Port)}
		}
		plan.overlay = func(o *Overlay) { o.forgetLink(w.Name) }
		plan.persisted = func(p *config.Persisted) { p.RemoveLink(w.Name) }
		plan.scope = reconcile.Scope{Devices: map[string][]int{w.Name: nil}}
		if _, declared := s.PolicyInForce().LinkSource(w.Name); !declared {
			if changed, _ := s.withdrawChanges(plan, w.Persist); !changed {
				return plan, &NotFoundError{MissingLink, "device", fmt.Sprintf("no link %s is declared", argName(w.Name))}
			}
		}
	case WithdrawNetns:
		if w.Name != "" {
			return plan, &ArgError{"device", fmt.Sprintf("%s: the netns mode is host-wide; give \"\"", argName(w.Name))}
		}
		if w.Port != 0 {
			return plan, &ArgError{"port", fmt.Sprintf("%d: the netns mode is host-wide; give 0", w.Port)}
		}
		plan.overlay = func(o *Overlay) { o.Netns = config.NetnsUnmanaged }
		plan.persisted = func(p *config.Persisted) { p.Netns = config.NetnsUnmanaged }
	default:
		return plan, &ArgError{"kind", fmt.Sprintf("%s is not a kind of declaration: use roce, qos, link or netns", value.Quote(string(w.Kind)))}
	}
	return plan, s.persistHint(plan, w)
}

// planWithdrawPort plans withdrawing a device's RoCE or QoS declarations
// on one port or all of them. The device may be gone (a runtime
// declaration outlives it); a name no device has and nothing declares is
// NoSuchDevice.
func (s *Service) planWithdrawPort(w Withdrawal) (withdrawal, error) {
	var plan withdrawal
	if !host.ValidDeviceName(w.Name) {
		return plan, &ArgError{"device", fmt.Sprintf("%s cannot be an RDMA device name", argName(w.Name))}
	}
	if w.Port < 0 {
		return plan, &ArgError{"port", fmt.Sprintf("%d is not a port number", w.Port)}
	}
	dev, err := s.device(w.Name)
	var missing *NotFoundError
	exists := err == nil
	if err != nil && !errors.As(err, &missing) {
		return plan, err
	}
	var ports []int
	for _, p := range dev.Ports {
		ports = append(ports, p.Number)
	}
	sel := config.Selector{Device: config.Exact(w.Name)}
	if w.Kind == WithdrawRoCE {
		plan.overlay = func(o *Overlay) { o.RoCE = config.WithdrawRoCE(o.RoCE, sel, w.Port, ports) }
		plan.persisted = func(p *config.Persisted) { p.RoCE = config.WithdrawRoCE(p.RoCE, sel, w.Port, ports) }
	} else {
		plan.overlay = func(o *Overlay) { o.QoS = config.WithdrawQoS(o.QoS, sel, w.Port, ports) }
		plan.persisted = func(p *config.Persisted) { p.QoS = config.WithdrawQoS(p.QoS, sel, w.Port, ports) }
	}
	if exists {
		plan.scope = reconcile.Scope{Devices: map[string][]int{w.Name: nil}}
	}
	changed, err := s.withdrawChanges(plan, w.Persist)
	if err != nil {
		return plan, err
	}
	hasPort := w.Port == 0 || len(ports) == 0
	for _, n := range ports {
		hasPort = hasPort || n == w.Port
	}
	switch {
	case !exists && w.Port != 0 && changed:
		// A rule for every port of a device that is gone cannot be kept
		// for its other ports: nobody knows them.
		if everyPort := s.declaresEveryPort(w, sel); everyPort {
			return plan, &NotFoundError{MissingDevice, "device", fmt.Sprintf("no RDMA device %s now, so the ports a declaration for all its ports still covers are unknown: withdraw port 0", argName(w.Name))}
		}
	case !exists && !changed:
		return plan, missing
	case !hasPort && !changed:
		return plan, &NotFoundError{MissingPort, "port", fmt.Sprintf("%s has no port %d (ports: %s)", dev.Name, w.Port, portList(dev))}
	}
	return plan, s.persistHint(plan, w)
}

// declaresEveryPort reports whether the overlay or rdmad's drop-in has a
// rule for every port of sel's device.
func (s *Service) declaresEveryPort(w Withdrawal, sel config.Selector) bool {
	o := s.RuntimeOverlay()
	p, _ := config.LoadPersisted(s.files(), s.DropInDir())
	if w.Kind == WithdrawRoCE {
		for _, r := range append(o.RoCE, p.RoCE...) {
			if r.Selector == sel && r.Port == 0 {
				return true
			}
		}
		return false
	}
	for _, r := range append(o.QoS, p.QoS...) {
		if r.Selector == sel && r.Port == 0 {
			return true
		}
	}
	return false
}

// withdrawChanges reports whether plan removes anything: from the overlay,
// and with persist from rdmad's drop-in too.
func (s *Service) withdrawChanges(plan withdrawal, persist bool) (bool, error) {
	o := s.RuntimeOverlay()
	next := o.clone()
	plan.overlay(&next)
	if !sameOverlay(o, next) {
		return true, nil
	}
	if !persist {
		return false, nil
	}
	return s.persistedChanges(plan)
}

// persistedChanges reports whether plan removes anything from rdmad's
// drop-in.
func (s *Service) persistedChanges(plan withdrawal) (bool, error) {
	p, err := config.LoadPersisted(s.files(), s.DropInDir())
	if err != nil {
		return false, &ConfigError{Err: err}
	}
	next := config.Persisted{RoCE: slices.Clone(p.RoCE), QoS: slices.Clone(p.QoS), Links: slices.Clone(p.Links), Netns: p.Netns}
	plan.persisted(&next)
	return !bytes.Equal(p.Render(), next.Render()), nil
}

// sameOverlay reports whether two overlays declare the same (an empty
// list and none are the same).
func sameOverlay(a, b Overlay) bool {
	return sameList(a.RoCE, b.RoCE) && sameList(a.QoS, b.QoS) && sameList(a.Links, b.Links) &&
		sameList(a.DeletedLinks, b.DeletedLinks) && a.Netns == b.Netns
}

func sameList[T any](a, b []T) bool {
	return len(a) == len(b) && (len(a) == 0 || reflect.DeepEqual(a, b))
}

// persistHint refuses a runtime withdrawal that would remove nothing while
// rdmad's drop-in declares what the caller means: it would do nothing, and
// the caller would think the files decide again.
func (s *Service) persistHint(plan withdrawal, w Withdrawal) error {
	if w.Persist {
		return nil
	}
	if changed, _ := s.withdrawChanges(plan, false); changed {
		return nil
	}
	if inDropIn, err := s.persistedChanges(plan); err == nil && inDropIn {
		return &ArgError{"persist", fmt.Sprintf("nothing is declared at runtime there; rdmad's drop-in %s declares it: withdraw it with persist", config.PersistedPath(s.DropInDir()))}
	}
	return nil
}
