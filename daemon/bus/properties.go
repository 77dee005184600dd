package bus

import (
	"fmt"

	"github.com/godbus/dbus/v5"

	"github.com/rdmad/rdmad/dbusapi"
)

// The property handlers: Properties.Get, GetAll and Set and
// ObjectManager.GetManagedObjects, answered from the object store.

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

// getManagedObjects answers from the objects' models: their maps are made
// outside the lock (the objects never change; the applier replaces them),
// and godbus encodes them.
func (s *Server) getManagedObjects() (map[dbus.ObjectPath]props, *dbus.Error) {
	type served struct {
		p dbus.ObjectPath
		o *object
	}
	s.mu.Lock()
	objs := make([]served, 0, len(s.objects))
	for p, o := range s.objects {
		if p != dbusapi.RootPath { // ObjectManager reports the objects below it
			objs = append(objs, served{p, o})
		}
	}
	s.mu.Unlock()
	out := make(map[dbus.ObjectPath]props, len(objs))
	for _, x := range objs {
		out[x.p] = x.o.entry()
	}
	s.reclaim.soon()
	return out, nil
}
