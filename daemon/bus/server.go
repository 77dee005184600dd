// Package bus is the daemon's side of the D-Bus API: it exports the
// service's state as the objects of org.rdmad1.xml (dbusapi holds the
// contract, the model and the client), emits their signals, and serves the
// org.rdmad1.Manager methods behind authorization.
//
// Publishing never holds up a pass. A pass only marks the devices it
// changed (OnChange); the applier goroutine drains that coalescing set,
// converts those devices and updates the served objects; the emitter
// goroutine compares the served objects with what the signals said last
// and emits the difference. A stopped bus blocks only the emitter: passes
// run, property reads are served from the objects, and the marks keep
// coalescing, so once the bus moves again the signals describe the final
// state. godbus dials, encodes and sends every message.
package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"reflect"
	"runtime/debug"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/rdmad/rdmad/daemon/reconcile"
	"github.com/rdmad/rdmad/dbusapi"
)

const (
	propsIface      = "org.freedesktop.DBus.Properties"
	introIface      = "org.freedesktop.DBus.Introspectable"
	objMgrIface     = "org.freedesktop.DBus.ObjectManager"
	peerIface       = "org.freedesktop.DBus.Peer"
	errUnknownIface = "org.freedesktop.DBus.Error.UnknownInterface"
	errUnknownProp  = "org.freedesktop.DBus.Error.UnknownProperty"
	errReadOnly     = "org.freedesktop.DBus.Error.PropertyReadOnly"
)

// props is one object's properties by interface, as GetManagedObjects
// carries them.
type props = map[string]map[string]dbus.Variant

// object is one published object: its interface and its property map,
// built once when the object changes and never modified afterwards (godbus
// encodes replies that share it after the handler returned).
type object struct {
	iface string
	entry props // {iface: properties}
}

func (o *object) props() map[string]dbus.Variant { return o.entry[o.iface] }

func newObject(iface string, model any) *object {
	return &object{iface: iface, entry: props{iface: dbusapi.ToProps(model)}}
}

// Server exports the service on a bus connection.
type Server struct {
	conn  *dbus.Conn
	state State
	svc   Daemon
	auth  Authorizer
	log   *slog.Logger

	// Marks: what passes and declaration changes asked to publish, not
	// yet applied. A set, so a stuck applier or bus costs its size at
	// most, whatever the number of passes.
	markMu     sync.Mutex
	marked     map[string]struct{} // device names
	markedMgr  bool
	markGen    uint64        // counts marks
	appliedGen uint64        // markGen of the last applied marks
	applied    chan struct{} // closed when appliedGen moves
	wake       chan struct{} // the applier
	emitWake   chan struct{} // the emitter
	stop       chan struct{}
	stopOnce   sync.Once

	applyMu sync.Mutex // one apply at a time: the applier or a call's end

	mu      sync.Mutex
	objects map[dbus.ObjectPath]*object
	// children counts, per node, the objects below each child element, so
	// Introspect lists a node's children without walking every object.
	children map[dbus.ObjectPath]map[string]int
	ports    map[string][]dbus.ObjectPath // device name -> its port objects
	// deviceNames and devicePaths are the Manager's Devices, kept while
	// the set of devices does not change.
	deviceNames []string
	devicePaths []dbus.ObjectPath
	// told is what the signals said of each object (once the name is
	// taken); unsent are the paths whose served object may differ from it.
	told   map[dbus.ObjectPath]*object
	unsent map[dbus.ObjectPath]struct{}
	closed bool
	// named is set once the well-known name is taken: before that nobody
	// can follow rdmad's objects, so the first export emits no signals
	// (on a host with a thousand devices, thousands of InterfacesAdded).
	named bool

	reclaim reclaimer                  // returns a big reply's garbage to the system
	reports atomic.Pointer[reportGate] // Describe and Diagnose (reports.go)
	hooks   atomic.Pointer[testHooks]  // nil in production
}

// testHooks are seams for tests (export_test.go).
type testHooks struct {
	// afterSnapshot runs in Describe right after it took the state it
	// describes: a pass started there must not show in the answer.
	afterSnapshot func()
	// inReport runs in Describe and Diagnose while they hold a report slot.
	inReport func()
	// encodeFindings replaces dbusapi.EncodeFindings in Diagnose.
	encodeFindings func([]dbusapi.Finding) (string, error)
}

// New exports the root object and every device and port of the current
// state on conn and follows state and svc from then on. It does not request
// the bus name: call RequestName when the objects are in place.
func New(conn *dbus.Conn, state State, svc Daemon, auth Authorizer, log *slog.Logger) (*Server, error) {
	if log == nil {
		log = slog.Default()
	}
	s := &Server{conn: conn, state: state, svc: svc, auth: auth, log: log,
		marked: map[string]struct{}{}, applied: make(chan struct{}),
		wake: make(chan struct{}, 1), emitWake: make(chan struct{}, 1), stop: make(chan struct{}),
		objects: map[dbus.ObjectPath]*object{}, children: map[dbus.ObjectPath]map[string]int{},
		ports: map[string][]dbus.ObjectPath{}, unsent: map[dbus.ObjectPath]struct{}{}}
	s.reports.Store(newReportGate(reportSlots, reportWaiters, reportWait))
	s.reclaim.delay = reclaimDelay
	m := &manager{s: s}
	if err := conn.ExportMethodTable(m.methods(), dbusapi.RootPath, dbusapi.ManagerIface); err != nil {
		return nil, fmt.Errorf("bus: export manager: %w", err)
	}
	if err := conn.ExportMethodTable(map[string]any{"GetManagedObjects": s.getManagedObjects}, dbusapi.RootPath, objMgrIface); err != nil {
		return nil, fmt.Errorf("bus: export object manager: %w", err)
	}
	// Properties and Introspectable answer for the whole tree from the
	// objects, by the path of the call: nothing is exported per object.
	if err := conn.ExportSubtreeMethodTable(map[string]any{"Get": s.get, "GetAll": s.getAll, "Set": s.set}, dbusapi.RootPath, propsIface); err != nil {
		return nil, fmt.Errorf("bus: export properties: %w", err)
	}
	if err := conn.ExportSubtreeMethodTable(map[string]any{"Introspect": s.introspectCall}, dbusapi.RootPath, introIface); err != nil {
		return nil, fmt.Errorf("bus: export introspection: %w", err)
	}
	s.mark(reconcile.Change{Updated: state.Summary().Devices})
	s.apply()
	state.OnChange(s.mark)
	// A mutating call's outcome is served before the next call starts,
	// so its reply (after Flush) does not wait behind the calls queued
	// after it for the applier's turn.
	svc.OnSettled(s.applySettled)
	// A config change (reload, runtime change) changes the Manager's
	// declarations; the pass it queues updates the devices.
	svc.OnConfigChange(func() { s.mark(reconcile.Change{}) })
	go s.runApplier()
	go s.runEmitter()
	return s, nil
}

// RequestName takes the well-known name; it fails when another process owns
// it (a second rdmad on the same bus). Signals start from the objects
// served at that moment.
func (s *Server) RequestName(name string) error {
	// A client activated by the name must find the whole tree: what the
	// passes so far marked is served first. Converting a thousand devices
	// leaves megabytes of garbage, handed back before the daemon idles.
	if err := s.Flush(context.Background()); err != nil {
		return fmt.Errorf("bus: publish before taking %s: %w", name, err)
	}
	debug.FreeOSMemory()
	reply, err := s.conn.RequestName(name, dbus.NameFlagDoNotQueue)
	if err != nil {
		return fmt.Errorf("bus: request name %s: %w", name, err)
	}
	if reply != dbus.RequestNameReplyPrimaryOwner && reply != dbus.RequestNameReplyAlreadyOwner {
		return fmt.Errorf("bus: name %s is already owned on this bus (another rdmad?)", name)
	}
	s.mu.Lock()
	if !s.named {
		s.named = true
		s.told = maps.Clone(s.objects)
		clear(s.unsent)
	}
	s.mu.Unlock()
	return nil
}

// Close stops publishing; later state changes are ignored. It does not
// wait for a signal the bus does not take: closing the connection ends it.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.stopOnce.Do(func() { close(s.stop) })
	s.reclaim.stop()
}

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
// call is under way (Daemon.Settled): a refused call's change, and its
// withdrawal, are never published.
func (s *Server) apply() { s.svc.Settled(s.applySettled) }

// applySettled is apply's work; its caller holds what Daemon.Settled
// holds (the applier through Settled, a mutating call through OnSettled).
// applyMu makes it the only writer of s.objects.
func (s *Server) applySettled() {
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	var (
		gen     uint64
		names   []string
		mgr     bool
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
	s.markMu.Unlock()
	sort.Strings(names)
	sum = s.state.Summary()
	states = s.state.DeviceStates(names)
	if mgr {
		manager = managerModel(s.svc.PolicyInForce(), s.svc.ConfigError(), sum, nil)
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
		if old := s.objects[p]; old != nil && old.iface == o.iface && len(changedProps(old.props(), o.props())) == 0 {
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
	wakeEmitter := s.named && len(s.unsent) > 0
	s.mu.Unlock()
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

func (s *Server) removeDevice(name string) {
	for _, pp := range s.ports[name] {
		s.remove(pp)
	}
	delete(s.ports, name)
	s.remove(dbusapi.DevicePath(name))
}

// put serves o at p; an object already there (the same pointer: apply
// keeps an unchanged one) needs no signal.
func (s *Server) put(p dbus.ObjectPath, o *object) {
	old, ok := s.objects[p]
	if ok && old == o {
		return
	}
	if ok && old.iface == o.iface && o.iface == dbusapi.ManagerIface && len(changedProps(old.props(), o.props())) == 0 {
		return
	}
	if !ok {
		s.link(p, 1)
	}
	s.objects[p] = o
	s.unsent[p] = struct{}{}
}

func (s *Server) remove(p dbus.ObjectPath) {
	if _, ok := s.objects[p]; !ok {
		return
	}
	delete(s.objects, p)
	s.link(p, -1)
	s.unsent[p] = struct{}{}
}

// changedProps are the properties of now whose values differ from old's.
func changedProps(old, now map[string]dbus.Variant) map[string]dbus.Variant {
	out := map[string]dbus.Variant{}
	for name, v := range now {
		if o, ok := old[name]; !ok || !reflect.DeepEqual(o.Value(), v.Value()) {
			out[name] = v
		}
	}
	return out
}

// link counts p (delta 1) or stops counting it (-1) under each ancestor.
func (s *Server) link(p dbus.ObjectPath, delta int) {
	path := string(p)
	for path != "/" && path != "" {
		i := strings.LastIndexByte(path, '/')
		parent, child := path[:i], path[i+1:]
		if parent == "" {
			parent = "/"
		}
		kids := s.children[dbus.ObjectPath(parent)]
		if kids == nil {
			kids = map[string]int{}
			s.children[dbus.ObjectPath(parent)] = kids
		}
		if kids[child] += delta; kids[child] <= 0 {
			delete(kids, child)
		}
		path = parent
	}
}

// signal is one signal to emit.
type signal struct {
	path dbus.ObjectPath
	name string
	args []any
}

func (s *Server) runEmitter() {
	for {
		select {
		case <-s.stop:
			return
		case <-s.emitWake:
		}
		for _, sig := range s.signals() {
			select {
			case <-s.stop:
				return
			default:
			}
			if err := s.conn.Emit(sig.path, sig.name, sig.args...); err != nil {
				if errors.Is(err, dbus.ErrClosed) {
					return
				}
				s.log.Warn("cannot emit signal", "path", sig.path, "signal", sig.name, "err", err)
			}
		}
	}
}

// signals says, for every object that may differ from what the signals
// said last, what differs: InterfacesRemoved (children first), then
// InterfacesAdded (parents first) and PropertiesChanged. It holds the
// server's lock only to take the objects, and emits nothing itself: the
// emitter sends them afterwards, so a stopped bus blocks no reader and no
// pass.
func (s *Server) signals() []signal {
	type pending struct {
		p        dbus.ObjectPath
		was, now *object
	}
	var todo []pending
	s.mu.Lock()
	if !s.named || s.closed {
		s.mu.Unlock()
		return nil
	}
	for p := range s.unsent {
		was, now := s.told[p], s.objects[p]
		todo = append(todo, pending{p, was, now})
		if now == nil {
			delete(s.told, p)
		} else {
			s.told[p] = now
		}
	}
	clear(s.unsent)
	s.mu.Unlock()
	// An object's path sorts right before its children's: '/' sorts
	// below every character of an escaped name.
	slices.SortFunc(todo, func(a, b pending) int { return strings.Compare(string(a.p), string(b.p)) })
	var removed, rest []signal
	for _, x := range todo {
		switch {
		case x.was == x.now:
		case x.now == nil:
			removed = append(removed, signal{dbusapi.RootPath, objMgrIface + ".InterfacesRemoved", []any{x.p, []string{x.was.iface}}})
		case x.was == nil && x.p != dbusapi.RootPath:
			rest = append(rest, signal{dbusapi.RootPath, objMgrIface + ".InterfacesAdded", []any{x.p, x.now.entry}})
		case x.was != nil:
			if changed := changedProps(x.was.props(), x.now.props()); len(changed) > 0 {
				rest = append(rest, signal{x.p, propsIface + ".PropertiesChanged", []any{x.now.iface, changed, []string{}}})
			}
		}
	}
	slices.Reverse(removed)
	return append(removed, rest...)
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// callPath is the object path a call was made on.
func callPath(msg dbus.Message) dbus.ObjectPath {
	p, _ := msg.Headers[dbus.FieldPath].Value().(dbus.ObjectPath)
	return p
}

// maxQuoted is how much of a name a caller gave an error message quotes:
// a 100,000-byte interface name is not echoed back.
const maxQuoted = 64

// quoteArg quotes a name from a call for an error message: escaped, and
// cut after maxQuoted bytes.
func quoteArg(s string) string {
	if len(s) <= maxQuoted {
		return `"` + dbusapi.Escape(s) + `"`
	}
	return `"` + dbusapi.Escape(s[:maxQuoted]) + `"...`
}

func unknownIface(p dbus.ObjectPath, iface string) *dbus.Error {
	return dbus.NewError(errUnknownIface, []any{fmt.Sprintf("%s has no interface %s", quoteArg(string(p)), quoteArg(iface))})
}

// object returns the object served at p.
func (s *Server) object(p dbus.ObjectPath) *object {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.objects[p]
}

func (s *Server) get(msg dbus.Message, iface, name string) (dbus.Variant, *dbus.Error) {
	p := callPath(msg)
	o := s.object(p)
	if o == nil || o.iface != iface {
		return dbus.Variant{}, unknownIface(p, iface)
	}
	v, ok := o.props()[name]
	if !ok {
		return dbus.Variant{}, dbus.NewError(errUnknownProp, []any{fmt.Sprintf("%s has no property %s", iface, quoteArg(name))})
	}
	return v, nil
}

func (s *Server) set(msg dbus.Message, iface, name string, _ dbus.Variant) *dbus.Error {
	if _, err := s.get(msg, iface, name); err != nil {
		return err
	}
	return dbus.NewError(errReadOnly, []any{fmt.Sprintf("property %s.%s is read-only", iface, name)})
}

func (s *Server) getAll(msg dbus.Message, iface string) (map[string]dbus.Variant, *dbus.Error) {
	p := callPath(msg)
	o := s.object(p)
	switch {
	case o != nil && (iface == "" || iface == o.iface): // "" is every interface
		return o.props(), nil
	case o != nil && (iface == objMgrIface && p == dbusapi.RootPath || iface == introIface || iface == propsIface || iface == peerIface):
		return map[string]dbus.Variant{}, nil // standard interfaces without properties
	}
	return nil, unknownIface(p, iface)
}

// getManagedObjects answers from the objects' property maps, which godbus
// encodes; nothing is converted for the call.
func (s *Server) getManagedObjects() (map[dbus.ObjectPath]props, *dbus.Error) {
	s.mu.Lock()
	out := make(map[dbus.ObjectPath]props, len(s.objects))
	for p, o := range s.objects {
		if p != dbusapi.RootPath { // ObjectManager reports the objects below it
			out[p] = o.entry
		}
	}
	s.mu.Unlock()
	s.reclaim.soon()
	return out, nil
}

// reclaimDelay is how long after a big reply (GetManagedObjects, Describe,
// Diagnose) its garbage is handed back to the system, once godbus has
// sent it: a host with a thousand devices makes megabytes of it per call,
// which the runtime would otherwise keep resident while rdmad idles.
const reclaimDelay = time.Second

// reclaimer runs debug.FreeOSMemory once, reclaimDelay after the last of
// a burst of big replies.
type reclaimer struct {
	mu    sync.Mutex
	delay time.Duration
	timer *time.Timer
	done  bool
}

func (r *reclaimer) soon() {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.done:
	case r.timer == nil:
		r.timer = time.AfterFunc(r.delay, debug.FreeOSMemory)
	default:
		r.timer.Reset(r.delay)
	}
}

func (r *reclaimer) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.done = true
	if r.timer != nil {
		r.timer.Stop()
	}
}

// hook returns the test hooks, or nil.
func (s *Server) hook() *testHooks { return s.hooks.Load() }

// setHook changes one test hook (export_test.go).
func (s *Server) setHook(edit func(*testHooks)) {
	h := &testHooks{}
	if old := s.hooks.Load(); old != nil {
		*h = *old
	}
	edit(h)
	s.hooks.Store(h)
}
