package doctor

import (
	"errors"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/health"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/reconcile"
)

// Running is what doctor reads of a running rdmad (the service): the bus's
// Diagnose and the metrics textfile's findings both take their input
// through RunningInput.
type Running interface {
	Host() *host.Host
	// BetweenCalls runs fn while no mutating call is between its change and
	// its outcome.
	BetweenCalls(fn func())
	PolicyInForce() *config.Policy
	ConfigError() error
	InForce() config.InForce
	// Health is the counter and link history (nil: none is kept).
	Health() *health.Monitor
}

// RunningInput is doctor's input from a running rdmad: the observed state
// with every setting's record (no second walk of sysfs), the policy in
// force and the config error read together with it while no call is under
// way, each port's standing failures, the parts' own checks, the counter
// and link history, and (on the real host only: under --root the netdevs
// are a fixture's) the netdevs' addresses.
func RunningInput(d Running, snapshot func() reconcile.State, checks []reconcile.Checker) Input {
	var st reconcile.State
	in := Input{Host: d.Host(), Errors: map[PortRef]string{}, State: &st, Checks: checks}
	d.BetweenCalls(func() {
		st = snapshot()
		in.Policy, in.ConfigError, in.InForce = d.PolicyInForce(), d.ConfigError(), d.InForce()
	})
	if m := d.Health(); m != nil {
		v := m.View()
		in.Health = &v
	}
	if in.Host != nil && in.Host.Root == "/" {
		in.Addrs = NetlinkAddrs{}
	}
	in.Devices = make([]host.Device, 0, len(st.Devices))
	for i := range st.Devices {
		dev := &st.Devices[i]
		in.Devices = append(in.Devices, dev.Device)
		for _, p := range dev.Ports {
			var errs []error
			for _, a := range p.Failures {
				errs = append(errs, a.Err)
			}
			if err := errors.Join(errs...); err != nil {
				in.Errors[PortRef{Device: dev.Name, Port: p.Number}] = err.Error()
			}
		}
	}
	return in
}
