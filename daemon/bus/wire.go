package bus

import (
	"encoding/binary"
	"fmt"
	"reflect"
	"sort"

	"github.com/godbus/dbus/v5"
)

// This file encodes the objects of GetManagedObjects in the D-Bus wire
// format ahead of time. godbus encodes a reply by reflection, twice (once
// to count file descriptors); on a host with a thousand devices that is
// 3,000 objects and 55,000 variants per call. Each object is encoded once
// when it changes, and a GetManagedObjects reply is the concatenation
// (replyRewriter puts it on the wire). The encoding is checked against
// godbus's decoder in wire_test.go.

// wireOrder is the byte order of every message rdmad sends: godbus sends
// in the native one (D-Bus carries the order in the message).
var wireOrder = func() interface {
	binary.ByteOrder
	binary.AppendByteOrder
} {
	if binary.NativeEndian.Uint16([]byte{1, 0}) == 1 {
		return binary.LittleEndian
	}
	return binary.BigEndian
}()

// wireBuf appends D-Bus wire data; pos is relative to an 8-aligned start.
type wireBuf struct{ b []byte }

func (w *wireBuf) align(n int) {
	for len(w.b)%n != 0 {
		w.b = append(w.b, 0)
	}
}

func (w *wireBuf) u32(v uint32) {
	w.align(4)
	w.b = wireOrder.AppendUint32(w.b, v)
}

func (w *wireBuf) u64(v uint64) {
	w.align(8)
	w.b = wireOrder.AppendUint64(w.b, v)
}

func (w *wireBuf) str(s string) {
	w.u32(uint32(len(s)))
	w.b = append(w.b, s...)
	w.b = append(w.b, 0)
}

func (w *wireBuf) sig(s string) {
	w.b = append(w.b, byte(len(s)))
	w.b = append(w.b, s...)
	w.b = append(w.b, 0)
}

// array writes an array whose elements have alignment elemAlign: the
// length counts from the first element, after the padding to it.
func (w *wireBuf) array(elemAlign int, body func()) {
	w.u32(0)
	at := len(w.b) - 4
	w.align(elemAlign)
	start := len(w.b)
	body()
	wireOrder.PutUint32(w.b[at:], uint32(len(w.b)-start))
}

// value writes one property value: the types rdmad's model uses.
func (w *wireBuf) value(v any) error {
	switch x := v.(type) {
	case string:
		w.str(x)
	case dbus.ObjectPath:
		w.str(string(x))
	case bool:
		if x {
			w.u32(1)
		} else {
			w.u32(0)
		}
	case uint32:
		w.u32(x)
	case int32:
		w.u32(uint32(x))
	case uint64:
		w.u64(x)
	case []string:
		w.array(4, func() {
			for _, s := range x {
				w.str(s)
			}
		})
	case []dbus.ObjectPath:
		w.array(4, func() {
			for _, s := range x {
				w.str(string(s))
			}
		})
	case []byte:
		w.array(1, func() { w.b = append(w.b, x...) })
	default:
		return w.structs(v)
	}
	return nil
}

// structs writes an array of structs of strings (the Manager's Links).
func (w *wireBuf) structs(v any) error {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Slice || rv.Type().Elem().Kind() != reflect.Struct {
		return fmt.Errorf("bus: no wire encoding for %T", v)
	}
	var err error
	w.array(8, func() {
		for i := 0; i < rv.Len() && err == nil; i++ {
			w.align(8)
			e := rv.Index(i)
			for f := 0; f < e.NumField(); f++ {
				if e.Field(f).Kind() != reflect.String {
					err = fmt.Errorf("bus: no wire encoding for field %d of %T", f, v)
					return
				}
				w.str(e.Field(f).String())
			}
		}
	})
	return err
}

// variant writes a property value as a variant.
func (w *wireBuf) variant(v dbus.Variant) error {
	w.sig(v.Signature().String())
	return w.value(v.Value())
}

// encodeEntry is one dict entry of GetManagedObjects' a{oa{sa{sv}}}: the
// object path and its interfaces with their properties, keys sorted so the
// same object always encodes to the same bytes. It starts 8-aligned.
func encodeEntry(path dbus.ObjectPath, ifaces props) ([]byte, error) {
	w := &wireBuf{b: make([]byte, 0, 1024)}
	w.str(string(path))
	var err error
	w.array(8, func() {
		for _, iface := range sortedKeys(ifaces) {
			w.align(8)
			w.str(iface)
			ps := ifaces[iface]
			w.array(8, func() {
				for _, name := range sortedKeys(ps) {
					w.align(8)
					w.str(name)
					if e := w.variant(ps[name]); e != nil && err == nil {
						err = e
					}
				}
			})
		}
	})
	return w.b, err
}

// managedObjectsBody is the body of a GetManagedObjects reply: the array
// of the entries, each 8-aligned, in path order.
func managedObjectsBody(entries map[dbus.ObjectPath][]byte) []byte {
	paths := make([]dbus.ObjectPath, 0, len(entries))
	size := 8
	for p, e := range entries {
		paths = append(paths, p)
		size += len(e) + 8
	}
	sort.Slice(paths, func(i, j int) bool { return paths[i] < paths[j] })
	w := &wireBuf{b: make([]byte, 0, size)}
	w.array(8, func() {
		for _, p := range paths {
			w.align(8)
			w.b = append(w.b, entries[p]...)
		}
	})
	return w.b
}
