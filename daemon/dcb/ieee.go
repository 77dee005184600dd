package dcb

import (
	"fmt"

	"github.com/vishvananda/netlink/nl"
)

// The IEEE 802.1Qaz objects beside PFC that lossless RoCE sets: ETS
// (priority to traffic class, bandwidth shares, transmission selection),
// the per-class rate limits and the port buffers. Each is the uapi struct
// of linux/dcbnl.h byte for byte (testdata/*_struct.hex, from the C
// compiler).

// TSA is a transmission selection algorithm (IEEE_8021QAZ_TSA_*).
type TSA uint8

const (
	TSAStrict   TSA = 0   // strict priority
	TSACBShaper TSA = 1   // credit-based shaper
	TSAETS      TSA = 2   // enhanced transmission selection: a bandwidth share
	TSAVendor   TSA = 255 // vendor specific
)

func (t TSA) String() string {
	switch t {
	case TSAStrict:
		return "strict"
	case TSACBShaper:
		return "cbs"
	case TSAETS:
		return "ets"
	case TSAVendor:
		return "vendor"
	}
	return fmt.Sprintf("tsa-%d", uint8(t))
}

// ETS is struct ieee_ets.
type ETS struct {
	Willing    uint8
	Cap        uint8 // ets_cap: how many traffic classes the port has
	CBS        uint8
	TxBW       [MaxPrio]uint8 // tc_tx_bw: percent per traffic class
	RxBW       [MaxPrio]uint8
	TSA        [MaxPrio]TSA   // tc_tsa, per traffic class
	PrioTC     [MaxPrio]uint8 // prio_tc: the traffic class of each priority
	RecoBW     [MaxPrio]uint8
	RecoTSA    [MaxPrio]TSA
	RecoPrioTC [MaxPrio]uint8
}

// sizeofETS is sizeof(struct ieee_ets): three u8, then seven arrays of 8
// u8, no padding.
const sizeofETS = 59

func (e ETS) marshal() []byte {
	b := make([]byte, 0, sizeofETS)
	b = append(b, e.Willing, e.Cap, e.CBS)
	b = append(b, e.TxBW[:]...)
	b = append(b, e.RxBW[:]...)
	for _, t := range e.TSA {
		b = append(b, uint8(t))
	}
	b = append(b, e.PrioTC[:]...)
	b = append(b, e.RecoBW[:]...)
	for _, t := range e.RecoTSA {
		b = append(b, uint8(t))
	}
	return append(b, e.RecoPrioTC[:]...)
}

// MarshalBinary is struct ieee_ets's bytes, as the kernel reads them.
func (e ETS) MarshalBinary() ([]byte, error) { return e.marshal(), nil }

// UnmarshalBinary reads struct ieee_ets; fewer bytes than the struct are an
// error.
func (e *ETS) UnmarshalBinary(b []byte) error {
	v, err := unmarshalETS(b)
	if err == nil {
		*e = v
	}
	return err
}

func unmarshalETS(b []byte) (ETS, error) {
	if len(b) < sizeofETS {
		return ETS{}, fmt.Errorf("DCB_ATTR_IEEE_ETS is %d bytes, want %d", len(b), sizeofETS)
	}
	e := ETS{Willing: b[0], Cap: b[1], CBS: b[2]}
	for i := 0; i < MaxPrio; i++ {
		e.TxBW[i] = b[3+i]
		e.RxBW[i] = b[11+i]
		e.TSA[i] = TSA(b[19+i])
		e.PrioTC[i] = b[27+i]
		e.RecoBW[i] = b[35+i]
		e.RecoTSA[i] = TSA(b[43+i])
		e.RecoPrioTC[i] = b[51+i]
	}
	return e, nil
}

// Maxrate is struct ieee_maxrate: the transmit rate limit of each traffic
// class in kbit/s, 0 for none.
type Maxrate struct {
	Rate [MaxPrio]uint64
}

const sizeofMaxrate = 8 * MaxPrio

func (m Maxrate) marshal() []byte {
	b := make([]byte, sizeofMaxrate)
	for i, r := range m.Rate {
		nl.NativeEndian().PutUint64(b[8*i:], r)
	}
	return b
}

// MarshalBinary is struct ieee_maxrate's bytes, as the kernel reads them.
func (m Maxrate) MarshalBinary() ([]byte, error) { return m.marshal(), nil }

// UnmarshalBinary reads struct ieee_maxrate; fewer bytes than the struct are an
// error.
func (m *Maxrate) UnmarshalBinary(b []byte) error {
	v, err := unmarshalMaxrate(b)
	if err == nil {
		*m = v
	}
	return err
}

func unmarshalMaxrate(b []byte) (Maxrate, error) {
	if len(b) < sizeofMaxrate {
		return Maxrate{}, fmt.Errorf("DCB_ATTR_IEEE_MAXRATE is %d bytes, want %d", len(b), sizeofMaxrate)
	}
	var m Maxrate
	for i := range m.Rate {
		m.Rate[i] = nl.NativeEndian().Uint64(b[8*i:])
	}
	return m, nil
}

// MaxBuffers is the number of port buffers (DCBX_MAX_BUFFERS).
const MaxBuffers = 8

// Buffer is struct dcbnl_buffer: which receive buffer each priority uses
// and the size of each buffer in bytes. Total is read only (what the
// buffers take, hidden ones included).
type Buffer struct {
	PrioBuffer [MaxPrio]uint8
	Size       [MaxBuffers]uint32
	Total      uint32
}

// sizeofBuffer is sizeof(struct dcbnl_buffer): 8 u8, then 9 u32 (aligned
// at 8 already).
const sizeofBuffer = 44

func (b Buffer) marshal() []byte {
	out := make([]byte, sizeofBuffer)
	copy(out, b.PrioBuffer[:])
	ne := nl.NativeEndian()
	for i, s := range b.Size {
		ne.PutUint32(out[8+4*i:], s)
	}
	ne.PutUint32(out[40:], b.Total)
	return out
}

// MarshalBinary is struct dcbnl_buffer's bytes, as the kernel reads them.
func (b Buffer) MarshalBinary() ([]byte, error) { return b.marshal(), nil }

// UnmarshalBinary reads struct dcbnl_buffer; fewer bytes than the struct are an
// error.
func (x *Buffer) UnmarshalBinary(b []byte) error {
	v, err := unmarshalBuffer(b)
	if err == nil {
		*x = v
	}
	return err
}

func unmarshalBuffer(b []byte) (Buffer, error) {
	if len(b) < sizeofBuffer {
		return Buffer{}, fmt.Errorf("DCB_ATTR_DCB_BUFFER is %d bytes, want %d", len(b), sizeofBuffer)
	}
	var out Buffer
	copy(out.PrioBuffer[:], b[:MaxPrio])
	ne := nl.NativeEndian()
	for i := range out.Size {
		out.Size[i] = ne.Uint32(b[8+4*i:])
	}
	out.Total = ne.Uint32(b[40:])
	return out, nil
}
