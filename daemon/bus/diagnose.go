package bus

import (
	"context"

	"github.com/godbus/dbus/v5"

	"github.com/rdmad/rdmad/daemon/doctor"
	"github.com/rdmad/rdmad/dbusapi"
)

// Diagnose is open to everyone, like reading properties: it changes
// nothing.
func (m *manager) Diagnose(msg dbus.Message) (string, *dbus.Error) {
	_, e := m.admit(msg, "Diagnose", call{})
	if e != nil {
		return "", e
	}
	release, e := m.s.enterReport(msg, "Diagnose")
	if e != nil {
		return "", e
	}
	defer release()
	encode := dbusapi.EncodeFindings
	if h := m.s.hook(); h != nil && h.encodeFindings != nil {
		encode = h.encodeFindings
	}
	doc, err := encode(Findings(doctor.Diagnose(context.Background(), m.s.diagnoseInput())))
	if err != nil {
		// busError escapes: the message may quote what a finding holds.
		return "", busError(err)
	}
	return doc, nil
}

// diagnoseInput is what doctor gets from the daemon (doctor.RunningInput):
// the bus's own state source is the snapshot.
func (s *Server) diagnoseInput() doctor.Input {
	return doctor.RunningInput(s.svc, s.state.Snapshot, s.state.Checkers())
}
