package reconcile

import (
	"maps"
	"time"
)

// FoundGoneAfter is how long the entries of a device that is gone are
// kept: a device unregistered (unplugged, a VF destroyed), or that a full
// pass does not find (it went while rdmad was stopped), has its entries
// dropped once it has been gone that long, so found.json stays the size of
// the host however many devices come and go in a boot. A device that
// comes back before (a driver reload, an mlx4 port type switch, which
// re-registers it) keeps them: what it had before rdmad's first change is
// still what a removed declaration puts back. Its RoCE and DCB values were
// reset by the kernel then anyway.
const FoundGoneAfter = 10 * time.Minute

// dropGone notes which devices the entries name are gone or back, and
// drops the entries of those gone for FoundGoneAfter (under the pass's
// lock: passes call it one at a time).
func (r *Reconciler) dropGone(res *passResult, sc *foundScope) {
	f := r.found
	now := r.drift.now()
	// The identities, from the cache, before f.mu: Snapshot takes f.mu
	// under the state's lock.
	identity := func(name string) (string, bool) {
		if id, ok := res.unregistered[name]; ok {
			return id, true
		}
		if d, ok := r.cachedDevice(name); ok {
			return DeviceIdentity(&d), true
		}
		return "", false
	}
	var goneIDs []string
	for n := range res.gone {
		if id, ok := identity(n); ok {
			if _, back := sc.byID[id]; !back {
				goneIDs = append(goneIDs, id)
			}
		}
	}
	var present map[string]string
	if res.full {
		present = maps.Clone(sc.byID)
		for n := range res.readErrs {
			if id, ok := identity(n); ok {
				present[id] = n
			}
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for id := range sc.byID {
		delete(f.gone, id) // read in this pass: here
	}
	for _, id := range goneIDs {
		if _, known := f.gone[id]; !known {
			f.gone[id] = now
		}
	}
	if present != nil {
		// Every device present was listed: one the entries name that this
		// pass did not read (nor fail to read) went while rdmad was stopped.
		for _, e := range f.entries {
			if _, here := present[e.Device]; e.Device != "" && !here {
				if _, known := f.gone[e.Device]; !known {
					f.gone[e.Device] = now
				}
			}
		}
	}
	if len(f.gone) == 0 {
		return
	}
	dropped := 0
	for _, m := range []map[string]*FoundEntry{f.entries, f.unrestored} {
		for k, e := range m {
			if t, ok := f.gone[e.Device]; ok && e.Device != "" && now.Sub(t) >= FoundGoneAfter {
				delete(m, k)
				dropped++
			}
		}
	}
	for id, t := range f.gone {
		if now.Sub(t) >= FoundGoneAfter {
			delete(f.gone, id)
		}
	}
	if dropped > 0 {
		f.dirty, f.full = true, false
		r.log.Info("dropped the values found of devices gone", "entries", dropped, "after", FoundGoneAfter)
	}
}

// evictGone makes room at MaxFoundEntries by dropping an entry of a device
// that is gone (under f.mu): a device here this boot comes before one that
// went. It reports whether it did.
func (f *Found) evictGone() bool {
	if len(f.gone) == 0 {
		return false
	}
	for k, e := range f.entries {
		if _, gone := f.gone[e.Device]; gone && e.Device != "" {
			delete(f.entries, k)
			return true
		}
	}
	return false
}
