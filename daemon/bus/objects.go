package bus

import (
	"reflect"
	"strings"

	"github.com/godbus/dbus/v5"

	"github.com/rdmad/rdmad/dbusapi"
)

// The object store: the objects served at each path and which objects the
// signals have yet to describe. The applier is its only writer.

// props is one object's properties by interface, as GetManagedObjects
// and InterfacesAdded carry them.
type props = map[string]map[string]dbus.Variant

// object is one published object: its interface and its model (a
// dbusapi struct, escaped), as a value that is never modified afterwards.
// Its property map is made from the model when a call or a signal needs
// it: 3,000 maps of 15 to 27 Variants, kept, held 5.3 MB at 1,024 devices,
// four times the models they are made from; made for a GetManagedObjects
// call they cost a few milliseconds of the hundreds godbus spends on the
// reply.
type object struct {
	iface string
	model any
}

// props is the object's property map, made for the caller (who may keep
// it: godbus encodes a reply after the handler returned).
func (o *object) props() map[string]dbus.Variant { return dbusapi.ToProps(o.model) }

// entry is the object's properties by interface.
func (o *object) entry() props { return props{o.iface: o.props()} }

// newObject publishes model, a dbusapi model struct (not a pointer: the
// property maps point into the object's own copy of it).
func newObject(iface string, model any) *object {
	return &object{iface: iface, model: model}
}

// sameAs reports whether o publishes what old does: same interface and
// model.
func (o *object) sameAs(old *object) bool {
	return old != nil && old.iface == o.iface && reflect.DeepEqual(old.model, o.model)
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
	if ok && o.iface == dbusapi.ManagerIface && o.sameAs(old) {
		return
	}
	s.objects[p] = o
	s.unsent[p] = struct{}{}
}

func (s *Server) remove(p dbus.ObjectPath) {
	if _, ok := s.objects[p]; !ok {
		return
	}
	delete(s.objects, p)
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

// children are the names of the nodes right below p that hold an object
// or lead to one, sorted: what Introspect lists. It walks every object
// (tens of microseconds at 1,024 devices); a count kept per node for it
// held two maps per device.
func (s *Server) children(p dbus.ObjectPath) []string {
	prefix := string(p) + "/"
	if p == "/" {
		prefix = "/"
	}
	seen := map[string]bool{}
	for q := range s.objects {
		rest, ok := strings.CutPrefix(string(q), prefix)
		if !ok || rest == "" {
			continue
		}
		if i := strings.IndexByte(rest, '/'); i >= 0 {
			rest = rest[:i]
		}
		seen[rest] = true
	}
	return sortedKeys(seen)
}

// object returns the object served at p.
func (s *Server) object(p dbus.ObjectPath) *object {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.objects[p]
}
