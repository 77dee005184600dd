package bus

import (
	"github.com/godbus/dbus/v5"
	"github.com/godbus/dbus/v5/introspect"

	"github.com/rdmad/rdmad/daemon/reconcile"
	"github.com/rdmad/rdmad/dbusapi"
)

// News: the signals of what happened rather than of what is.
// SettingCorrected says rdmad put back a setting another process changed,
// SettingContested that it stopped correcting one. A pass hands them over
// with its change (reconcile.Change.Corrected, Contested); the mark keeps
// them in order, the applier passes them on once the objects show the
// pass's state, and the emitter sends them after the state's signals,
// outside every lock, as it sends those: a client that reads the objects
// when it gets one reads the state that followed it.

// maxNews bounds the news waiting for the applier, and for the emitter: a
// bus that does not read keeps at most that many; the oldest go first
// (each correction is in the journal and counted in Port.Corrected too).
const maxNews = 4096

// The signals' names, on org.rdmad1.Manager at /org/rdmad1.
const (
	SignalSettingCorrected = "SettingCorrected"
	SignalSettingContested = "SettingContested"
)

// correctedSignal is SettingCorrected(o object, s setting, s found, s
// restored) for one correction.
func correctedSignal(c reconcile.Correction) signal {
	return signal{dbusapi.RootPath, dbusapi.ManagerIface + "." + SignalSettingCorrected,
		[]any{subjectPath(c.Subject), settingName(c.Setting), dbusapi.Escape(c.Found), dbusapi.Escape(c.Restored)}}
}

// contestedSignal is SettingContested(o object, s setting, u count) for a
// setting rdmad stopped correcting.
func contestedSignal(c reconcile.ContestStart) signal {
	return signal{dbusapi.RootPath, dbusapi.ManagerIface + "." + SignalSettingContested,
		[]any{subjectPath(c.Subject), settingName(c.Setting), uint32(max(c.Corrections, 0))}}
}

func settingName(st *reconcile.Setting) string {
	if st == nil {
		return ""
	}
	return st.Name
}

// subjectPath is the object a subject's news is about: its port or device;
// a soft link's RDMA device (named as the link); the Manager for the host
// and what has no object of its own.
func subjectPath(s reconcile.Subject) dbus.ObjectPath {
	switch s.Kind {
	case reconcile.SubjectPort:
		return dbusapi.PortPath(s.Device, s.Port)
	case reconcile.SubjectDevice:
		return dbusapi.DevicePath(s.Device)
	case reconcile.SubjectLink:
		return dbusapi.DevicePath(s.Link)
	}
	return dbusapi.RootPath
}

// newsOf is the signals of a pass's change, in its order: each
// correction, then each contest.
func newsOf(ch reconcile.Change) []signal {
	if len(ch.Corrected) == 0 && len(ch.Contested) == 0 {
		return nil
	}
	out := make([]signal, 0, len(ch.Corrected)+len(ch.Contested))
	for _, c := range ch.Corrected {
		out = append(out, correctedSignal(c))
	}
	for _, c := range ch.Contested {
		out = append(out, contestedSignal(c))
	}
	return out
}

// appendNews appends news to q, keeping the newest maxNews; it returns
// the queue and how many it dropped.
func appendNews(q, news []signal) ([]signal, int) {
	q = append(q, news...)
	if over := len(q) - maxNews; over > 0 {
		return append(q[:0:0], q[over:]...), over
	}
	return q, 0
}

// servedSignals is the introspection of the Manager's signals, from the
// signals as emitted; argument names from the contract.
func servedSignals() []introspect.Signal {
	ci := dbusapi.TheContract().Interface(dbusapi.ManagerIface)
	var out []introspect.Signal
	for _, sig := range []signal{correctedSignal(reconcile.Correction{}), contestedSignal(reconcile.ContestStart{})} {
		name := sig.name[len(dbusapi.ManagerIface)+1:]
		s := introspect.Signal{Name: name}
		var cm *dbusapi.Member
		if ci != nil {
			cm = ci.Member("signal", name)
		}
		for i, a := range sig.args {
			arg := introspect.Arg{Type: dbus.SignatureOf(a).String()}
			if cm != nil && len(cm.Args) == len(sig.args) {
				arg.Name = cm.Args[i].Name
			}
			s.Args = append(s.Args, arg)
		}
		out = append(out, s)
	}
	return out
}
