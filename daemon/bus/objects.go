package bus

import (
	"reflect"
	"strings"

	"github.com/godbus/dbus/v5"

	"github.com/rdmad/rdmad/dbusapi"
)

// The object store: the objects served at each path, the children counts
// Introspect lists, and which objects the signals have yet to describe.
// The applier is its only writer.

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

// object returns the object served at p.
func (s *Server) object(p dbus.ObjectPath) *object {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.objects[p]
}
