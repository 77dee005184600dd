// Package nlattr reads netlink attributes (struct nlattr): the one
// attribute decoder of the DCB and ethtool codecs and the event sources.
// Messages are built with vishvananda/netlink's nl package (nl.RtAttr,
// nl.NetlinkRequest), whose bytes the codecs' golden tests hold to
// iproute2's and ethtool's; its decoder (nl.ParseRouteAttr) is not used:
// it panics on a last attribute shorter than its alignment, and what the
// kernel sends, or another process on a multicast socket, must never stop
// rdmad.
package nlattr

import (
	"encoding/binary"
	"errors"
	"fmt"
	"iter"

	"golang.org/x/sys/unix"
)

// Attr is one attribute: its type without the NLA_F_NESTED and
// NLA_F_NET_BYTEORDER flags, and its payload (a slice of the message, not
// a copy).
type Attr struct {
	Type  uint16
	Value []byte
}

// ErrMalformed is wrapped by every error of the decoder.
var ErrMalformed = errors.New("malformed netlink attribute")

// All yields the attributes of b in order, as the kernel's
// nla_for_each_attr walks them (each aligned to 4 bytes; the last one's
// padding may be missing). An attribute whose length is shorter than its
// header or runs past the end of b, or 1 to 3 bytes left after the last
// (the kernel's strict validation refuses those too), ends the walk with
// an error wrapping ErrMalformed, after the attributes before it. A
// caller that stops early never reads past what it took.
func All(b []byte) iter.Seq2[Attr, error] {
	return func(yield func(Attr, error) bool) {
		for len(b) > 0 {
			if len(b) < unix.SizeofNlAttr {
				yield(Attr{}, fmt.Errorf("%w: %d bytes after the last attribute", ErrMalformed, len(b)))
				return
			}
			n := int(binary.NativeEndian.Uint16(b[0:2]))
			typ := binary.NativeEndian.Uint16(b[2:4]) &^ (unix.NLA_F_NESTED | unix.NLA_F_NET_BYTEORDER)
			if n < unix.SizeofNlAttr || n > len(b) {
				yield(Attr{}, fmt.Errorf("%w: attribute %d of length %d with %d bytes left", ErrMalformed, typ, n, len(b)))
				return
			}
			if !yield(Attr{Type: typ, Value: b[unix.SizeofNlAttr:n:n]}, nil) {
				return
			}
			b = b[min(Align(n), len(b)):]
		}
	}
}

// Parse returns the attributes of b, or the error All ends with.
func Parse(b []byte) ([]Attr, error) {
	var out []Attr
	for a, err := range All(b) {
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
}

// Align rounds n up to the netlink alignment (NLA_ALIGN, NLMSG_ALIGN: 4
// bytes).
func Align(n int) int { return (n + unix.NLA_ALIGNTO - 1) &^ (unix.NLA_ALIGNTO - 1) }

// Uint8 is the payload as a u8; ok is false unless it is exactly one
// byte.
func (a Attr) Uint8() (v uint8, ok bool) {
	if len(a.Value) != 1 {
		return 0, false
	}
	return a.Value[0], true
}

// Uint32 is the payload as a u32 in host byte order; ok is false unless
// it is exactly four bytes.
func (a Attr) Uint32() (v uint32, ok bool) {
	if len(a.Value) != 4 {
		return 0, false
	}
	return binary.NativeEndian.Uint32(a.Value), true
}

// String is the payload as a NUL-terminated string (NLA_NUL_STRING,
// NLA_STRING): the bytes before the first NUL, all of them without one.
func (a Attr) String() string {
	for i, c := range a.Value {
		if c == 0 {
			return string(a.Value[:i])
		}
	}
	return string(a.Value)
}
