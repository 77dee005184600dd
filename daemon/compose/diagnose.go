package compose

import (
	"context"
	"errors"

	"github.com/rdmad/rdmad/daemon/doctor"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/reconcile"
	"github.com/rdmad/rdmad/daemon/service"
	"github.com/rdmad/rdmad/dbusapi"
)

// DiagnoseInput is what doctor gets from the daemon for the metrics
// textfile: the observed devices (no second walk of sysfs), the policy in
// force and the config error read together while no call is between its
// change and its outcome (as the bus's Diagnose reads them), each port's
// standing failures, and the kernel's netns mode and DCB.
func DiagnoseInput(s *service.Service) doctor.Input {
	var st reconcile.State
	in := doctor.Input{Host: s.Host(), Errors: map[doctor.PortRef]string{}}
	s.Settled(func() {
		st = s.Reconciler().Snapshot()
		in.Policy, in.ConfigError = s.PolicyInForce(), s.ConfigError()
	})
	in.Devices = make([]host.Device, 0, len(st.Devices))
	if k := s.NetnsKernel(); k != nil {
		in.Netns = k
	}
	if r := s.DCB(); r != nil {
		in.DCB = r
	}
	for i := range st.Devices {
		d := &st.Devices[i]
		in.Devices = append(in.Devices, d.Device)
		for _, p := range d.Ports {
			var errs []error
			for _, a := range p.Failures {
				errs = append(errs, a.Err)
			}
			if err := errors.Join(errs...); err != nil {
				in.Errors[doctor.PortRef{Device: d.Name, Port: p.Number}] = err.Error()
			}
		}
	}
	return in
}

// Diagnose runs doctor on the daemon's view of the host: the findings of
// the metrics textfile (service.Options.Findings).
func Diagnose(s *service.Service) []dbusapi.Finding {
	return doctor.Diagnose(context.Background(), DiagnoseInput(s))
}
