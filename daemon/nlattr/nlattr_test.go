package nlattr_test

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/rdmad/rdmad/daemon/nlattr"
)

func TestParse(t *testing.T) {
	attr := func(typ int, v []byte) []byte { return nl.NewRtAttr(typ, v).Serialize() }
	join := func(bs ...[]byte) []byte { return bytes.Join(bs, nil) }
	nested := nl.NewRtAttr(unix.NLA_F_NESTED|7, nil)
	nested.AddRtAttr(1, []byte("ab\x00"))
	cases := []struct {
		name string
		b    []byte
		want []nlattr.Attr
		bad  bool
	}{
		{"nothing", nil, nil, false},
		{"one u32", attr(1, []byte{1, 2, 3, 4}), []nlattr.Attr{{1, []byte{1, 2, 3, 4}}}, false},
		{"padded u8 then an empty last attribute", join(attr(1, []byte{9}), attr(9, nil)),
			[]nlattr.Attr{{1, []byte{9}}, {9, []byte{}}}, false},
		{"last attribute without its padding", attr(1, []byte{9})[:5], []nlattr.Attr{{1, []byte{9}}}, false},
		{"flags stripped, nest kept whole", join(nested.Serialize(), attr(unix.NLA_F_NET_BYTEORDER|2, []byte{0, 0, 0, 1})),
			[]nlattr.Attr{{7, nested.Serialize()[4:]}, {2, []byte{0, 0, 0, 1}}}, false},
		{"3 bytes left after the last", join(attr(1, []byte{1, 2, 3, 4}), []byte{0, 0, 0}), nil, true},
		{"length past the end", []byte{12, 0, 1, 0, 1, 2, 3, 4}, nil, true},
		{"length shorter than the header", []byte{3, 0, 1, 0}, nil, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := nlattr.Parse(c.b)
			if c.bad != (err != nil) || (err != nil && !errors.Is(err, nlattr.ErrMalformed)) {
				t.Fatalf("err = %v, want malformed: %v", err, c.bad)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("attributes %+v, want %+v", got, c.want)
			}
		})
	}
}

// TestAllStopsWhereTheCallerStops: a caller that takes the attribute it
// looks for never sees an error past it (the DCB notification's first
// attribute names the netdev, whatever follows).
func TestAllStopsWhereTheCallerStops(t *testing.T) {
	b := append(nl.NewRtAttr(1, []byte("eth0\x00")).Serialize(), 0xff, 0xff)
	for a, err := range nlattr.All(b) {
		if err != nil {
			t.Fatalf("error before the first attribute was taken: %v", err)
		}
		if a.Type != 1 || a.String() != "eth0" {
			t.Fatalf("first attribute %+v", a)
		}
		break
	}
	var errs int
	for _, err := range nlattr.All(b) {
		if err != nil {
			errs++
		}
	}
	if errs != 1 {
		t.Errorf("a whole walk over the trailing bytes saw %d errors, want 1", errs)
	}
}

func TestValues(t *testing.T) {
	u32 := nlattr.Attr{Value: nl.Uint32Attr(0xdeadbeef)}
	if v, ok := u32.Uint32(); !ok || v != 0xdeadbeef {
		t.Errorf("Uint32 = %#x, %v", v, ok)
	}
	if _, ok := (nlattr.Attr{Value: []byte{1, 2}}).Uint32(); ok {
		t.Error("a u32 of 2 bytes read")
	}
	if v, ok := (nlattr.Attr{Value: []byte{7}}).Uint8(); !ok || v != 7 {
		t.Errorf("Uint8 = %d, %v", v, ok)
	}
	if _, ok := (nlattr.Attr{}).Uint8(); ok {
		t.Error("a u8 of 0 bytes read")
	}
	for in, want := range map[string]string{"eth0\x00": "eth0", "eth0": "eth0", "a\x00b": "a", "": ""} {
		if got := (nlattr.Attr{Value: []byte(in)}).String(); got != want {
			t.Errorf("String(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzParse: no input panics the decoder, every payload lies inside the
// input, and an input it accepts is covered exactly by its attributes and
// their padding (the last one's may be cut short).
func FuzzParse(f *testing.F) {
	f.Add(nl.NewRtAttr(1, []byte{1, 2, 3, 4}).Serialize())
	f.Add([]byte{5, 0, 1, 0, 9})
	f.Add([]byte{5, 0, 1, 0, 9, 0})
	f.Add([]byte{8, 0, 1, 0, 0xaa, 0xbb, 0xcc, 0xdd, 4, 0, 9, 0, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		as, err := nlattr.Parse(b)
		if err != nil {
			return
		}
		covered := 0
		for i, a := range as {
			end := covered + unix.SizeofNlAttr + len(a.Value)
			if end > len(b) || !bytes.Equal(b[covered+unix.SizeofNlAttr:end], a.Value) {
				t.Fatalf("attribute %d (%+v) is not at byte %d of % x", i, a, covered, b)
			}
			// The last attribute's padding may be cut short.
			covered = min(covered+nlattr.Align(end-covered), len(b))
		}
		if covered != len(b) {
			t.Fatalf("attributes cover %d of %d bytes", covered, len(b))
		}
	})
}
