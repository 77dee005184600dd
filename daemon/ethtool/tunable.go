package ethtool

import (
	"fmt"

	"github.com/vishvananda/netlink/nl"
)

// The PFC storm prevention timeout: how long (ms) a port may be held in
// pause by its peer's PFC frames before the adapter stops honouring them
// (mlx5: 80..8000, 0 off; PFCStormAuto lets the firmware choose).
const (
	cmdGTunable       = 0x48 // ETHTOOL_GTUNABLE
	cmdSTunable       = 0x49 // ETHTOOL_STUNABLE
	tunablePFCTimeout = 3    // ETHTOOL_PFC_PREVENTION_TOUT
	tunableTypeU16    = 2    // ETHTOOL_TUNABLE_U16
	// sizeofTunable is sizeof(struct ethtool_tunable): cmd, id, type_id,
	// len, then the data (a u16 here).
	sizeofTunable = 16

	// PFCStormAuto is PFC_STORM_PREVENTION_AUTO: the firmware's default.
	PFCStormAuto = 0xffff
)

// TunableRequest is the struct ethtool_tunable that ETHTOOL_STUNABLE (set)
// or ETHTOOL_GTUNABLE (get: ms is ignored, the kernel writes the data) of
// ETHTOOL_PFC_PREVENTION_TOUT points the ifreq at, with its u16 data: as
// `ethtool --set-tunable IF pfc-prevention-tout MS` and `--get-tunable`
// build it.
func TunableRequest(set bool, ms uint16) []byte {
	b := make([]byte, sizeofTunable+2)
	ne := nl.NativeEndian()
	cmd := uint32(cmdGTunable)
	if set {
		cmd = cmdSTunable
	} else {
		ms = 0
	}
	ne.PutUint32(b[0:], cmd)
	ne.PutUint32(b[4:], tunablePFCTimeout)
	ne.PutUint32(b[8:], tunableTypeU16)
	ne.PutUint32(b[12:], 2)
	ne.PutUint16(b[16:], ms)
	return b
}

// TunableValue is the u16 the kernel wrote back into a GTUNABLE buffer.
func TunableValue(b []byte) (uint16, error) {
	if len(b) != sizeofTunable+2 {
		return 0, fmt.Errorf("tunable buffer of %d bytes", len(b))
	}
	return nl.NativeEndian().Uint16(b[16:]), nil
}

// Tunable is a tunable request decoded, as the kernel reads it.
type Tunable struct {
	Set           bool
	ID, Type, Len uint32
	Value         uint16
}

// ParseTunable decodes a TunableRequest buffer (the fake kernel answers
// from it; the kernel's ethtool_tunable_valid checks the same fields).
func ParseTunable(b []byte) (Tunable, error) {
	if len(b) < sizeofTunable {
		return Tunable{}, fmt.Errorf("tunable of %d bytes", len(b))
	}
	ne := nl.NativeEndian()
	t := Tunable{ID: ne.Uint32(b[4:]), Type: ne.Uint32(b[8:]), Len: ne.Uint32(b[12:])}
	switch ne.Uint32(b[0:]) {
	case cmdSTunable:
		t.Set = true
	case cmdGTunable:
	default:
		return Tunable{}, fmt.Errorf("command %#x is not a tunable", ne.Uint32(b[0:]))
	}
	if t.ID != tunablePFCTimeout || t.Type != tunableTypeU16 || t.Len != 2 || len(b) < sizeofTunable+2 {
		return Tunable{}, fmt.Errorf("not a u16 PFC prevention timeout: id %d type %d len %d", t.ID, t.Type, t.Len)
	}
	t.Value = ne.Uint16(b[16:])
	return t, nil
}
