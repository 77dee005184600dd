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
	"fmt"
	"log/slog"
	"maps"
	"runtime/debug"
	"sync"
	"sync/atomic"

	"github.com/godbus/dbus/v5"

	"github.com/rdmad/rdmad/daemon/audit"
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

// Server exports the service on a bus connection.
type Server struct {
	conn  atomic.Pointer[dbus.Conn] // the bus connection; Attach replaces a lost one
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
	news       []signal      // the passes' news, in order (news.go)
	newsLost   int           // news dropped since the last apply: more than maxNews waited
	appliedGen uint64        // markGen of the last applied marks
	applied    chan struct{} // closed when appliedGen moves
	wake       chan struct{} // the applier
	emitWake   chan struct{} // the emitter
	stop       chan struct{}
	stopOnce   sync.Once

	applyMu sync.Mutex // one apply at a time: the applier or a call's end

	mu      sync.Mutex
	objects map[dbus.ObjectPath]*object
	ports   map[string][]dbus.ObjectPath // device name -> its port objects
	// deviceNames and devicePaths are the Manager's Devices, kept while
	// the set of devices does not change.
	deviceNames []string
	devicePaths []dbus.ObjectPath
	// told is what the signals said of each object (once the name is
	// taken); unsent are the paths whose served object may differ from it.
	told   map[dbus.ObjectPath]*object
	unsent map[dbus.ObjectPath]struct{}
	// unsentNews are the news the emitter sends after the state's
	// signals (news.go).
	unsentNews []signal
	closed     bool
	// named is set once the well-known name is taken: before that nobody
	// can follow rdmad's objects, so the first export emits no signals
	// (on a host with a thousand devices, thousands of InterfacesAdded).
	named bool

	// proc reads a caller's process for the audit line (caller.go).
	proc audit.Proc

	reclaim reclaimer                  // returns a big reply's garbage to the system
	reports atomic.Pointer[reportGate] // Describe and Diagnose (reportgate.go)
	plans   *callerGate                // Plan's slots (plan.go)
	lives   *callerGate                // ReadPorts' slots (live.go)
	refused *refusedLog                // refused calls, counted and logged at a bounded rate (refused.go)

	leaseMu sync.Mutex
	leases  *leases // the holders of holds on the current connection (holds.go)

	// The parts' tables, constants of this rdmad (its parts are fixed
	// when the reconciler is made): converted once, not at every apply.
	disruptions   []dbusapi.Disruption
	notifications []dbusapi.Notification
}

// New exports the root object and every device and port of the current
// state on conn and follows state and svc from then on. It does not request
// the bus name: call RequestName when the objects are in place.
func New(conn *dbus.Conn, state State, svc Daemon, auth Authorizer, log *slog.Logger) (*Server, error) {
	if log == nil {
		log = slog.Default()
	}
	s := &Server{state: state, svc: svc, auth: auth, log: log,
		marked: map[string]struct{}{}, applied: make(chan struct{}),
		wake: make(chan struct{}, 1), emitWake: make(chan struct{}, 1), stop: make(chan struct{}),
		objects: map[dbus.ObjectPath]*object{},
		ports:   map[string][]dbus.ObjectPath{}, unsent: map[dbus.ObjectPath]struct{}{},
		proc:    audit.Proc{Dir: "/proc"},
		refused: newRefusedLog(log),
		plans:   &callerGate{method: "Plan", slots: planSlots, perUID: planSlotsPerUID, own: planRootSlots},
		lives:   &callerGate{method: "ReadPorts", slots: liveSlots, perUID: liveSlotsPerUID, own: liveRootSlots}}
	s.reports.Store(newReportGate(reportSlots, reportWaiters, reportWait))
	s.disruptions, s.notifications = disruptionsModel(state.Disruptions()), notificationsModel(state.Notifications())
	s.reclaim.delay = reclaimDelay
	if err := s.export(conn); err != nil {
		return nil, err
	}
	s.conn.Store(conn)
	s.mark(reconcile.Change{Updated: state.Summary().Devices})
	s.apply()
	state.OnChange(s.mark)
	// A mutating call's outcome is served before the next call starts,
	// so its reply (after Flush) does not wait behind the calls queued
	// after it for the applier's turn. The service publishes the policy
	// status then; the bus reads nothing of the service there.
	svc.AfterEachCall(s.applyBetweenCalls)
	// A config change (reload, runtime change) changes the Manager's
	// declarations; the pass it queues updates the devices.
	svc.OnConfigChange(func() { s.mark(reconcile.Change{}) })
	go s.runApplier()
	go s.runEmitter()
	return s, nil
}

// export serves the Manager, the ObjectManager, and Properties and
// Introspectable for the whole tree on conn.
func (s *Server) export(conn *dbus.Conn) error {
	m := &manager{s: s}
	if err := conn.ExportMethodTable(m.methods(), dbusapi.RootPath, dbusapi.ManagerIface); err != nil {
		return fmt.Errorf("export manager: %w", err)
	}
	if err := conn.ExportMethodTable(map[string]any{"GetManagedObjects": s.getManagedObjects}, dbusapi.RootPath, objMgrIface); err != nil {
		return fmt.Errorf("export object manager: %w", err)
	}
	// Properties and Introspectable answer for the whole tree from the
	// objects, by the path of the call: nothing is exported per object.
	if err := conn.ExportSubtreeMethodTable(map[string]any{"Get": s.get, "GetAll": s.getAll, "Set": s.set}, dbusapi.RootPath, propsIface); err != nil {
		return fmt.Errorf("export properties: %w", err)
	}
	if err := conn.ExportSubtreeMethodTable(map[string]any{"Introspect": s.introspectCall}, dbusapi.RootPath, introIface); err != nil {
		return fmt.Errorf("export introspection: %w", err)
	}
	return nil
}

// RequestName takes the well-known name; it fails when another process owns
// it (a second rdmad on the same bus). Signals start from the objects
// served at that moment.
func (s *Server) RequestName(name string) error {
	// A client activated by the name must find the whole tree: what the
	// passes so far marked is served first. Converting a thousand devices
	// leaves megabytes of garbage, handed back before the daemon idles.
	if err := s.Flush(context.Background()); err != nil {
		return fmt.Errorf("publish before taking %s: %w", name, err)
	}
	debug.FreeOSMemory()
	reply, err := s.conn.Load().RequestName(name, dbus.NameFlagDoNotQueue)
	if err != nil {
		return fmt.Errorf("request name %s: %w", name, err)
	}
	if reply != dbus.RequestNameReplyPrimaryOwner && reply != dbus.RequestNameReplyAlreadyOwner {
		return fmt.Errorf("name %s is already owned on this bus (another rdmad?)", name)
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
	hookRegistry.Delete(s)
}
