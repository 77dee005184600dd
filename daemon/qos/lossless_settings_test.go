package qos_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/dcb"
	"github.com/rdmad/rdmad/daemon/dcb/dcbtest"
	"github.com/rdmad/rdmad/daemon/ethtool/ethtooltest"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/daemon/qos"
	"github.com/rdmad/rdmad/daemon/reconcile"
)

// The complete mlx5 profile of docs/guide.md.
const mlx5Profile = `[[qos]]
driver = "mlx5_core"
trust = "dscp"
pfc = [3]
cable_length = 10
prio_tc = [0,0,0,1,0,0,0,0]
tc_bandwidth = [50,50,0,0,0,0,0,0]
tc_maxrate = ["0","1550Mbit","0","0","0","0","0","0"]
pause = false
pfc_storm_timeout = 100
ecn = [3]
cnp_dscp = 46
cnp_priority = 6
`

type lossEnv struct {
	root string
	kern *hosttest.Kernel
	dcb  *dcbtest.Fake
	eth  *ethtooltest.Fake
	part *qos.Part
}

// newLossEnv is the mlx5-ofed fixture with mlx5-like DCB and ethtool
// kernels under both netdevs.
func newLossEnv(t *testing.T, fixture string) *lossEnv {
	root := hosttest.Copy(t, fixture)
	k := hosttest.NewKernel(root)
	e := &lossEnv{root: root, kern: k, dcb: dcbtest.New(), eth: ethtooltest.New()}
	for _, n := range []string{"ens1f0np0", "ens1f1np1"} {
		dcbtest.MLX5(e.dcb.Add(n))
		ethtooltest.MLX5(e.eth.Add(n))
	}
	e.part = &qos.Part{Host: k.Host(), DCB: e.dcb.Kernel(), Ethtool: e.eth.Kernel(), Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	return e
}

func (e *lossEnv) apply(t *testing.T, pol *config.Policy, dev string) *reconcile.DeviceRun {
	t.Helper()
	d, err := e.kern.Host().Device(dev)
	if err != nil {
		t.Fatal(err)
	}
	return reconcile.RunDevice(context.Background(), e.part, pol, &d)
}

func (e *lossEnv) writes() int {
	return len(e.dcb.Writes()) + len(e.eth.Writes()) + e.kern.WriteCount()
}

// byKind is each action's status and error by kind.
func byKind(run *reconcile.DeviceRun) map[reconcile.Kind]reconcile.Action {
	out := map[reconcile.Kind]reconcile.Action{}
	for _, a := range run.Actions {
		out[a.Kind] = a
	}
	return out
}

func recordOf(run *reconcile.DeviceRun, s *reconcile.Setting) (reconcile.Record, bool) {
	for _, r := range run.Records {
		if r.Setting == s {
			return r, true
		}
	}
	return reconcile.Record{}, false
}

func TestMLX5ProfileAppliesHoldsAndIsIdempotent(t *testing.T) {
	e := newLossEnv(t, "mlx5-ofed")
	pol := policy(t, mlx5Profile)
	run := e.apply(t, pol, "mlx5_0")
	acts := byKind(run)
	for _, s := range []*reconcile.Setting{qos.PFC.Setting(), qos.Trust.Setting(), qos.CableLength.Setting(), qos.PrioTC.Setting(),
		qos.Bandwidth.Setting(), qos.Maxrate.Setting(), qos.Pause.Setting(), qos.StormTimeout.Setting(), qos.ECN.Setting(), qos.CNPDSCP.Setting()} {
		a := acts[s.Kind]
		if a.Status != reconcile.Changed {
			t.Errorf("%s: %s %v", s.Name, a.Status, a.Err)
		}
		if r, ok := recordOf(run, s); !ok || r.State != reconcile.Holds || r.Source.Line != 1 {
			t.Errorf("%s record: %+v", s.Name, r)
		}
	}
	// A write to OFED's ECN files (by another tool) is an event rdmad
	// watches for.
	if r, _ := recordOf(run, qos.ECN.Setting()); !slices.Contains(r.Watch, "sys/class/net/ens1f0np0/ecn/roce_np/enable") {
		t.Errorf("ECN record watches %q", r.Watch)
	}
	// The firmware's CNP priority is already 6.
	if a := acts[qos.CNPPriority.Kind()]; a.Status != reconcile.Unchanged {
		t.Errorf("cnp_priority: %s %v", a.Status, a.Err)
	}
	n, _ := e.dcb.Netdev("ens1f0np0")
	if n.PFC.Enabled != 0x08 || n.PFC.Delay != 10 || n.ETS.PrioTC != [8]uint8{0, 0, 0, 1} || n.ETS.TxBW[0] != 50 || n.ETS.TSA[2] != dcb.TSAStrict {
		t.Errorf("DCB: %+v %+v", n.PFC, n.ETS)
	}
	if n.Maxrate.Rate[1] != 1_500_000 {
		t.Errorf("rate %d: mlx5 keeps 100 Mbit/s units", n.Maxrate.Rate[1])
	}
	if n.LinkToggles != 1 {
		t.Errorf("%d link toggles, want 1: only the PFC mask change toggles the link", n.LinkToggles)
	}
	if p, _ := e.eth.Netdev("ens1f0np0"); !p.Pause.Off() || p.Timeout != 100 {
		t.Errorf("ethtool: %+v", p)
	}
	ecn, raw, err := qos.ReadECN(e.kern.Host(), "ens1f0np0")
	if err != nil || ecn.On != 0x08 || raw.CNPDSCP != 46 || raw.CNPPrio != 6 {
		t.Errorf("ECN %+v %+v %v", ecn, raw, err)
	}
	if w := e.dcb.Writes(); contains(w, "set-dcbx") {
		t.Errorf("DCBX written without dcbx declared: %q", w)
	}

	// Nothing differs: nothing is written, everything holds.
	before := e.writes()
	run = e.apply(t, pol, "mlx5_0")
	for _, a := range run.Actions {
		if a.Status != reconcile.Unchanged {
			t.Errorf("second apply: %s %s %v", a.Kind, a.Status, a.Err)
		}
	}
	if after := e.writes(); after != before {
		t.Errorf("second apply wrote %d times", after-before)
	}

	// Another tool turns pause back on and changes the cable length: the
	// next pass puts both back, and the unchanged PFC mask is not
	// rewritten (no link toggle).
	e.eth.Update("ens1f0np0", func(n *ethtooltest.Netdev) { n.Pause.RX, n.Pause.TX = true, true })
	e.dcb.Update("ens1f0np0", func(n *dcbtest.Netdev) { n.PFC.Delay = 30 })
	run = e.apply(t, pol, "mlx5_0")
	acts = byKind(run)
	if acts[qos.Pause.Kind()].Status != reconcile.Changed || acts[qos.CableLength.Kind()].Status != reconcile.Changed || acts[qos.PFC.Kind()].Status != reconcile.Unchanged {
		t.Errorf("after drift: %s", statuses(run.Actions))
	}
	if n, _ := e.dcb.Netdev("ens1f0np0"); n.LinkToggles != 1 || n.PFC.Delay != 10 {
		t.Errorf("cable length correction: toggles %d delay %d", n.LinkToggles, n.PFC.Delay)
	}
}

func contains(ss []string, prefix string) bool {
	for _, s := range ss {
		if strings.HasPrefix(s, prefix) {
			return true
		}
	}
	return false
}

func TestUpstreamAndDriverLimitsAreNotApplicable(t *testing.T) {
	e := newLossEnv(t, "mlx5") // upstream: no OFED sysfs
	pol := policy(t, mlx5Profile+"udp_port_prio = { 4791 = 3 }\n")
	run := e.apply(t, pol, "mlx5_0")
	acts := byKind(run)
	for kind, want := range map[reconcile.Kind]string{
		qos.ECN.Kind():         "ROCE_CC_PRIO_MASK_P1",
		qos.CNPDSCP.Kind():     "mlxconfig",
		qos.UDPPortPrio.Kind(): "takes DSCP APP entries only",
	} {
		a := acts[kind]
		if a.Status != reconcile.NotApplicable || a.Err == nil || !strings.Contains(a.Err.Error(), want) {
			t.Errorf("%s: %s %v, want not applicable mentioning %q", kind, a.Status, a.Err, want)
		}
	}
	if r, _ := recordOf(run, qos.ECN.Setting()); r.Drifted() || r.State != reconcile.Inapplicable {
		t.Errorf("an upstream ECN counts as drift: %+v", r)
	}
	if contains(e.dcb.Writes(), "set-app ens1f0np0 dgram") {
		t.Error("a datagram entry was written to mlx5")
	}

	// A driver without ETS, rate limits or buffers: not applicable, named.
	e = newLossEnv(t, "mlx5")
	e.dcb.Update("ens1f0np0", func(n *dcbtest.Netdev) { n.ETS, n.Maxrate, n.Buffer = nil, nil, nil })
	run = e.apply(t, policy(t, "[[qos]]\ndevice = \"mlx5_0\"\nprio_tc = [0,0,0,1,0,0,0,0]\ntc_maxrate = [\"0\",\"1Gbit\",\"0\",\"0\",\"0\",\"0\",\"0\",\"0\"]\nbuffer_size = [0,0,0,0,0,0,0,0]\n"), "mlx5_0")
	for _, a := range run.Actions {
		if a.Status != reconcile.NotApplicable || !strings.Contains(a.Err.Error(), "mlx5_core") || !qos.IsLacks(a.Err) {
			t.Errorf("%s: %s %v", a.Kind, a.Status, a.Err)
		}
	}
	if w := e.dcb.Writes(); len(w) != 0 {
		t.Errorf("wrote %q to a driver without those objects", w)
	}
}

// TestVethRefusesEachSettingNamed: a netdev without DCB and without pause
// or tunables (veth, virtio) refuses each declared setting with its name
// in the message (not a bare EINVAL), and the other device still applies.
func TestVethRefusesEachSettingNamed(t *testing.T) {
	e := newLossEnv(t, "mlx5")
	e.dcb.AddNoDCB("ens1f0np0")
	e.eth.AddVirtual("ens1f0np0")
	pol := policy(t, mlx5Profile)
	run := e.apply(t, pol, "mlx5_0")
	for _, a := range run.Actions {
		switch a.Kind {
		case qos.ECN.Kind(), qos.CNPDSCP.Kind(), qos.CNPPriority.Kind():
			if a.Status != reconcile.NotApplicable {
				t.Errorf("%s: %s", a.Kind, a.Status)
			}
			continue
		}
		if a.Status != reconcile.Failed || !strings.Contains(a.Err.Error(), "ens1f0np0") || errors.Is(a.Err, syscall.EINVAL) || !errors.Is(a.Err, syscall.EOPNOTSUPP) {
			t.Errorf("%s: %s %v, want a failure naming the netdev (EOPNOTSUPP)", a.Kind, a.Status, a.Err)
		}
	}
	if a := byKind(run)[qos.Pause.Kind()]; a.Err == nil || !strings.Contains(a.Err.Error(), "no global pause") {
		t.Errorf("pause: %v", a.Err)
	}
	if a := byKind(run)[qos.StormTimeout.Kind()]; a.Err == nil || !strings.Contains(a.Err.Error(), "no PFC storm prevention") {
		t.Errorf("storm timeout: %v", a.Err)
	}
	if other := e.apply(t, pol, "mlx5_1"); byKind(other)[qos.Pause.Kind()].Status != reconcile.Changed {
		t.Errorf("the other device: %s", statuses(other.Actions))
	}
}

func TestFirmwareDCBXLeftAloneUnlessHostIsDeclared(t *testing.T) {
	e := newLossEnv(t, "mlx5")
	e.dcb.Update("ens1f0np0", func(n *dcbtest.Netdev) { n.DCBX = dcb.CapLLDManaged | dcb.CapVerIEEE })
	rule := "[[qos]]\ndevice = \"mlx5_0\"\npfc = [3]\ncable_length = 10\n"
	run := e.apply(t, policy(t, rule), "mlx5_0")
	if w := e.dcb.Writes(); len(w) != 0 {
		t.Errorf("firmware DCB written: %q", w)
	}
	if r, _ := recordOf(run, qos.CableLength.Setting()); r.State != reconcile.Differs || !strings.Contains(r.WhyText(), "firmware") {
		t.Errorf("cable length under firmware DCBX: %+v", r)
	}
	run = e.apply(t, policy(t, rule+"dcbx = \"host\"\n"), "mlx5_0")
	acts := byKind(run)
	if acts[qos.DCBX.Kind()].Status != reconcile.Changed || acts[qos.PFC.Kind()].Status != reconcile.Changed || acts[qos.CableLength.Kind()].Status != reconcile.Changed {
		t.Errorf("with dcbx = host: %s", statuses(run.Actions))
	}
	if w := e.dcb.Writes(); len(w) == 0 || w[0] != "set-dcbx ens1f0np0 0x09" {
		t.Errorf("writes %q: host ieee first", w)
	}
	// Undo puts the firmware back in charge (mode 0 on mlx5).
	if err := e.part.Undo(context.Background(), acts[qos.DCBX.Kind()]); err != nil {
		t.Fatal(err)
	}
	if w := e.dcb.Writes(); w[len(w)-1] != "set-dcbx ens1f0np0 0x00" {
		t.Errorf("undo: %q", w)
	}
}

func TestUndoPutsEachSettingBack(t *testing.T) {
	e := newLossEnv(t, "mlx5-ofed")
	pol := policy(t, mlx5Profile+"prio_buffer = [0,0,0,1,0,0,0,0]\nbuffer_size = [\"128K\",\"128K\",0,0,0,0,0,0]\n")
	d0, _ := e.dcb.Netdev("ens1f0np0")
	e0, _ := e.eth.Netdev("ens1f0np0")
	ecn0, raw0, _ := qos.ReadECN(e.kern.Host(), "ens1f0np0")
	var logged strings.Builder
	e.part.Log = slog.New(slog.NewTextHandler(&logged, nil))
	run := e.apply(t, pol, "mlx5_0")
	if !strings.Contains(logged.String(), "level=WARN") || !strings.Contains(logged.String(), "buffer ownership") {
		t.Errorf("no warning before the first buffer write on mlx5: %q", logged.String())
	}
	for i := len(run.Actions) - 1; i >= 0; i-- {
		a := run.Actions[i]
		if a.Status != reconcile.Changed {
			continue
		}
		err := e.part.Undo(context.Background(), a)
		switch a.Kind {
		case qos.PrioBuffer.Kind(), qos.BufferSize.Kind():
			// Put back, but the ownership stays with the driver.
			if !errors.Is(err, reconcile.ErrNotUndoable) || !strings.Contains(err.Error(), "ownership") {
				t.Errorf("%s undo: %v, want a partial undo naming the ownership", a.Kind, err)
			}
		default:
			if err != nil {
				t.Errorf("%s undo: %v", a.Kind, err)
			}
		}
	}
	d1, _ := e.dcb.Netdev("ens1f0np0")
	if d1.PFC.Enabled != d0.PFC.Enabled || d1.PFC.Delay != d0.PFC.Delay || *d1.ETS != *d0.ETS || *d1.Maxrate != *d0.Maxrate || *d1.Buffer != *d0.Buffer {
		t.Errorf("DCB after undo:\n%+v %+v %+v %+v\nwant\n%+v %+v %+v %+v", d1.PFC, d1.ETS, d1.Maxrate, d1.Buffer, d0.PFC, d0.ETS, d0.Maxrate, d0.Buffer)
	}
	if e1, _ := e.eth.Netdev("ens1f0np0"); e1.Pause != e0.Pause || e1.Timeout != e0.Timeout {
		t.Errorf("ethtool after undo: %+v, want %+v", e1, e0)
	}
	ecn1, raw1, _ := qos.ReadECN(e.kern.Host(), "ens1f0np0")
	if ecn1 != ecn0 || raw1.CNPDSCP != raw0.CNPDSCP {
		t.Errorf("ECN after undo: %+v %+v", ecn1, raw1)
	}
}

// TestPublishesWhatNoRuleDeclares: the daemon publishes the live DCB,
// pause and ECN of every RoCE netdev (rdmactl qos show), declared or not,
// and reads nothing on ports without a netdev of their own.
func TestPublishesWhatNoRuleDeclares(t *testing.T) {
	e := newLossEnv(t, "mlx5-ofed")
	d, err := e.kern.Host().Device("mlx5_0")
	if err != nil {
		t.Fatal(err)
	}
	run := reconcile.NewDeviceRun(policy(t, "[[qos]]\ndevice = \"mlx5_0\"\npfc = [3]\n"), &d)
	run.Publish = true
	e.part.ApplyDevice(context.Background(), run)
	seen := map[string]string{}
	for _, r := range run.Records {
		if r.Setting.Name == "qos_pfc" {
			if r.State != reconcile.Holds {
				t.Errorf("declared pfc: %+v", r)
			}
			continue
		}
		if r.IsDeclared() || r.Observed == nil {
			t.Errorf("%s: %+v, want an undeclared observed value", r.Setting.Name, r)
		}
		seen[r.Setting.Name] = reconcile.Text(r.Observed)
	}
	want := map[string]string{
		"qos_trust": "pcp", "qos_dcbx": "0x09 (host, IEEE)", "qos_cable_length": "7 m", "qos_prio_tc": "[0,0,0,0,0,0,0,0]",
		"qos_tc_bandwidth": "[13%, 13%, 13%, 13%, 12%, 12%, 12%, 12%]", "qos_tc_maxrate": "[0, 0, 0, 0, 0, 0, 0, 0]",
		"qos_prio_buffer": "[0,0,0,0,0,0,0,0]", "qos_buffer_size": "[262016, 0, 0, 0, 0, 0, 0, 0]",
		"qos_pause": "on", "qos_pfc_storm_timeout": "auto", "qos_ecn": "[0, 1, 2, 3, 4, 5, 6, 7]", "qos_cnp_dscp": "48", "qos_cnp_priority": "6",
	}
	for name, v := range want {
		if seen[name] != v {
			t.Errorf("%s published %q, want %q", name, seen[name], v)
		}
	}
	if len(seen) != len(want) {
		t.Errorf("published %v", seen)
	}
}
