package qos

import (
	"fmt"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/dcb"
	"github.com/rdmad/rdmad/daemon/ethtool"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/reconcile"
)

// The settings of a lossless profile beyond PFC and trust, on the ports
// [[qos]] selects: DCB ones (cable length, ETS, rate limits, buffers,
// datagram-port entries, the DCBX mode), ethtool ones (global pause, the
// PFC storm timeout) and the OFED driver's ECN and CNP marking.
var (
	CableLength  = reconcile.NewSetting[CableLengthValue](reconcile.Setting{Name: "qos_cable_length", Kind: "qos cable length", Key: config.QoSCableLength.Key(), Title: "cable length", Tools: dcbTools, Valid: validCableLength})
	PrioTC       = reconcile.NewSetting[PrioTCValue](reconcile.Setting{Name: "qos_prio_tc", Kind: "qos prio_tc", Key: config.QoSPrioTC.Key(), Title: "ETS priority classes", Tools: dcbTools, Valid: validPrioTC})
	Bandwidth    = reconcile.NewSetting[BandwidthValue](reconcile.Setting{Name: "qos_tc_bandwidth", Kind: "qos tc_bandwidth", Key: config.QoSTCBandwidth.Key(), Title: "ETS bandwidth", Tools: dcbTools, Valid: validBandwidth})
	Maxrate      = reconcile.NewSetting[MaxrateValue](reconcile.Setting{Name: "qos_tc_maxrate", Kind: "qos tc_maxrate", Key: config.QoSTCMaxrate.Key(), Title: "rate limits", Tools: dcbTools, Valid: validMaxrate})
	PrioBuffer   = reconcile.NewSetting[PrioBufferValue](reconcile.Setting{Name: "qos_prio_buffer", Kind: "qos prio_buffer", Key: config.QoSPrioBuffer.Key(), Title: "priority buffers", Tools: dcbTools, Valid: validPrioBuffer})
	BufferSize   = reconcile.NewSetting[BufferSizeValue](reconcile.Setting{Name: "qos_buffer_size", Kind: "qos buffer_size", Key: config.QoSBufferSize.Key(), Title: "buffer sizes", Tools: dcbTools, Valid: validBufferSize})
	UDPPortPrio  = reconcile.NewSetting[UDPPortPrioValue](reconcile.Setting{Name: "qos_udp_port_prio", Kind: "qos udp_port_prio", Key: config.QoSUDPPortPrio.Key(), Title: "datagram-port priorities", Tools: dcbTools, Valid: validUDPPortPrio})
	DCBX         = reconcile.NewSetting[DCBXValue](reconcile.Setting{Name: "qos_dcbx", Kind: "qos dcbx", Key: config.QoSDCBX.Key(), Title: "DCBX mode", Tools: dcbTools, Valid: validDCBX})
	Pause        = reconcile.NewSetting[PauseValue](reconcile.Setting{Name: "qos_pause", Kind: "qos pause", Key: config.QoSPause.Key(), Title: "global pause", Tools: dcbTools, Valid: validPause})
	StormTimeout = reconcile.NewSetting[StormTimeoutValue](reconcile.Setting{Name: "qos_pfc_storm_timeout", Kind: "qos pfc_storm_timeout", Key: config.QoSPFCStormTimeout.Key(), Title: "PFC storm timeout", Tools: dcbTools, Valid: validStormTimeout})
	ECN          = reconcile.NewSetting[ECNValue](reconcile.Setting{Name: "qos_ecn", Kind: "qos ecn", Key: config.QoSECN.Key(), Title: "ECN priorities", Tools: dcbTools, Valid: validECN})
	CNPDSCP      = reconcile.NewSetting[CNPValue](reconcile.Setting{Name: "qos_cnp_dscp", Kind: "qos cnp_dscp", Key: config.QoSCNPDSCP.Key(), Title: "CNP DSCP", Tools: dcbTools, Valid: validCNPDSCP})
	CNPPriority  = reconcile.NewSetting[CNPValue](reconcile.Setting{Name: "qos_cnp_priority", Kind: "qos cnp_priority", Key: config.QoSCNPPriority.Key(), Title: "CNP priority", Tools: dcbTools, Valid: validCNPPrio})
)

// losslessSettings are the settings of this file, in the order a port
// applies them.
func losslessSettings() []*reconcile.Setting {
	return []*reconcile.Setting{DCBX.Setting(), CableLength.Setting(), PrioTC.Setting(), Bandwidth.Setting(), Maxrate.Setting(),
		PrioBuffer.Setting(), BufferSize.Setting(), UDPPortPrio.Setting(), Pause.Setting(), StormTimeout.Setting(),
		ECN.Setting(), CNPDSCP.Setting(), CNPPriority.Setting()}
}

// declaredLossless is one declared lossless setting of a port, with what
// records it as not applying or refused without trying.
type declaredLossless struct {
	dcb    bool // set through DCB: refused with the netdev's DCB error
	na     func(why error) (reconcile.Action, reconcile.Record)
	refuse func(err error) (reconcile.Action, reconcile.Record)
}

// handleDecl binds a declared value of one setting.
func handleDecl[V reconcile.Value](h reconcile.Handle[V], subject reconcile.Subject, want V, src config.Position, viaDCB bool) declaredLossless {
	return declaredLossless{
		dcb:    viaDCB,
		na:     func(why error) (reconcile.Action, reconcile.Record) { return h.NotApplicable(subject, want, src, why) },
		refuse: func(err error) (reconcile.Action, reconcile.Record) { return h.Refuse(subject, want, src, err) },
	}
}

// wanted is the declared values of the lossless settings of a port on
// netdev, as the settings' values.
type wanted struct {
	cable  CableLengthValue
	prioTC PrioTCValue
	bw     BandwidthValue
	rate   MaxrateValue
	prioBf PrioBufferValue
	size   BufferSizeValue
	udp    UDPPortPrioValue
	dcbx   DCBXValue
	pause  PauseValue
	storm  StormTimeoutValue
	ecn    ECNValue
	cnpD   CNPValue
	cnpP   CNPValue
}

func wantedOf(netdev, driver string, d config.LosslessDesired) wanted {
	return wanted{
		cable:  CableLengthValue{Netdev: netdev, Metres: uint16(config.QoSCableLength.Of(d).Value)},
		prioTC: PrioTCValue{Netdev: netdev, Map: config.QoSPrioTC.Of(d).Value},
		bw:     BandwidthValue{Netdev: netdev, BW: config.QoSTCBandwidth.Of(d).Value},
		rate:   MaxrateValue{Netdev: netdev, Rates: config.QoSTCMaxrate.Of(d).Value, Driver: driver},
		prioBf: PrioBufferValue{Netdev: netdev, Map: config.QoSPrioBuffer.Of(d).Value},
		size:   BufferSizeValue{Netdev: netdev, Sizes: config.QoSBufferSize.Of(d).Value},
		udp:    UDPPortPrioValue{Netdev: netdev, Map: config.QoSUDPPortPrio.Of(d).Value},
		dcbx:   DCBXValue{Netdev: netdev, Caps: HostIEEE},
		pause:  DeclaredPause(netdev, config.QoSPause.Of(d).Value),
		storm:  StormTimeoutValue{Netdev: netdev, MS: uint16(config.QoSPFCStormTimeout.Of(d).Value)},
		ecn:    DeclaredECN(netdev, config.QoSECN.Of(d).Value),
		cnpD:   CNPValue{Netdev: netdev, Value: config.QoSCNPDSCP.Of(d).Value},
		cnpP:   CNPValue{Netdev: netdev, Value: config.QoSCNPPriority.Of(d).Value},
	}
}

// declaredOf lists the lossless settings d declares on a port.
func declaredOf(subject reconcile.Subject, netdev, driver string, d config.LosslessDesired) []declaredLossless {
	w := wantedOf(netdev, driver, d)
	var out []declaredLossless
	out = declare(out, d, config.QoSDCBX, DCBX, subject, w.dcbx, true)
	out = declare(out, d, config.QoSCableLength, CableLength, subject, w.cable, true)
	out = declare(out, d, config.QoSPrioTC, PrioTC, subject, w.prioTC, true)
	out = declare(out, d, config.QoSTCBandwidth, Bandwidth, subject, w.bw, true)
	out = declare(out, d, config.QoSTCMaxrate, Maxrate, subject, w.rate, true)
	out = declare(out, d, config.QoSPrioBuffer, PrioBuffer, subject, w.prioBf, true)
	out = declare(out, d, config.QoSBufferSize, BufferSize, subject, w.size, true)
	out = declare(out, d, config.QoSUDPPortPrio, UDPPortPrio, subject, w.udp, true)
	out = declare(out, d, config.QoSPause, Pause, subject, w.pause, false)
	out = declare(out, d, config.QoSPFCStormTimeout, StormTimeout, subject, w.storm, false)
	out = declare(out, d, config.QoSECN, ECN, subject, w.ecn, false)
	out = declare(out, d, config.QoSCNPDSCP, CNPDSCP, subject, w.cnpD, false)
	out = declare(out, d, config.QoSCNPPriority, CNPPriority, subject, w.cnpP, false)
	return out
}

// declare appends the declared value want of setting h when key is
// declared in d.
func declare[T any, V reconcile.Value](out []declaredLossless, d config.LosslessDesired, key config.LosslessKey[T], h reconcile.Handle[V], subject reconcile.Subject, want V, viaDCB bool) []declaredLossless {
	if x := key.Of(d); x.Set {
		out = append(out, handleDecl(h, subject, want, x.Source, viaDCB))
	}
	return out
}

// losslessNotApplicable records every declared lossless setting of the
// port as not applying, and why.
func losslessNotApplicable(run *reconcile.DeviceRun, subject reconcile.Subject, netdev, driver string, d config.LosslessDesired, why error) {
	for _, x := range declaredOf(subject, netdev, driver, d) {
		run.Add(x.na(why))
	}
}

// losslessRefuse refuses every declared lossless setting of the port
// (only the DCB ones with dcbOnly).
func losslessRefuse(run *reconcile.DeviceRun, subject reconcile.Subject, netdev, driver string, d config.LosslessDesired, err error, dcbOnly bool) {
	for _, x := range declaredOf(subject, netdev, driver, d) {
		if x.dcb || !dcbOnly {
			run.Add(x.refuse(err))
		}
	}
}

// converge adds the record of one declared setting: not applicable when
// the driver lacks it, refused when check says so, else brought to its
// value.
func converge[V reconcile.Value](run *reconcile.DeviceRun, h reconcile.Handle[V], lacks, check error, c reconcile.Target[V]) {
	switch {
	case lacks != nil:
		run.Add(h.NotApplicable(c.Subject, c.Want, c.Source, lacks))
	case check != nil:
		run.Add(h.Refuse(c.Subject, c.Want, c.Source, check))
	default:
		run.Add(h.Converge(run, c))
	}
}

// applyDCBX sets host DCBX mode first, where declared, so that the owner
// check that follows sees the mode the rule asked for. It returns the
// netdev's DCB read again after a change.
func (p *Part) applyDCBX(run *reconcile.DeviceRun, subject reconcile.Subject, netdev string, d config.LosslessDesired, ie dcb.IEEE) dcb.IEEE {
	if !config.QoSDCBX.Of(d).Set {
		return ie
	}
	w := DCBXValue{Netdev: netdev, Caps: HostIEEE}
	act, rec := DCBX.Converge(run, reconcile.Target[DCBXValue]{
		Subject: subject, Want: w, Source: config.QoSDCBX.Of(d).Source, Holds: DCBXHolds,
		Read:  func() (DCBXValue, error) { return p.readDCBX(netdev) },
		Write: func(want DCBXValue) error { return p.DCB.SetDCBX(netdev, want.Caps) },
		Fix:   "the driver refused host DCBX: set it persistently (mlxconfig -d <device> set LLDP_NB_DCBX_P1=0 LLDP_NB_RX_MODE_P1=0 LLDP_NB_TX_MODE_P1=0 and a firmware reset on mlx5), or remove dcbx",
	})
	run.Add(act, rec)
	if act.Status == reconcile.Changed {
		if again, err := p.DCB.Get(netdev); err == nil {
			return again
		}
	}
	return ie
}

func (p *Part) readDCBX(netdev string) (DCBXValue, error) {
	ie, err := p.DCB.Get(netdev)
	if err != nil {
		return DCBXValue{}, err
	}
	if ie.HasDCBX {
		return DCBXValue{Netdev: netdev, Caps: ie.DCBX}, nil
	}
	caps, err := p.DCB.DCBX(netdev)
	if err != nil {
		return DCBXValue{}, err
	}
	return DCBXValue{Netdev: netdev, Caps: caps}, nil
}

// applyLosslessDCB converges the DCB settings beyond PFC, trust and DCBX.
// ie is the netdev's DCB as read; hold is set when another agent owns it.
func (p *Part) applyLosslessDCB(run *reconcile.DeviceRun, dev *host.Device, subject reconcile.Subject, netdev string, d config.LosslessDesired, ie dcb.IEEE, hold error) {
	w := wantedOf(netdev, dev.Driver, d)
	get := func() (dcb.IEEE, error) { return p.DCB.Get(netdev) }
	if decl := config.QoSCableLength.Of(d); decl.Set {
		_, lacks := CableLengthOf(netdev, dev.Driver, ie)
		converge(run, CableLength, lacks, nil, reconcile.Target[CableLengthValue]{
			Subject: subject, Want: w.cable, Source: decl.Source, Holds: CableLengthHolds, Hold: hold,
			Read: func() (CableLengthValue, error) {
				ie, err := get()
				if err != nil {
					return CableLengthValue{}, err
				}
				return CableLengthOf(netdev, dev.Driver, ie)
			},
			// The mask goes back as the driver holds it: mlx5 toggles the
			// link only when the mask changes.
			Write: func(want CableLengthValue) error {
				ie, err := get()
				if err != nil {
					return err
				}
				if ie.PFC == nil {
					return fmt.Errorf("%s reports no PFC", netdev)
				}
				return p.DCB.SetPFC(netdev, NextPFCDelay(*ie.PFC, want.Metres))
			},
		})
	}
	_, _, etsLacks := ETSOf(netdev, dev.Driver, ie)
	var etsCap uint8
	if ie.ETS != nil {
		etsCap = ie.ETS.Cap
	}
	readETS := func() (dcb.IEEE, error) {
		ie, err := get()
		if err == nil && ie.ETS == nil {
			err = &Lacks{Netdev: netdev, Driver: dev.Driver, What: "ETS", Op: "ieee_getets"}
		}
		return ie, err
	}
	if decl := config.QoSPrioTC.Of(d); decl.Set {
		converge(run, PrioTC, etsLacks, CheckPrioTC(netdev, etsCap, w.prioTC), reconcile.Target[PrioTCValue]{
			Subject: subject, Want: w.prioTC, Source: decl.Source, Hold: hold,
			Read: func() (PrioTCValue, error) {
				ie, err := get()
				if err != nil {
					return PrioTCValue{}, err
				}
				v, _, err := ETSOf(netdev, dev.Driver, ie)
				return v, err
			},
			Write: func(want PrioTCValue) error {
				ie, err := readETS()
				if err != nil {
					return err
				}
				return p.DCB.SetETS(netdev, NextETSPrioTC(*ie.ETS, want))
			},
		})
	}
	if decl := config.QoSTCBandwidth.Of(d); decl.Set {
		w.bw.Cap = etsCap
		converge(run, Bandwidth, etsLacks, CheckBandwidth(netdev, etsCap, w.bw.BW), reconcile.Target[BandwidthValue]{
			Subject: subject, Want: w.bw, Source: decl.Source, Holds: ETSBandwidthHolds, Hold: hold,
			Read: func() (BandwidthValue, error) {
				ie, err := get()
				if err != nil {
					return BandwidthValue{}, err
				}
				_, v, err := ETSOf(netdev, dev.Driver, ie)
				return v, err
			},
			Write: func(want BandwidthValue) error {
				ie, err := readETS()
				if err != nil {
					return err
				}
				return p.DCB.SetETS(netdev, NextETSBandwidth(*ie.ETS, want.BW))
			},
		})
	}
	if decl := config.QoSTCMaxrate.Of(d); decl.Set {
		_, lacks := MaxrateOf(netdev, dev.Driver, ie)
		converge(run, Maxrate, lacks, nil, reconcile.Target[MaxrateValue]{
			Subject: subject, Want: w.rate, Source: decl.Source, Holds: MaxrateHolds, Hold: hold,
			Read: func() (MaxrateValue, error) {
				ie, err := get()
				if err != nil {
					return MaxrateValue{}, err
				}
				return MaxrateOf(netdev, dev.Driver, ie)
			},
			Write: func(want MaxrateValue) error { return p.DCB.SetMaxrate(netdev, MaxrateStruct(want)) },
		})
	}
	_, _, bufLacks := BuffersOf(netdev, dev.Driver, ie)
	writeBuffer := func(prio *PrioBufferValue, size *BufferSizeValue) error {
		ie, err := get()
		if err != nil {
			return err
		}
		if ie.Buffer == nil {
			return &Lacks{Netdev: netdev, Driver: dev.Driver, What: "port buffers", Op: "dcbnl_getbuffer"}
		}
		if dev.Driver == MLX5Driver {
			p.log().Warn(BufferOwnershipWarning(netdev), "netdev", netdev)
		}
		return p.DCB.SetBuffer(netdev, NextBuffer(*ie.Buffer, prio, size))
	}
	if decl := config.QoSPrioBuffer.Of(d); decl.Set {
		converge(run, PrioBuffer, bufLacks, nil, reconcile.Target[PrioBufferValue]{
			Subject: subject, Want: w.prioBf, Source: decl.Source, Hold: hold,
			Read: func() (PrioBufferValue, error) {
				ie, err := get()
				if err != nil {
					return PrioBufferValue{}, err
				}
				v, _, err := BuffersOf(netdev, dev.Driver, ie)
				return v, err
			},
			Write: func(want PrioBufferValue) error { return writeBuffer(&want, nil) },
		})
	}
	if decl := config.QoSBufferSize.Of(d); decl.Set {
		converge(run, BufferSize, bufLacks, nil, reconcile.Target[BufferSizeValue]{
			Subject: subject, Want: w.size, Source: decl.Source, Hold: hold,
			Read: func() (BufferSizeValue, error) {
				ie, err := get()
				if err != nil {
					return BufferSizeValue{}, err
				}
				_, v, err := BuffersOf(netdev, dev.Driver, ie)
				return v, err
			},
			Write: func(want BufferSizeValue) error { return writeBuffer(nil, &want) },
			Fix:   "mlx5 keeps buffer sizes in whole cells: declare the size the driver kept",
		})
	}
	if decl := config.QoSUDPPortPrio.Of(d); decl.Set {
		converge(run, UDPPortPrio, CheckDgramDriver(netdev, dev.Driver, w.udp.Map), nil, reconcile.Target[UDPPortPrioValue]{
			Subject: subject, Want: w.udp, Source: decl.Source, Holds: DgramPortsHolds, Hold: hold,
			Read: func() (UDPPortPrioValue, error) {
				ie, err := get()
				if err != nil {
					return UDPPortPrioValue{}, err
				}
				return DgramPortsOf(netdev, ie, w.udp.Map), nil
			},
			Write: func(want UDPPortPrioValue) error {
				ie, err := get()
				if err != nil {
					return err
				}
				del, add := PlanDgram(DgramPortsOf(netdev, ie, want.Map).Apps, want.Map)
				return p.writeApps(netdev, del, add)
			},
		})
	}
}

// applyLosslessLink converges the ethtool settings (global pause, the
// PFC storm timeout) and the OFED driver's ECN and CNP marking. A netdev
// without them (veth, an upstream driver) fails or is not applicable for
// each, named; the others still apply.
func (p *Part) applyLosslessLink(run *reconcile.DeviceRun, dev *host.Device, subject reconcile.Subject, port int, netdev string, d config.LosslessDesired) {
	w := wantedOf(netdev, dev.Driver, d)
	if config.QoSPause.Of(d).Set {
		pause := func() (PauseValue, error) { return ReadPause(p.ethtool(), netdev) }
		_, err := pause()
		if err != nil && !ethtool.Unsupported(err) {
			err = nil // not known now: Converge records it as unknown
		}
		converge(run, Pause, nil, err, reconcile.Target[PauseValue]{
			Subject: subject, Want: w.pause, Source: config.QoSPause.Of(d).Source, Holds: PauseHolds,
			Read:  pause,
			Write: func(want PauseValue) error { return p.ethtool().SetPause(netdev, want.Pause.RX, want.Pause.TX) },
		})
	}
	if config.QoSPFCStormTimeout.Of(d).Set {
		storm := func() (StormTimeoutValue, error) { return ReadStormTimeout(p.ethtool(), netdev) }
		_, err := storm()
		if err != nil && !ethtool.Unsupported(err) {
			err = nil
		}
		converge(run, StormTimeout, nil, err, reconcile.Target[StormTimeoutValue]{
			Subject: subject, Want: w.storm, Source: config.QoSPFCStormTimeout.Of(d).Source,
			Read:  storm,
			Write: func(want StormTimeoutValue) error { return p.ethtool().SetPFCStormTimeout(netdev, want.MS) },
		})
	}
	if !config.QoSECN.Of(d).Set && !config.QoSCNPDSCP.Of(d).Set && !config.QoSCNPPriority.Of(d).Set {
		return
	}
	raw, err := readOFEDECN(p.Host, netdev)
	var na error
	if err == nil && !raw.Present {
		na = UpstreamECN(netdev, dev.Driver, port)
	}
	if decl := config.QoSECN.Of(d); decl.Set {
		converge(run, ECN, na, nil, reconcile.Target[ECNValue]{
			Subject: subject, Want: w.ecn, Source: decl.Source, Holds: ECNHolds, Watch: ecnWatch(netdev),
			Read: func() (ECNValue, error) {
				v, _, err := ReadECN(p.Host, netdev)
				return v, err
			},
			Write: func(want ECNValue) error {
				have, _, err := ReadECN(p.Host, netdev)
				if err != nil {
					return err
				}
				return WriteECN(p.Host, netdev, have, want)
			},
		})
	}
	cnp := func(get func(OFEDECN) int, name string) func() (CNPValue, error) {
		return func() (CNPValue, error) {
			e, err := readOFEDECN(p.Host, netdev)
			if err != nil {
				return CNPValue{}, err
			}
			if get(e) < 0 {
				return CNPValue{}, fmt.Errorf("%s: the driver gave no %s", netdev, name)
			}
			return CNPValue{Netdev: netdev, Value: get(e)}, nil
		}
	}
	if decl := config.QoSCNPDSCP.Of(d); decl.Set {
		converge(run, CNPDSCP, na, nil, reconcile.Target[CNPValue]{
			Subject: subject, Want: w.cnpD, Source: decl.Source, Watch: ecnWatch(netdev),
			Read:  cnp(func(e OFEDECN) int { return e.CNPDSCP }, "CNP DSCP"),
			Write: func(want CNPValue) error { return writeCNPDSCP(p.Host, netdev, want.Value) },
		})
	}
	if decl := config.QoSCNPPriority.Of(d); decl.Set {
		converge(run, CNPPriority, na, nil, reconcile.Target[CNPValue]{
			Subject: subject, Want: w.cnpP, Source: decl.Source, Watch: ecnWatch(netdev),
			Read:  cnp(func(e OFEDECN) int { return e.CNPPrio }, "CNP priority"),
			Write: func(want CNPValue) error { return writeCNPPriority(p.Host, netdev, want.Value) },
		})
	}
}

// observePort records the kernel's value of every setting of the port that
// no rule declares, as the daemon publishes them (rdmactl qos show): the
// netdev's DCB, pause, storm timeout and ECN, whatever manages them. What
// the netdev does not have is left out.
func (p *Part) observePort(run *reconcile.DeviceRun, dev *host.Device, subject reconcile.Subject, netdev string, want config.QoSDesired) {
	d := want.LosslessDesired
	if ie, err := p.DCB.Get(netdev); err == nil {
		if !want.HasPFC && ie.PFC != nil {
			run.Record(PFC.Observe(subject, PFCValue{Netdev: netdev, PFC: *ie.PFC}, nil))
		}
		if want.Trust == "" && len(want.DSCPPrio) == 0 {
			run.Record(Trust.Observe(subject, trustOf(netdev, ie), nil))
		}
		if !config.QoSDCBX.Of(d).Set && ie.HasDCBX {
			run.Record(DCBX.Observe(subject, DCBXValue{Netdev: netdev, Caps: ie.DCBX}, nil))
		}
		if v, err := CableLengthOf(netdev, dev.Driver, ie); err == nil && !config.QoSCableLength.Of(d).Set {
			run.Record(CableLength.Observe(subject, v, nil))
		}
		if prio, bw, err := ETSOf(netdev, dev.Driver, ie); err == nil {
			if !config.QoSPrioTC.Of(d).Set {
				run.Record(PrioTC.Observe(subject, prio, nil))
			}
			if !config.QoSTCBandwidth.Of(d).Set {
				run.Record(Bandwidth.Observe(subject, bw, nil))
			}
		}
		if v, err := MaxrateOf(netdev, dev.Driver, ie); err == nil && !config.QoSTCMaxrate.Of(d).Set {
			run.Record(Maxrate.Observe(subject, v, nil))
		}
		if prio, size, err := BuffersOf(netdev, dev.Driver, ie); err == nil {
			if !config.QoSPrioBuffer.Of(d).Set {
				run.Record(PrioBuffer.Observe(subject, prio, nil))
			}
			if !config.QoSBufferSize.Of(d).Set {
				run.Record(BufferSize.Observe(subject, size, nil))
			}
		}
		if !config.QoSUDPPortPrio.Of(d).Set {
			if ports := dgramPortsIn(ie); len(ports) > 0 {
				run.Record(UDPPortPrio.Observe(subject, DgramPortsOf(netdev, ie, ports), nil))
			}
		}
	}
	if !config.QoSPause.Of(d).Set {
		if v, err := ReadPause(p.ethtool(), netdev); err == nil {
			run.Record(Pause.Observe(subject, v, nil))
		}
	}
	if !config.QoSPFCStormTimeout.Of(d).Set {
		if v, err := ReadStormTimeout(p.ethtool(), netdev); err == nil {
			run.Record(StormTimeout.Observe(subject, v, nil))
		}
	}
	raw, err := readOFEDECN(p.Host, netdev)
	if err != nil || !raw.Present {
		return
	}
	if !config.QoSECN.Of(d).Set && raw.Unread == 0 {
		run.Record(ECN.Observe(subject, ECNValue{Netdev: netdev, On: raw.On(), RP: raw.RP, NP: raw.NP}, nil))
	}
	if !config.QoSCNPDSCP.Of(d).Set && raw.CNPDSCP >= 0 {
		run.Record(CNPDSCP.Observe(subject, CNPValue{Netdev: netdev, Value: raw.CNPDSCP}, nil))
	}
	if !config.QoSCNPPriority.Of(d).Set && raw.CNPPrio >= 0 {
		run.Record(CNPPriority.Observe(subject, CNPValue{Netdev: netdev, Value: raw.CNPPrio}, nil))
	}
}

// dgramPortsIn is the ports of the APP table's datagram-port entries.
func dgramPortsIn(ie dcb.IEEE) map[uint16]uint8 {
	out := map[uint16]uint8{}
	for _, a := range ie.Apps {
		if a.Selector == dcb.SelDgram {
			out[a.Protocol] = a.Priority
		}
	}
	return out
}
