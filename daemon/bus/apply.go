package bus

import (
	"context"
	"slices"
	"sort"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/rdmad/rdmad/daemon/reconcile"
	"github.com/rdmad/rdmad/daemon/service"
	"github.com/rdmad/rdmad/dbusapi"
)

// The applier: marks from passes and declaration changes, coalesced, then
// converted and put in the object store off the pass.

// mark records what a pass changed, or (an empty change) that the
// declarations changed. It is all a pass does for the bus: it never
// blocks on the bus, the applier or the emitter.
func (s *Server) mark(ch reconcile.Change) {
	s.markMu.Lock()
	for _, n := range ch.Updated {
		s.marked[n] = struct{}{}
	}
	for _, n := range ch.Removed {
		s.marked[n] = struct{}{}
	}
	s.markedMgr = true // every pass changes LastReconcile
	s.markGen++
	if news := newsOf(ch); len(news) > 0 {
		var lost int
		s.news, lost = appendNews(s.news, news)
		s.newsLost += lost
	}
	s.markMu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Flush waits until everything marked before the call is served by
// property reads (the signals may follow), or ctx ends. Mutating methods
// call it before they reply, so a client that reads after the reply reads
// what its call did.
func (s *Server) Flush(ctx context.Context) error {
	s.markMu.Lock()
	want := s.markGen
	s.markMu.Unlock()
	for {
		s.markMu.Lock()
		got, ch := s.appliedGen, s.applied
		s.markMu.Unlock()
		if got >= want {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-s.stop:
			return nil
		}
	}
}

// flushTimeout bounds how long a method waits for its change to be
// served before it replies anyway.
const flushTimeout = 5 * time.Second

func (s *Server) flushForReply() {
	ctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
	defer cancel()
	if err := s.Flush(ctx); err != nil {
		s.log.Debug("reply sent before its change was published", "err", err)
	}
}

func (s *Server) runApplier() {
	for {
		select {
		case <-s.stop:
			return
		case <-s.wake:
		}
		s.apply()
	}
}

// apply takes the marks and brings the served objects up to date: only
// the devices marked are converted again, so a pass over one device costs
// the same on a host with a thousand. The state is read while no mutating
// call is under way (Daemon.BetweenCalls): a refused call's change, and its
// withdrawal, are never published.
func (s *Server) apply() {
	s.svc.BetweenCalls(func() { s.applyBetweenCalls(s.svc.PolicyStatus()) })
}

// applyBetweenCalls is apply's work, run between mutating calls: by the
// applier through Daemon.BetweenCalls, and at a mutating call's end with
// the policy status the service publishes there (Daemon.AfterEachCall),
// where it calls nothing of the service. applyMu makes it the only writer
// of s.objects.
func (s *Server) applyBetweenCalls(status service.PolicyStatus) {
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	var (
		gen     uint64
		names   []string
		mgr     bool
		news    []signal
		lost    int
		sum     reconcile.Summary
		states  []reconcile.DeviceState
		manager dbusapi.Manager
		devices []dbus.ObjectPath
	)
	s.markMu.Lock()
	gen, mgr = s.markGen, s.markedMgr
	if gen == s.appliedGen {
		s.markMu.Unlock()
		return // nothing marked since the last apply
	}
	names = make([]string, 0, len(s.marked))
	for n := range s.marked {
		names = append(names, n)
	}
	clear(s.marked)
	s.markedMgr = false
	news, lost = s.news, s.newsLost
	s.news, s.newsLost = nil, 0
	s.markMu.Unlock()
	sort.Strings(names)
	sum = s.state.Summary()
	states = s.state.DeviceStates(names)
	if mgr {
		manager = managerModel(status.Policy, status.ConfigError, status.InForce, sum, nil)
		manager.Disruptions, manager.Notifications = s.disruptions, s.notifications
	}
	s.mu.Lock()
	if !slices.Equal(sum.Devices, s.deviceNames) {
		// Escaping a thousand names on every pass would make one
		// device's event cost more on a larger host.
		s.deviceNames, s.devicePaths = sum.Devices, devicePaths(sum.Devices)
	}
	devices = s.devicePaths
	s.mu.Unlock()
	// Conversion happens outside every lock: readers are served the
	// objects as they were meanwhile.
	type built struct {
		name  string
		dev   *object
		ports []*object
		paths []dbus.ObjectPath
	}
	// The applier is the only writer of s.objects, so it reads them
	// without the lock: an object that did not change keeps its old
	// value (and pointer: no signal is due) without holding up readers.
	same := func(p dbus.ObjectPath, o *object) *object {
		if old := s.objects[p]; o.sameAs(old) {
			return old
		}
		return o
	}
	var out []built
	for i := range states {
		ds := &states[i]
		dev := deviceModel(ds)
		b := built{name: ds.Name}
		for _, p := range dev.Ports {
			pp := dbusapi.PortPath(ds.Name, int(p.Number))
			b.paths = append(b.paths, pp)
			b.ports = append(b.ports, same(pp, newObject(dbusapi.PortIface, p)))
		}
		dev.Ports = nil // published as objects of their own, after their device
		b.dev = same(dbusapi.DevicePath(ds.Name), newObject(dbusapi.DeviceIface, dev))
		out = append(out, b)
	}
	s.mu.Lock()
	if !s.closed {
		if mgr {
			manager.Devices = devices
			s.put(dbusapi.RootPath, newObject(dbusapi.ManagerIface, manager))
		}
		present := map[string]bool{}
		for _, b := range out {
			present[b.name] = true
			s.put(dbusapi.DevicePath(b.name), b.dev)
			for i, pp := range b.paths {
				s.put(pp, b.ports[i])
			}
			for _, old := range s.ports[b.name] {
				if !slices.Contains(b.paths, old) {
					s.remove(old)
				}
			}
			s.ports[b.name] = b.paths
		}
		for _, n := range names {
			if !present[n] {
				s.removeDevice(n)
			}
		}
	}
	// The news follow the state they came with: the emitter sends them
	// after the objects' signals. Before the name is taken nobody
	// follows rdmad, and they go.
	if s.named && !s.closed && len(news) > 0 {
		var more int
		s.unsentNews, more = appendNews(s.unsentNews, news)
		lost += more
	}
	wakeEmitter := s.named && (len(s.unsent) > 0 || len(s.unsentNews) > 0)
	s.mu.Unlock()
	if lost > 0 {
		s.log.Warn("the bus does not take rdmad's signals: the oldest SettingCorrected and SettingContested signals waiting were dropped", "dropped", lost)
	}
	s.markMu.Lock()
	if gen > s.appliedGen {
		s.appliedGen = gen
		close(s.applied)
		s.applied = make(chan struct{})
	}
	s.markMu.Unlock()
	if wakeEmitter {
		select {
		case s.emitWake <- struct{}{}:
		default:
		}
	}
}
