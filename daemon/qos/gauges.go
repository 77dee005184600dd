package qos

import "github.com/rdmad/rdmad/daemon/reconcile"

// The gauges of the PFC and trust settings: the values every RoCE port's
// netdev holds, declared or not, with the record's state as "policy", so
// a fleet sees the lossless values themselves, not only whether they
// drift from what each host declares. Labels stay bounded: the netdev, a
// trust of two values, the state.
var (
	pfcGauge = &reconcile.Gauge{Name: "rdmad_qos_pfc_mask", Policy: true, Sample: pfcSample,
		Help: "The PFC enable mask of the netdev of a RoCE port as the kernel holds it at the last read (bit N: PFC on priority N; 8 is priority 3 alone, 0 off), declared or not; policy says whether it is the declared one (holds, differs, refused, contested) or none is (undeclared)."}
	trustGauge = &reconcile.Gauge{Name: "rdmad_qos_trust_info", Policy: true, Sample: trustSample,
		Help: "The trust of the netdev of a RoCE port at the last read: dscp when its DCB APP table has DSCP entries, else pcp; always 1. policy says whether it is the declared trust and DSCP table (holds, differs, refused, contested) or none is declared (undeclared)."}
)

// pfcSample is the PFC gauge's sample: the enable mask, on its netdev.
func pfcSample(v reconcile.Value) reconcile.GaugeSample {
	p, _ := v.(PFCValue)
	return reconcile.GaugeSample{Labels: []string{"netdev", p.Netdev}, Value: uint64(p.PFC.Enabled)}
}

// trustSample is the trust gauge's sample: the trust alone (pcp or dscp),
// not how many DSCP entries differ, so a netdev has one series per state.
func trustSample(v reconcile.Value) reconcile.GaugeSample {
	t, _ := v.(TrustValue)
	return reconcile.GaugeSample{Labels: []string{"netdev", t.Netdev, "trust", string(t.Trust)}, Value: 1}
}
