package fixturekernel

import (
	"github.com/rdmad/rdmad/daemon/dcb"
	"github.com/rdmad/rdmad/daemon/ethtool"
)

// The state file's values as the codecs' types and back. The file was
// checked by Parse, so a word that does not read is not met here.

func (p *PFC) value() dcb.PFC {
	var mask uint8
	for _, prio := range p.Enabled {
		mask |= 1 << uint(prio)
	}
	return dcb.PFC{Cap: p.Cap, Enabled: mask, MBC: p.MacsecBypass, Delay: p.Delay}
}

func pfcOf(v dcb.PFC) *PFC {
	prios := []int{}
	for _, p := range v.Priorities() {
		prios = append(prios, int(p))
	}
	return &PFC{Cap: v.Cap, Enabled: prios, MacsecBypass: v.MBC, Delay: v.Delay}
}

func (e *ETS) value() dcb.ETS {
	v := dcb.ETS{Willing: e.Willing, Cap: e.Cap, CBS: e.CBS, TxBW: e.TxBW, RxBW: e.RxBW, PrioTC: e.PrioTC,
		RecoBW: e.RecoBW, RecoPrioTC: e.RecoPrioTC}
	for i := range e.TSA {
		v.TSA[i], _ = tsaOf(e.TSA[i])
		v.RecoTSA[i], _ = tsaOf(e.RecoTSA[i])
	}
	return v
}

func etsOf(v dcb.ETS) *ETS {
	e := &ETS{Willing: v.Willing, Cap: v.Cap, CBS: v.CBS, TxBW: v.TxBW, RxBW: v.RxBW, PrioTC: v.PrioTC,
		RecoBW: v.RecoBW, RecoPrioTC: v.RecoPrioTC}
	for i := range v.TSA {
		e.TSA[i], e.RecoTSA[i] = v.TSA[i].String(), v.RecoTSA[i].String()
	}
	return e
}

func (d *DCB) ieee() dcb.IEEE {
	ie := dcb.IEEE{Apps: make([]dcb.App, len(d.App))}
	for i, a := range d.App {
		ie.Apps[i] = dcb.App(a)
	}
	if d.PFC != nil {
		v := d.PFC.value()
		ie.PFC = &v
	}
	if d.ETS != nil {
		v := d.ETS.value()
		ie.ETS = &v
	}
	if d.Maxrate != nil {
		ie.Maxrate = &dcb.Maxrate{Rate: d.Maxrate.Rate}
	}
	if d.Buffer != nil {
		ie.Buffer = &dcb.Buffer{PrioBuffer: d.Buffer.PrioBuffer, Size: d.Buffer.Size, Total: d.Buffer.Total}
	}
	if d.DCBX != nil {
		ie.DCBX, _ = dcbxBits(d.DCBX)
		ie.HasDCBX = true
	}
	return ie
}

// FromIEEE is the DCB table of a netdev whose kernel reported ie: what a
// fixture made from a real host holds.
func FromIEEE(ie dcb.IEEE) *DCB {
	d := &DCB{App: make([]App, len(ie.Apps))}
	for i, a := range ie.Apps {
		d.App[i] = App(a)
	}
	if ie.PFC != nil {
		d.PFC = pfcOf(*ie.PFC)
	}
	if ie.ETS != nil {
		d.ETS = etsOf(*ie.ETS)
	}
	if ie.Maxrate != nil {
		d.Maxrate = &Maxrate{Rate: ie.Maxrate.Rate}
	}
	if ie.Buffer != nil {
		d.Buffer = &Buffer{PrioBuffer: ie.Buffer.PrioBuffer, Size: ie.Buffer.Size, Total: ie.Buffer.Total}
	}
	if ie.HasDCBX {
		d.DCBX = DCBXWords(ie.DCBX)
	}
	return d
}

func (p *Pause) value() ethtool.Pause { return ethtool.Pause{Autoneg: p.Autoneg, RX: p.RX, TX: p.TX} }
