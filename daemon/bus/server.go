// Package bus is the daemon's side of the D-Bus API: it exports the
// service's state as the objects of org.rdmad1.xml (dbusapi holds the
// contract, the model and the client), emits their signals, and serves the
// org.rdmad1.Manager methods behind authorization.
package bus

import (
	"fmt"
	"log/slog"
	"reflect"
	"sort"
	"sync"

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
	objects map[dbus.ObjectPath]props
	entries map[dbus.ObjectPath][]byte   // objects below the root, wire-encoded (wire.go)
	managed []byte                       // GetManagedObjects' body; nil when an object changed
	ports   map[string][]dbus.ObjectPath // device name -> its port objects
	closed  bool
	// named is set once the well-known name is taken: before that nobody
	// can follow rdmad's objects, so the first export emits no signals
	// (on a host with a thousand devices, thousands of InterfacesAdded).
	named bool
}

// New exports the root object and every device and port of the current
// state on conn and follows the service from then on. It does not request
// the bus name: call RequestName when the objects are in place.
func New(conn *Conn, svc *service.Service, auth Authorizer, log *slog.Logger) (*Server, error) {
	if log == nil {
		log = slog.Default()
	}
	s := &Server{conn: conn, svc: svc, auth: auth, log: log, objects: map[dbus.ObjectPath]props{},
		entries: map[dbus.ObjectPath][]byte{}, ports: map[string][]dbus.ObjectPath{}}
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

func (s *Server) syncLocked(ch reconcile.Change) {
	if s.closed {
		return
	}
	rec := s.svc.Reconciler()
	if _, ok := s.objects[dbusapi.RootPath]; !ok {
		s.objects[dbusapi.RootPath] = props{}
		if err := s.export(dbusapi.RootPath); err != nil {
			s.log.Error("cannot export object", "path", dbusapi.RootPath, "err", err)
		}
	}
	s.update(dbusapi.RootPath, props{dbusapi.ManagerIface: dbusapi.ToProps(managerModel(s.svc, rec.Summary()))})

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
	path := dbusapi.DevicePath(ds.Name)
	s.put(path, props{dbusapi.DeviceIface: dbusapi.ToProps(dev)})
	var ports []dbus.ObjectPath
	for _, p := range dev.Ports {
		pp := dbusapi.PortPath(ds.Name, int(p.Number))
		s.put(pp, props{dbusapi.PortIface: dbusapi.ToProps(p)})
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

// put adds an object or updates the properties of one.
func (s *Server) put(p dbus.ObjectPath, want props) {
	if _, ok := s.objects[p]; ok {
		s.update(p, want)
		return
	}
	s.objects[p] = want
	s.encode(p, want)
	if err := s.export(p); err != nil {
		s.log.Error("cannot export object", "path", p, "err", err)
		return
	}
	s.emit(dbusapi.RootPath, objMgrIface+".InterfacesAdded", p, want)
}

// update replaces an object's properties, emitting what changed.
func (s *Server) update(p dbus.ObjectPath, want props) {
	old := s.objects[p]
	for _, iface := range sortedKeys(want) {
		changed := map[string]dbus.Variant{}
		for name, v := range want[iface] {
			if ov, ok := old[iface][name]; !ok || !reflect.DeepEqual(ov.Value(), v.Value()) {
				changed[name] = v
			}
		}
		if len(changed) > 0 && old[iface] != nil {
			s.emit(p, propsIface+".PropertiesChanged", iface, changed, []string{})
			s.encode(p, want)
		}
	}
	s.objects[p] = want
}

// encode keeps the wire form of an object below the root for
// GetManagedObjects.
func (s *Server) encode(p dbus.ObjectPath, want props) {
	if p == dbusapi.RootPath || s.conn.rewriter == nil {
		return
	}
	e, err := encodeEntry(p, want)
	if err != nil {
		// A type the encoder lacks: a bug, caught by wire_test. Fall
		// back to godbus for every reply rather than publish a partial one.
		s.log.Error("cannot pre-encode object; GetManagedObjects falls back to godbus", "path", p, "err", err)
		s.conn.rewriter = nil
		return
	}
	s.entries[p] = e
	s.managed = nil
}

func (s *Server) remove(p dbus.ObjectPath) {
	obj, ok := s.objects[p]
	if !ok {
		return
	}
	ifaces := sortedKeys(obj)
	s.unexport(p)
	delete(s.objects, p)
	delete(s.entries, p)
	s.managed = nil
	s.emit(dbusapi.RootPath, objMgrIface+".InterfacesRemoved", p, ifaces)
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
	ps, ok := s.objects[p][iface]
	if !ok {
		return dbus.Variant{}, dbus.NewError(errUnknownIface, []any{fmt.Sprintf("%s has no interface %s", p, iface)})
	}
	v, ok := ps[name]
	if !ok {
		return dbus.Variant{}, dbus.NewError(errUnknownProp, []any{fmt.Sprintf("%s has no property %s", iface, name)})
	}
	return v, nil
}

func (s *Server) getAll(p dbus.ObjectPath, iface string) (map[string]dbus.Variant, *dbus.Error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]dbus.Variant{}
	obj := s.objects[p]
	if iface == "" { // the spec allows an empty name: every interface
		for _, ps := range obj {
			for k, v := range ps {
				out[k] = v
			}
		}
		return out, nil
	}
	ps, ok := obj[iface]
	if !ok {
		if iface == objMgrIface || iface == introIface || iface == propsIface || iface == peerIface {
			return out, nil // standard interfaces without properties
		}
		return nil, dbus.NewError(errUnknownIface, []any{fmt.Sprintf("%s has no interface %s", p, iface)})
	}
	for k, v := range ps {
		out[k] = v
	}
	return out, nil
}

// getManagedObjects answers from the pre-encoded objects when the
// connection can carry them: the reply godbus sends is an empty array that
// the rewriter fills (conn.go). Otherwise godbus encodes the objects.
func (s *Server) getManagedObjects(msg dbus.Message) (map[dbus.ObjectPath]props, *dbus.Error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rw := s.conn.rewriter; rw != nil {
		if s.managed == nil {
			s.managed = managedObjectsBody(s.entries)
		}
		sender, _ := msg.Headers[dbus.FieldSender].Value().(string)
		rw.expect(sender, msg.Serial(), s.managed)
		return map[dbus.ObjectPath]props{}, nil
	}
	out := make(map[dbus.ObjectPath]props, len(s.objects))
	for p, ifaces := range s.objects {
		if p == dbusapi.RootPath {
			continue // ObjectManager reports the objects below it
		}
		out[p] = ifaces
	}
	return out, nil
}
