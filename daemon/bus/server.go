// Package bus is the daemon's side of the D-Bus API: it exports the
// service's state as the objects of org.rdmad1.xml (dbusapi holds the
// contract, the model and the client), emits their signals, and serves the
// org.rdmad1.Manager methods behind authorization.
package bus

import (
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/godbus/dbus/v5"

	"github.com/rdmad/rdmad/daemon/reconcile"
	"github.com/rdmad/rdmad/daemon/service"
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

// props is one object's properties by interface.
type props = map[string]map[string]dbus.Variant

// Server exports the service on a bus connection.
type Server struct {
	conn *Conn
	svc  *service.Service
	auth Authorizer
	log  *slog.Logger

	mu      sync.Mutex
	objects map[dbus.ObjectPath]*object
	// children counts, per node, the objects below each child element, so
	// Introspect lists a node's children without walking every object.
	children map[dbus.ObjectPath]map[string]int
	managed  []byte                       // GetManagedObjects' body; nil when an object changed
	ports    map[string][]dbus.ObjectPath // device name -> its port objects
	// deviceNames and devicePaths are the Manager's Devices, kept while
	// the set of devices does not change.
	deviceNames []string
	devicePaths []dbus.ObjectPath
	closed      bool
	// named is set once the well-known name is taken: before that nobody
	// can follow rdmad's objects, so the first export emits no signals
	// (on a host with a thousand devices, thousands of InterfacesAdded).
	named bool

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
// state on conn and follows the service from then on. It does not request
// the bus name: call RequestName when the objects are in place.
func New(conn *Conn, svc *service.Service, auth Authorizer, log *slog.Logger) (*Server, error) {
	if log == nil {
		log = slog.Default()
	}
	s := &Server{conn: conn, svc: svc, auth: auth, log: log, objects: map[dbus.ObjectPath]*object{},
		children: map[dbus.ObjectPath]map[string]int{}, ports: map[string][]dbus.ObjectPath{}}
	s.reports.Store(newReportGate(reportSlots, reportWaiters, reportWait))
	if conn.rewriter != nil {
		conn.rewriter.setLogger(log)
	}
	m := &manager{s: s}
	if err := conn.ExportMethodTable(m.methods(), dbusapi.RootPath, dbusapi.ManagerIface); err != nil {
		return nil, fmt.Errorf("bus: export manager: %w", err)
	}
	if err := conn.ExportMethodTable(map[string]any{"GetManagedObjects": s.getManagedObjects}, dbusapi.RootPath, objMgrIface); err != nil {
		return nil, fmt.Errorf("bus: export object manager: %w", err)
	}
	s.mu.Lock()
	s.syncLocked(reconcile.Change{Full: true, Updated: svc.Reconciler().Summary().Devices})
	s.mu.Unlock()
	svc.Reconciler().OnChange(s.sync)
	// A config change (reload, runtime change) changes the Manager's
	// declarations; the pass it queues updates the devices.
	svc.OnConfigChange(func() { s.sync(reconcile.Change{}) })
	return s, nil
}

// RequestName takes the well-known name; it fails when another process owns
// it (a second rdmad on the same bus).
func (s *Server) RequestName(name string) error {
	reply, err := s.conn.RequestName(name, dbus.NameFlagDoNotQueue)
	if err != nil {
		return fmt.Errorf("bus: request name %s: %w", name, err)
	}
	if reply != dbus.RequestNameReplyPrimaryOwner && reply != dbus.RequestNameReplyAlreadyOwner {
		return fmt.Errorf("bus: name %s is already owned on this bus (another rdmad?)", name)
	}
	s.mu.Lock()
	s.named = true
	s.mu.Unlock()
	return nil
}

// Close stops publishing; later state changes are ignored.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
}

// sync publishes what a pass changed: new objects with InterfacesAdded
// (parents first), gone ones with InterfacesRemoved (children first), and
// one PropertiesChanged per object and interface for what differs. Only the
// devices the change names are converted again, so a pass over one device
// costs the same on a host with a thousand.
func (s *Server) sync(ch reconcile.Change) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.syncLocked(ch)
}

// object is one published object: its interface and model value
// (dbusapi.Manager, Device or Port), from which properties are made when
// asked, and its wire form for GetManagedObjects. A model is a third of the
// memory of its property map.
type object struct {
	iface string
	model any
	entry []byte // below the root, with the rewriter: encodeEntry's bytes
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

func (o *object) props() props { return props{o.iface: dbusapi.ToProps(o.model)} }

func (s *Server) syncLocked(ch reconcile.Change) {
	if s.closed {
		return
	}
	rec := s.svc.Reconciler()
	sum := rec.Summary()
	if !slices.Equal(sum.Devices, s.deviceNames) {
		// Escaping a thousand names on every pass would make one
		// device's event cost more on a larger host.
		s.deviceNames, s.devicePaths = sum.Devices, devicePaths(sum.Devices)
	}
	s.put(dbusapi.RootPath, dbusapi.ManagerIface, managerModel(s.svc.PolicyInForce(), s.svc.ConfigError(), sum, s.devicePaths))
	for _, name := range ch.Removed {
		s.removeDevice(name)
	}
	states := rec.DeviceStates(ch.Updated)
	for i := range states {
		s.putDevice(&states[i])
	}
}

// putDevice exports or updates a device and its ports.
func (s *Server) putDevice(ds *reconcile.DeviceState) {
	dev := deviceModel(ds)
	portModels := dev.Ports
	dev.Ports = nil // published as objects of their own, after their device
	s.put(dbusapi.DevicePath(ds.Name), dbusapi.DeviceIface, dev)
	ports := make([]dbus.ObjectPath, 0, len(portModels))
	for _, p := range portModels {
		pp := dbusapi.PortPath(ds.Name, int(p.Number))
		s.put(pp, dbusapi.PortIface, p)
		ports = append(ports, pp)
	}
	for _, old := range s.ports[ds.Name] {
		if !containsPath(ports, old) {
			s.remove(old)
		}
	}
	s.ports[ds.Name] = ports
}

func (s *Server) removeDevice(name string) {
	for _, pp := range s.ports[name] {
		s.remove(pp)
	}
	delete(s.ports, name)
	s.remove(dbusapi.DevicePath(name))
}

func containsPath(ps []dbus.ObjectPath, p dbus.ObjectPath) bool {
	for _, x := range ps {
		if x == p {
			return true
		}
	}
	return false
}

// put adds an object, or updates one and emits PropertiesChanged with the
// properties that differ.
func (s *Server) put(p dbus.ObjectPath, iface string, model any) {
	old, ok := s.objects[p]
	if !ok {
		o := &object{iface: iface, model: model}
		s.objects[p] = o
		s.link(p, 1)
		s.encode(p, o)
		if err := s.export(p); err != nil {
			s.log.Error("cannot export object", "path", p, "err", err)
			return
		}
		if p != dbusapi.RootPath {
			s.emit(dbusapi.RootPath, objMgrIface+".InterfacesAdded", p, o.props())
		}
		return
	}
	changed := changedProps(old.model, model)
	if len(changed) == 0 {
		return
	}
	o := &object{iface: iface, model: model}
	s.objects[p] = o
	s.encode(p, o)
	s.emit(p, propsIface+".PropertiesChanged", iface, changed, []string{})
}

// changedProps are the properties of model whose values differ from
// old's (a nil and an empty slice are the same published value).
func changedProps(old, model any) map[string]dbus.Variant {
	ov, nv := reflect.ValueOf(old), reflect.ValueOf(model)
	t := nv.Type()
	out := map[string]dbus.Variant{}
	for i := 0; i < t.NumField(); i++ {
		name := t.Field(i).Tag.Get("prop")
		if name == "" {
			continue
		}
		o, n := ov.Field(i), nv.Field(i)
		if n.Kind() == reflect.Slice && o.Len() == 0 && n.Len() == 0 || reflect.DeepEqual(o.Interface(), n.Interface()) {
			continue
		}
		if n.Kind() == reflect.Slice && n.IsNil() {
			n = reflect.MakeSlice(n.Type(), 0, 0)
		}
		out[name] = dbus.MakeVariant(n.Interface())
	}
	return out
}

// encode keeps the wire form of an object below the root for
// GetManagedObjects.
func (s *Server) encode(p dbus.ObjectPath, o *object) {
	s.managed = nil
	if p == dbusapi.RootPath || s.conn.rewriter == nil || !s.conn.rewriter.usable() {
		return
	}
	e, err := encodeEntry(p, o.props())
	if err != nil {
		// A type the encoder lacks: a bug, caught by wire_test. Fall
		// back to godbus for every reply rather than publish a partial one.
		s.log.Error("cannot pre-encode object; GetManagedObjects falls back to godbus", "path", p, "err", err)
		s.conn.rewriter = nil
		return
	}
	o.entry = e
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

func (s *Server) remove(p dbus.ObjectPath) {
	obj, ok := s.objects[p]
	if !ok {
		return
	}
	s.unexport(p)
	delete(s.objects, p)
	s.link(p, -1)
	s.managed = nil
	s.emit(dbusapi.RootPath, objMgrIface+".InterfacesRemoved", p, []string{obj.iface})
}

func (s *Server) emit(path dbus.ObjectPath, name string, args ...any) {
	if !s.named {
		return
	}
	if err := s.conn.Emit(path, name, args...); err != nil {
		s.log.Warn("cannot emit signal", "path", path, "signal", name, "err", err)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// export registers the Properties and Introspectable handlers of a path.
func (s *Server) export(p dbus.ObjectPath) error {
	handlers := map[string]any{
		"Get": func(iface, name string) (dbus.Variant, *dbus.Error) { return s.get(p, iface, name) },
		"GetAll": func(iface string) (map[string]dbus.Variant, *dbus.Error) {
			return s.getAll(p, iface)
		},
		"Set": func(iface, name string, _ dbus.Variant) *dbus.Error {
			if _, err := s.get(p, iface, name); err != nil {
				return err
			}
			return dbus.NewError(errReadOnly, []any{fmt.Sprintf("property %s.%s is read-only", iface, name)})
		},
	}
	if err := s.conn.ExportMethodTable(handlers, p, propsIface); err != nil {
		return err
	}
	intro := map[string]any{
		"Introspect": func() (string, *dbus.Error) { return s.introspect(p), nil },
	}
	return s.conn.ExportMethodTable(intro, p, introIface)
}

func (s *Server) unexport(p dbus.ObjectPath) {
	_ = s.conn.ExportMethodTable(nil, p, propsIface)
	_ = s.conn.ExportMethodTable(nil, p, introIface)
}

func (s *Server) get(p dbus.ObjectPath, iface, name string) (dbus.Variant, *dbus.Error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.objects[p]
	if !ok || o.iface != iface {
		return dbus.Variant{}, dbus.NewError(errUnknownIface, []any{fmt.Sprintf("%s has no interface %s", p, iface)})
	}
	v, ok := dbusapi.ToProps(o.model)[name]
	if !ok {
		return dbus.Variant{}, dbus.NewError(errUnknownProp, []any{fmt.Sprintf("%s has no property %s", iface, name)})
	}
	return v, nil
}

func (s *Server) getAll(p dbus.ObjectPath, iface string) (map[string]dbus.Variant, *dbus.Error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.objects[p]
	switch {
	case ok && (iface == "" || iface == o.iface): // "" is every interface
		return dbusapi.ToProps(o.model), nil
	case iface == objMgrIface || iface == introIface || iface == propsIface || iface == peerIface:
		return map[string]dbus.Variant{}, nil // standard interfaces without properties
	}
	return nil, dbus.NewError(errUnknownIface, []any{fmt.Sprintf("%s has no interface %s", p, iface)})
}

// getManagedObjects answers from the pre-encoded objects when the
// connection can carry them: the reply godbus sends is an empty array that
// the rewriter fills (conn.go). Otherwise, and once the rewriter declined
// a reply, godbus encodes the objects.
func (s *Server) getManagedObjects(msg dbus.Message) (map[dbus.ObjectPath]props, *dbus.Error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if msg.Flags&dbus.FlagNoReplyExpected != 0 {
		return map[dbus.ObjectPath]props{}, nil // godbus sends no reply
	}
	if rw := s.conn.rewriter; rw != nil && rw.usable() {
		if s.managed == nil {
			entries := make(map[dbus.ObjectPath][]byte, len(s.objects))
			for p, o := range s.objects {
				if o.entry != nil {
					entries[p] = o.entry
				}
			}
			s.managed = managedObjectsBody(entries)
		}
		sender, _ := msg.Headers[dbus.FieldSender].Value().(string)
		rw.expect(sender, msg.Serial(), s.managed)
		return map[dbus.ObjectPath]props{}, nil
	}
	out := make(map[dbus.ObjectPath]props, len(s.objects))
	for p, o := range s.objects {
		if p == dbusapi.RootPath {
			continue // ObjectManager reports the objects below it
		}
		out[p] = o.props()
	}
	return out, nil
}
