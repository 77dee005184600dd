package bus

import (
	"bytes"
	"encoding/binary"
	"reflect"
	"testing"

	"github.com/godbus/dbus/v5"

	"github.com/rdmad/rdmad/dbusapi"
)

// decodeBody decodes a body of signature sig with godbus, as a client does.
func decodeBody(t *testing.T, sig string, body []byte) []any {
	t.Helper()
	msg := &dbus.Message{Type: dbus.TypeMethodReply, Headers: map[dbus.HeaderField]dbus.Variant{
		dbus.FieldReplySerial: dbus.MakeVariant(uint32(1)),
		dbus.FieldSignature:   dbus.MakeVariant(dbus.ParseSignatureMust(sig)),
	}, Body: []any{map[dbus.ObjectPath]props{}}}
	var buf bytes.Buffer
	if err := msg.EncodeTo(&buf, wireOrder); err != nil {
		t.Fatal(err)
	}
	h, err := parseHeader(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	raw := append([]byte(nil), buf.Bytes()[:h.bodyStart]...)
	wireOrder.PutUint32(raw[4:8], uint32(len(body)))
	raw = append(raw, body...)
	out, err := dbus.DecodeMessage(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("godbus cannot decode the pre-encoded body: %v", err)
	}
	return out.Body
}

func sampleObjects() map[dbus.ObjectPath]props {
	dev := dbusapi.Device{
		Name: "mlx5_0", Transports: []string{"roce"}, NodeType: "1: CA", FirmwareVersion: `16.35\xff`,
		Netdevs: []string{}, RoCEConfigfs: true, PortPaths: []dbus.ObjectPath{dbusapi.PortPath("mlx5_0", 1)},
	}
	port := dbusapi.Port{Device: "mlx5_0", Number: 1, RoCETOS: -1, DesiredRoCETOS: 106, GIDTypes: []string{"IB/RoCE v1", "RoCE v2"},
		State: "ACTIVE", Error: "ünïcode ✓"}
	mgr := dbusapi.Manager{Version: "1", Links: []dbusapi.Link{{Name: "rxe0", Type: "rxe", Netdev: "eth1", Source: "a:1"}},
		LastReconcile: 1 << 40, Devices: []dbus.ObjectPath{dbusapi.DevicePath("mlx5_0")}}
	return map[dbus.ObjectPath]props{
		dbusapi.DevicePath("mlx5_0"):  {dbusapi.DeviceIface: dbusapi.ToProps(dev)},
		dbusapi.PortPath("mlx5_0", 1): {dbusapi.PortIface: dbusapi.ToProps(port)},
		dbusapi.PortPath("mlx5_0", 2): {dbusapi.PortIface: dbusapi.ToProps(dbusapi.Port{})},
		"/org/rdmad1/mgr":             {dbusapi.ManagerIface: dbusapi.ToProps(mgr)},
	}
}

// Every type the model publishes encodes to what godbus decodes back to the
// same values.
func TestPreEncodedObjectsDecodeToTheSameValues(t *testing.T) {
	objs := sampleObjects()
	entries := map[dbus.ObjectPath][]byte{}
	for p, o := range objs {
		e, err := encodeEntry(p, o)
		if err != nil {
			t.Fatal(err)
		}
		entries[p] = e
	}
	body := decodeBody(t, "a{oa{sa{sv}}}", managedObjectsBody(entries))
	var got map[dbus.ObjectPath]props
	if err := dbus.Store(body, &got); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(objs) {
		t.Fatalf("%d objects decoded, want %d", len(got), len(objs))
	}
	for p, o := range objs {
		for iface, ps := range o {
			for name, v := range ps {
				g, ok := got[p][iface][name]
				if !ok || !reflect.DeepEqual(normalize(g.Value()), normalize(v.Value())) {
					t.Errorf("%s %s.%s: decoded %v (%s), want %v (%s)", p, iface, name, g.Value(), g.Signature(), v.Value(), v.Signature())
				}
			}
		}
	}
	// An empty set of objects is a valid empty array.
	if body := decodeBody(t, "a{oa{sa{sv}}}", managedObjectsBody(nil)); len(body) != 1 {
		t.Errorf("empty body decoded to %v", body)
	}
}

// normalize makes godbus's decoding of arrays of structs comparable to the
// model's typed slices.
func normalize(v any) any {
	if links, ok := v.([]dbusapi.Link); ok {
		out := [][]any{}
		for _, l := range links {
			out = append(out, []any{l.Name, l.Type, l.Netdev, l.Source})
		}
		return out
	}
	if s, ok := v.([]string); ok && len(s) == 0 {
		return []string{}
	}
	return v
}

// encodeReply is a method return as godbus writes it, in order.
func encodeReply(t *testing.T, order binary.ByteOrder, dest string, serial uint32, body any) []byte {
	t.Helper()
	msg := &dbus.Message{Type: dbus.TypeMethodReply, Headers: map[dbus.HeaderField]dbus.Variant{
		dbus.FieldReplySerial: dbus.MakeVariant(serial),
		dbus.FieldDestination: dbus.MakeVariant(dest),
		dbus.FieldSignature:   dbus.MakeVariant(dbus.SignatureOf(body)),
	}, Body: []any{body}}
	var buf bytes.Buffer
	if err := msg.EncodeTo(&buf, order); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// sampleManagedBody is a pre-encoded GetManagedObjects body of one object.
func sampleManagedBody() []byte {
	e, _ := encodeEntry("/a", sampleObjects()[dbusapi.PortPath("mlx5_0", 1)])
	return managedObjectsBody(map[dbus.ObjectPath][]byte{"/a": e})
}

// The rewriter replaces exactly the announced reply and nothing else.
func TestRewriterReplacesOnlyTheAnnouncedReply(t *testing.T) {
	reply := func(dest string, serial uint32, body any) []byte {
		return encodeReply(t, wireOrder, dest, serial, body)
	}
	rw := &replyRewriter{bodies: map[replyKey]pendingBody{}}
	rw.expect(":1.7", 42, sampleManagedBody())
	empty := map[dbus.ObjectPath]props{}
	for _, other := range [][]byte{
		reply(":1.8", 42, empty), // another caller
		reply(":1.7", 41, empty), // another call
	} {
		if _, ok := rw.rewrite(other); ok {
			t.Error("rewrote a reply that was not announced")
		}
	}
	out, ok := rw.rewrite(reply(":1.7", 42, empty))
	if !ok {
		t.Fatal("announced reply not rewritten")
	}
	msg, err := dbus.DecodeMessage(bytes.NewReader(out))
	if err != nil {
		t.Fatalf("rewritten message does not decode: %v", err)
	}
	var got map[dbus.ObjectPath]props
	if err := dbus.Store(msg.Body, &got); err != nil || len(got) != 1 || got["/a"][dbusapi.PortIface]["GIDTypes"].Value() == nil {
		t.Errorf("rewritten body = %v, %v", got, err)
	}
	if rw.pending() != 0 {
		t.Error("the announced body is still pending after its reply")
	}
	if _, ok := rw.rewrite(reply(":1.7", 42, empty)); ok {
		t.Error("a body was used twice")
	}
	if !rw.usable() {
		t.Error("the rewriter declined although every announced reply was filled")
	}
}

func TestParseHeaderRefusesGarbage(t *testing.T) {
	for _, p := range [][]byte{nil, []byte("AUTH EXTERNAL 30\r\n"), {0}, bytes.Repeat([]byte{'l'}, 64)} {
		if _, err := parseHeader(p); err == nil {
			t.Errorf("parseHeader(%q) accepted it", p)
		}
	}
}

func FuzzParseHeader(f *testing.F) {
	msg := &dbus.Message{Type: dbus.TypeMethodReply, Headers: map[dbus.HeaderField]dbus.Variant{
		dbus.FieldReplySerial: dbus.MakeVariant(uint32(7)),
		dbus.FieldDestination: dbus.MakeVariant(":1.1"),
		dbus.FieldSignature:   dbus.MakeVariant(dbus.ParseSignatureMust("a{oa{sa{sv}}}")),
	}, Body: []any{map[dbus.ObjectPath]props{}}}
	var buf bytes.Buffer
	if err := msg.EncodeTo(&buf, wireOrder); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Fuzz(func(t *testing.T, p []byte) {
		rw := &replyRewriter{bodies: map[replyKey]pendingBody{}}
		rw.expect(":1.1", 7, []byte{0, 0, 0, 0, 0, 0, 0, 0})
		if out, ok := rw.rewrite(p); ok && len(out) < 16 {
			t.Fatalf("rewrite made a %d-byte message", len(out))
		}
	})
}

func TestChangedPropsNamesOnlyWhatDiffers(t *testing.T) {
	old := dbusapi.Port{Device: "mlx5_0", Number: 1, RoCETOS: 0, GIDTypes: nil}
	now := dbusapi.Port{Device: "mlx5_0", Number: 1, RoCETOS: 106, GIDTypes: []string{}}
	got := changedProps(old, now)
	if len(got) != 1 || got["RoCETOS"].Value() != int32(106) {
		t.Errorf("changed = %v, want RoCETOS only (nil and empty lists publish the same)", got)
	}
	if got := changedProps(now, now); len(got) != 0 {
		t.Errorf("no change reported %v", got)
	}
}
