package reconcile

import "github.com/rdmad/rdmad/daemon/host"

// FoundText is the value rdmad found for setting st of subject s before
// its first change this boot, as shown: what removing the declaration
// puts back (a plan says so). dev is the subject's device, nil for a
// subject that is none's. ok is false when nothing is recorded.
func (r *Reconciler) FoundText(s Subject, st *Setting, dev *host.Device) (text string, ok bool) {
	if r.found == nil || st == nil {
		return "", false
	}
	k := FoundEntry{Subject: s, Setting: st.Name}
	if s.Kind == SubjectPort || s.Kind == SubjectDevice {
		if dev == nil {
			return "", false
		}
		k.Device = DeviceIdentity(dev)
	}
	r.found.mu.Lock()
	defer r.found.mu.Unlock()
	e, ok := r.found.entries[k.key()]
	if !ok {
		return "", false
	}
	return e.Text, true
}
