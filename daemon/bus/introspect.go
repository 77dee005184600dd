package bus

import (
	"fmt"
	"reflect"
	"sort"

	"github.com/godbus/dbus/v5"
	"github.com/godbus/dbus/v5/introspect"

	"github.com/rdmad/rdmad/dbusapi"
)

// introspect describes what is actually served at p: the methods of the
// manager's method table (by reflection) and the properties held now, with
// argument names taken from the contract. The contract test compares this
// with org.rdmad1.xml.
func (s *Server) introspectCall(msg dbus.Message) (string, *dbus.Error) {
	return s.introspect(callPath(msg)), nil
}

func (s *Server) introspect(p dbus.ObjectPath) string {
	s.mu.Lock()
	o := s.objects[p]
	children := s.children(p)
	// Intermediate nodes (/org/rdmad1/devices/X/ports) have no object of
	// their own but must be walkable by busctl tree.
	if o == nil {
		s.mu.Unlock()
		return nodeXML(nil, children)
	}
	s.mu.Unlock()
	ps := o.props()
	node := []introspect.Interface{introspect.IntrospectData, propertiesData, peerData}
	iface := introspect.Interface{Name: o.iface}
	for _, pn := range sortedKeys(ps) {
		iface.Properties = append(iface.Properties, introspect.Property{
			Name: pn, Type: ps[pn].Signature().String(), Access: "read",
			Annotations: []introspect.Annotation{{Name: "org.freedesktop.DBus.Property.EmitsChangedSignal", Value: "true"}},
		})
	}
	if o.iface == dbusapi.ManagerIface {
		iface.Methods = servedMethods(dbusapi.ManagerIface, (&manager{}).methods())
		iface.Signals = servedSignals()
	}
	node = append(node, iface)
	if p == dbusapi.RootPath {
		node = append(node, objectManagerData)
	}
	return nodeXML(node, children)
}

func nodeXML(ifaces []introspect.Interface, children []string) string {
	n := introspect.Node{Interfaces: ifaces}
	for _, c := range children {
		n.Children = append(n.Children, introspect.Node{Name: c})
	}
	b, err := xmlMarshal(n)
	if err != nil {
		return "<node/>"
	}
	return b
}

var (
	senderType  = reflect.TypeOf(dbus.Sender(""))
	messageType = reflect.TypeOf(dbus.Message{})
	errType     = reflect.TypeOf((*dbus.Error)(nil))
)

// servedMethods derives introspection data from a method table; argument
// names come from the contract when its method has the same shape.
func servedMethods(ifaceName string, table map[string]any) []introspect.Method {
	var out []introspect.Method
	ci := dbusapi.TheContract().Interface(ifaceName)
	for _, name := range sortedKeys(table) {
		ft := reflect.TypeOf(table[name])
		var args []introspect.Arg
		for i := 0; i < ft.NumIn(); i++ {
			if t := ft.In(i); t != senderType && t != messageType {
				args = append(args, introspect.Arg{Type: dbus.SignatureOfType(t).String(), Direction: "in"})
			}
		}
		for i := 0; i < ft.NumOut(); i++ {
			if t := ft.Out(i); t != errType {
				args = append(args, introspect.Arg{Type: dbus.SignatureOfType(t).String(), Direction: "out"})
			}
		}
		var cm *dbusapi.Member
		if ci != nil {
			cm = ci.Member("method", name)
		}
		for i := range args {
			args[i].Name = fmt.Sprintf("arg%d", i)
			if cm != nil && len(cm.Args) == len(args) {
				args[i].Name = cm.Args[i].Name
			}
		}
		out = append(out, introspect.Method{Name: name, Args: args})
	}
	return out
}

var propertiesData = introspect.Interface{
	Name: propsIface,
	Methods: []introspect.Method{
		{Name: "Get", Args: []introspect.Arg{{Name: "interface_name", Type: "s", Direction: "in"}, {Name: "property_name", Type: "s", Direction: "in"}, {Name: "value", Type: "v", Direction: "out"}}},
		{Name: "GetAll", Args: []introspect.Arg{{Name: "interface_name", Type: "s", Direction: "in"}, {Name: "props", Type: "a{sv}", Direction: "out"}}},
		{Name: "Set", Args: []introspect.Arg{{Name: "interface_name", Type: "s", Direction: "in"}, {Name: "property_name", Type: "s", Direction: "in"}, {Name: "value", Type: "v", Direction: "in"}}},
	},
	Signals: []introspect.Signal{{Name: "PropertiesChanged", Args: []introspect.Arg{{Name: "interface_name", Type: "s"}, {Name: "changed_properties", Type: "a{sv}"}, {Name: "invalidated_properties", Type: "as"}}}},
}

var peerData = introspect.Interface{
	Name: peerIface,
	Methods: []introspect.Method{
		{Name: "Ping"},
		{Name: "GetMachineId", Args: []introspect.Arg{{Name: "machine_uuid", Type: "s", Direction: "out"}}},
	},
}

var objectManagerData = introspect.Interface{
	Name:    objMgrIface,
	Methods: []introspect.Method{{Name: "GetManagedObjects", Args: []introspect.Arg{{Name: "objects", Type: "a{oa{sa{sv}}}", Direction: "out"}}}},
	Signals: []introspect.Signal{
		{Name: "InterfacesAdded", Args: []introspect.Arg{{Name: "object_path", Type: "o"}, {Name: "interfaces_and_properties", Type: "a{sa{sv}}"}}},
		{Name: "InterfacesRemoved", Args: []introspect.Arg{{Name: "object_path", Type: "o"}, {Name: "interfaces", Type: "as"}}},
	},
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
