package qos_test

import (
	"errors"
	"strings"
	"syscall"
	"testing"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/dcb"
	"github.com/rdmad/rdmad/daemon/dcb/dcbtest"
	"github.com/rdmad/rdmad/daemon/ethtool/ethtooltest"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/daemon/qos"
)

func isLacks(err error) bool { return qos.IsLacks(err) }

func TestCableLengthOnlyOnMLX5AndNeverTogglesTheLink(t *testing.T) {
	f := dcbtest.New()
	dcbtest.MLX5(f.Add("ens1f0np0"))
	f.Add("bnxt0")
	k := f.Kernel()

	ie, _ := k.Get("bnxt0")
	if _, err := qos.CableLengthOf("bnxt0", "bnxt_en", ie); !isLacks(err) || !strings.Contains(err.Error(), "bnxt_en") {
		t.Errorf("bnxt_en: %v, want a not-applicable naming the driver", err)
	}
	ie, _ = k.Get("ens1f0np0")
	c, err := qos.CableLengthOf("ens1f0np0", qos.MLX5Driver, ie)
	if err != nil || c.Metres != 7 {
		t.Fatalf("mlx5 default cable length: %+v %v", c, err)
	}
	// PFC on 3 first (the mask changes: one link toggle), then the cable
	// length, written with the mask as the driver holds it: no toggle.
	if err := k.SetPFC("ens1f0np0", dcb.PFC{Cap: 8, Enabled: 0x08, Delay: 7}); err != nil {
		t.Fatal(err)
	}
	ie, _ = k.Get("ens1f0np0")
	if err := k.SetPFC("ens1f0np0", qos.NextPFCDelay(*ie.PFC, 10)); err != nil {
		t.Fatal(err)
	}
	n, _ := f.Netdev("ens1f0np0")
	if n.PFC.Delay != 10 || n.PFC.Enabled != 0x08 || n.LinkToggles != 1 {
		t.Errorf("after the cable length: delay %d mask %#x toggles %d", n.PFC.Delay, n.PFC.Enabled, n.LinkToggles)
	}
	// mlx5 without configurable buffers reports no delay.
	f.Update("ens1f0np0", func(n *dcbtest.Netdev) { n.PFC.Delay = 0 })
	ie, _ = k.Get("ens1f0np0")
	if _, err := qos.CableLengthOf("ens1f0np0", qos.MLX5Driver, ie); !isLacks(err) {
		t.Errorf("mlx5 reporting no delay: %v", err)
	}
}

func TestETSReadModifyWriteAndJudgement(t *testing.T) {
	f := dcbtest.New()
	dcbtest.MLX5(f.Add("ens1f0np0"))
	f.Add("nodcbets")
	k := f.Kernel()
	ie, _ := k.Get("nodcbets")
	if _, _, err := qos.ETSOf("nodcbets", "ice", ie); !isLacks(err) || !strings.Contains(err.Error(), "ieee_getets") || !strings.Contains(err.Error(), "ice") {
		t.Errorf("driver without ETS: %v", err)
	}
	ie, _ = k.Get("ens1f0np0")
	prio, bw, err := qos.ETSOf("ens1f0np0", qos.MLX5Driver, ie)
	if err != nil || bw.Cap != 8 {
		t.Fatal(prio, bw, err)
	}
	want := qos.PrioTCValue{Netdev: "ens1f0np0", Map: [8]uint8{0, 0, 0, 1}}
	if err := k.SetETS("ens1f0np0", qos.NextETSPrioTC(*ie.ETS, want)); err != nil {
		t.Fatal(err)
	}
	wantBW := config.ETSBandwidth{Percent: [8]uint8{50, 50}, TSA: [8]config.TSA{"ets", "ets", "strict", "strict", "strict", "strict", "strict", "strict"}}
	ie, _ = k.Get("ens1f0np0")
	if err := k.SetETS("ens1f0np0", qos.NextETSBandwidth(*ie.ETS, wantBW)); err != nil {
		t.Fatal(err)
	}
	ie, _ = k.Get("ens1f0np0")
	prio, bw, _ = qos.ETSOf("ens1f0np0", qos.MLX5Driver, ie)
	if prio.Map != want.Map {
		t.Errorf("the bandwidth write changed prio_tc: %v", prio)
	}
	if !qos.ETSBandwidthHolds(bw, qos.BandwidthValue{BW: wantBW}) || bw.String() != "[50%, 50%, strict, strict, strict, strict, strict, strict]" {
		t.Errorf("bandwidth %s does not hold", bw)
	}
	// A strict class's share is not compared; an ets class's is.
	odd := bw
	odd.BW.Percent[5] = 100
	if !qos.ETSBandwidthHolds(odd, qos.BandwidthValue{BW: wantBW}) {
		t.Error("a strict class's share counted")
	}
	odd.BW.Percent[1] = 40
	if qos.ETSBandwidthHolds(odd, qos.BandwidthValue{BW: wantBW}) {
		t.Error("an ets class's share ignored")
	}
	// Classes the port does not have.
	if err := qos.CheckPrioTC("ens1f0np0", 4, qos.PrioTCValue{Map: [8]uint8{0, 0, 0, 5}}); err == nil || !strings.Contains(err.Error(), "has 4 traffic classes") {
		t.Errorf("prio_tc beyond ets_cap: %v", err)
	}
	if err := qos.CheckBandwidth("ens1f0np0", 2, config.ETSBandwidth{Percent: [8]uint8{50, 0, 50}, TSA: [8]config.TSA{"ets", "strict", "ets"}}); err == nil {
		t.Error("a share beyond ets_cap accepted")
	}
}

func TestMaxrateRoundsToTheDriversUnits(t *testing.T) {
	for _, c := range []struct {
		driver   string
		in, want config.Rate
	}{
		{qos.MLX5Driver, 0, 0},
		{qos.MLX5Driver, 150, 100_000},             // at least one 100 Mbit/s unit
		{qos.MLX5Driver, 1_550_000, 1_500_000},     // 100 Mbit/s units
		{qos.MLX5Driver, 25_500_000, 25_500_000},   // the last 100 Mbit/s value
		{qos.MLX5Driver, 25_600_000, 25_000_000},   // 1 Gbit/s units above
		{qos.MLX5Driver, 100_000_000, 100_000_000}, // 100 Gbit/s
		{"bnxt_en", 1_550_000, 1_550_000},          // kept as written
	} {
		if got := qos.RoundRate(c.driver, c.in); got != c.want {
			t.Errorf("RoundRate(%s, %s) = %s, want %s", c.driver, c.in, got, c.want)
		}
	}
	f := dcbtest.New()
	dcbtest.MLX5(f.Add("ens1f0np0"))
	k := f.Kernel()
	want := qos.MaxrateValue{Netdev: "ens1f0np0", Driver: qos.MLX5Driver, Rates: [8]config.Rate{0, 1_550_000, 0, 40_700_000}}
	if err := k.SetMaxrate("ens1f0np0", qos.MaxrateStruct(want)); err != nil {
		t.Fatal(err)
	}
	ie, _ := k.Get("ens1f0np0")
	have, err := qos.MaxrateOf("ens1f0np0", qos.MLX5Driver, ie)
	if err != nil || !qos.MaxrateHolds(have, want) {
		t.Errorf("mlx5 read back %s (%v) does not hold %s after rounding", have, err, want)
	}
	if have.Rates[1] == want.Rates[1] {
		t.Error("the fake kept 1550Mbit exactly: the rounding is not exercised")
	}
	exact := want
	exact.Driver = "other"
	if qos.MaxrateHolds(have, exact) {
		t.Error("a driver without known units compared after mlx5's rounding")
	}
}

func TestBuffersKeepWhatIsNotDeclared(t *testing.T) {
	cur := dcb.Buffer{PrioBuffer: [8]uint8{1, 1}, Size: [8]uint32{1000, 2000}, Total: 9000}
	next := qos.NextBuffer(cur, &qos.PrioBufferValue{Map: [8]uint8{0, 0, 0, 1}}, nil)
	if next.PrioBuffer != [8]uint8{0, 0, 0, 1} || next.Size != cur.Size || next.Total != 9000 {
		t.Errorf("prio_buffer only: %+v", next)
	}
	next = qos.NextBuffer(cur, nil, &qos.BufferSizeValue{Sizes: [8]uint32{131072}})
	if next.PrioBuffer != cur.PrioBuffer || next.Size[0] != 131072 {
		t.Errorf("buffer_size only: %+v", next)
	}
	if w := qos.BufferOwnershipWarning("ens1f0np0"); !strings.Contains(w, "ownership") || !strings.Contains(w, "ens1f0np0") {
		t.Error(w)
	}
	if s := (qos.BufferSizeValue{Sizes: [8]uint32{131072, 1000}}).String(); s != "[128K, 1000, 0, 0, 0, 0, 0, 0]" {
		t.Error(s)
	}
}

func TestDatagramPortEntries(t *testing.T) {
	want := map[uint16]uint8{4791: 3}
	if err := qos.CheckDgramDriver("ens1f0np0", qos.MLX5Driver, want); err == nil || !strings.Contains(err.Error(), "DSCP APP entries only") {
		t.Errorf("mlx5: %v", err)
	}
	if err := qos.CheckDgramDriver("bnxt0", qos.BNXTDriver, want); err != nil {
		t.Errorf("bnxt_en 4791: %v", err)
	}
	if err := qos.CheckDgramDriver("bnxt0", qos.BNXTDriver, map[uint16]uint8{4791: 3, 4792: 3}); err == nil {
		t.Error("bnxt_en took another port")
	}
	// The entries of another port and selector are left alone; a wrong
	// priority and a repeat go; the missing one comes.
	have := []dcb.App{dcb.DgramPort(4791, 0), dcb.DgramPort(5000, 1), dcb.DSCP(26, 3), dcb.DgramPort(4792, 2), dcb.DgramPort(4792, 2)}
	del, add := qos.PlanDgram(have, map[uint16]uint8{4791: 3, 4792: 2})
	if len(del) != 2 || del[0] != dcb.DgramPort(4791, 0) || del[1] != dcb.DgramPort(4792, 2) || len(add) != 1 || add[0] != dcb.DgramPort(4791, 3) {
		t.Errorf("plan: del %v add %v", del, add)
	}
	ie := dcb.IEEE{Apps: []dcb.App{dcb.DgramPort(4791, 3), dcb.DgramPort(5000, 1)}}
	got := qos.DgramPortsOf("bnxt0", ie, want)
	if !qos.DgramPortsHolds(got, qos.UDPPortPrioValue{Map: want}) || got.String() != "{ 4791 = 3 }" {
		t.Errorf("holds: %+v", got)
	}
	// Through a fake bnxt_en-like driver, one entry per message.
	f := dcbtest.New()
	f.Add("bnxt0")
	k := f.Kernel()
	for _, a := range add {
		if err := k.SetApp("bnxt0", a); err != nil {
			t.Fatal(err)
		}
	}
	if w := f.Writes(); len(w) != 1 || w[0] != "set-app bnxt0 dgram 4791:3" {
		t.Errorf("writes %q", w)
	}
}

func TestDCBXHostMode(t *testing.T) {
	if !qos.DCBXHolds(qos.DCBXValue{Caps: dcb.CapHost | dcb.CapVerIEEE | dcb.CapVerCEE}, qos.DCBXValue{}) {
		t.Error("host ieee (and cee) does not hold")
	}
	for _, caps := range []uint8{dcb.CapHost, dcb.CapLLDManaged | dcb.CapVerIEEE, dcb.CapHost | dcb.CapLLDManaged | dcb.CapVerIEEE} {
		if qos.DCBXHolds(qos.DCBXValue{Caps: caps}, qos.DCBXValue{}) {
			t.Errorf("%#x holds", caps)
		}
	}
	if m := qos.DCBXUndoMode(dcb.CapLLDManaged | dcb.CapVerIEEE); m != 0 {
		t.Errorf("back to firmware: %#x, want 0 (mlx5's firmware mode)", m)
	}
	if m := qos.DCBXUndoMode(dcb.CapHost | dcb.CapVerCEE); m != dcb.CapHost|dcb.CapVerCEE {
		t.Errorf("back to host cee: %#x", m)
	}
	f := dcbtest.New()
	n := f.Add("ens1f0np0")
	dcbtest.MLX5(n)
	n.DCBX = dcb.CapLLDManaged | dcb.CapVerIEEE
	if err := f.Kernel().SetDCBX("ens1f0np0", qos.HostIEEE); err != nil {
		t.Fatal(err)
	}
	if got, _ := f.Kernel().DCBX("ens1f0np0"); !qos.DCBXHolds(qos.DCBXValue{Caps: got}, qos.DCBXValue{}) {
		t.Errorf("after host ieee: %#x", got)
	}
}

func TestPauseAndStormTimeout(t *testing.T) {
	f := ethtooltest.New()
	ethtooltest.MLX5(f.Add("ens1f0np0"))
	f.AddVirtual("veth0")
	k := f.Kernel()
	have, err := qos.ReadPause(k, "ens1f0np0")
	if err != nil || have.String() != "on" || qos.PauseHolds(have, qos.DeclaredPause("ens1f0np0", false)) {
		t.Errorf("pause %v %v", have, err)
	}
	if _, err := qos.ReadPause(k, "veth0"); err == nil || !strings.Contains(err.Error(), "veth0 has no global pause") || !errors.Is(err, syscall.EOPNOTSUPP) {
		t.Errorf("veth: %v, want the netdev named", err)
	}
	st, err := qos.ReadStormTimeout(k, "ens1f0np0")
	if err != nil || st.String() != "auto" {
		t.Errorf("timeout %v %v", st, err)
	}
	if _, err := qos.ReadStormTimeout(k, "veth0"); err == nil || !strings.Contains(err.Error(), "veth0 has no PFC storm prevention") {
		t.Errorf("veth: %v", err)
	}
}

func TestECNThroughOFEDSysfs(t *testing.T) {
	root := hosttest.Copy(t, "mlx5-ofed")
	h := host.New(root)
	have, raw, err := qos.ReadECN(h, "ens1f0np0")
	if err != nil || have.On != 0xff || raw.CNPDSCP != 48 {
		t.Fatalf("as firmware sets it: %+v %v", have, err)
	}
	want := qos.DeclaredECN("ens1f0np0", []uint8{3})
	if qos.ECNHolds(have, want) || want.String() != "[3]" {
		t.Errorf("all on holds ecn = [3]")
	}
	if err := qos.WriteECN(h, "ens1f0np0", have, want); err != nil {
		t.Fatal(err)
	}
	got, _, err := qos.ReadECN(h, "ens1f0np0")
	if err != nil || !qos.ECNHolds(got, want) {
		t.Errorf("after write: %+v %v", got, err)
	}
	// Only the files that differ are written.
	k := hosttest.NewKernel(root)
	if err := qos.WriteECN(k.Host(), "ens1f0np0", got, qos.DeclaredECN("ens1f0np0", []uint8{3, 4})); err != nil {
		t.Fatal(err)
	}
	if k.WriteCount() != 2 {
		t.Errorf("%d writes for one priority at two points", k.WriteCount())
	}
	// Upstream: no files; the error names the persistent route.
	if _, _, err := qos.ReadECN(host.New(hosttest.FixtureDir("mlx5")), "ens1f0np0"); err == nil {
		t.Error("upstream read without error")
	}
	if err := qos.UpstreamECN("ens1f0np0", "mlx5_core", 1); !strings.Contains(err.Error(), "ROCE_CC_PRIO_MASK_P1") || !strings.Contains(err.Error(), "mlxconfig") {
		t.Error(err)
	}
}

// A tc_bandwidth put back when its rule goes is the one ETSOf read,
// algorithms included: mlx5 starts with every class vendor-specific, and
// putting that back as strict would leave the port as no one set it.
func TestNextETSBandwidthPutsBackWhatETSOfRead(t *testing.T) {
	found := dcb.ETS{Cap: 8, TxBW: [8]uint8{100, 100, 100, 100, 100, 100, 100, 100}, PrioTC: [8]uint8{1, 0, 2, 3, 4, 5, 6, 7}}
	for i := range found.TSA {
		found.TSA[i] = dcb.TSAVendor
	}
	found.TSA[6], found.TSA[7] = dcb.TSACBShaper, dcb.TSA(7)
	_, bw, err := qos.ETSOf("ens1f0np0", qos.MLX5Driver, dcb.IEEE{ETS: &found})
	if err != nil {
		t.Fatal(err)
	}
	changed := dcb.ETS{Cap: 8, TSA: [8]dcb.TSA{dcb.TSAETS, dcb.TSAETS}, TxBW: [8]uint8{50, 50}}
	if got := qos.NextETSBandwidth(changed, bw.BW); got.TSA != found.TSA || got.TxBW != found.TxBW {
		t.Errorf("put back %v %v, want %v %v", got.TSA, got.TxBW, found.TSA, found.TxBW)
	}
}
