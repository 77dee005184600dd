package bus

import (
	"context"
	"errors"

	"github.com/godbus/dbus/v5"

	"github.com/rdmad/rdmad/daemon/doctor"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/reconcile"
	"github.com/rdmad/rdmad/dbusapi"
)

// Diagnose is open to everyone, like reading properties: it changes
// nothing.
func (m *manager) Diagnose(msg dbus.Message) (string, *dbus.Error) {
	if e := m.checkCall(msg, "Diagnose", ""); e != nil {
		return "", e
	}
	release, e := m.s.enterReport("Diagnose")
	if e != nil {
		return "", e
	}
	defer release()
	encode := dbusapi.EncodeFindings
	if h := m.s.hook(); h != nil && h.encodeFindings != nil {
		encode = h.encodeFindings
	}
	doc, err := encode(doctor.Diagnose(context.Background(), m.s.diagnoseInput()))
	if err != nil {
		// busError escapes: the message may quote what a finding holds.
		return "", busError(err)
	}
	return doc, nil
}

// diagnoseInput is what doctor gets from the daemon: the observed devices
// (no second walk of sysfs), the policy in force, the config error, each
// port's standing failures, and the kernel's netns mode.
func (s *Server) diagnoseInput() doctor.Input {
	svc := s.svc
	var st reconcile.State
	in := doctor.Input{Host: svc.Host(), Errors: map[doctor.PortRef]string{}}
	svc.Settled(func() {
		st = s.state.Snapshot()
		in.Policy, in.ConfigError = svc.PolicyInForce(), svc.ConfigError()
	})
	in.Devices = make([]host.Device, 0, len(st.Devices))
	if k := svc.NetnsKernel(); k != nil {
		in.Netns = k
	}
	if r := svc.DCB(); r != nil {
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
