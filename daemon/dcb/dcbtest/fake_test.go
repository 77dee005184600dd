package dcbtest

import (
	"errors"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/rdmad/rdmad/daemon/dcb"
)

func TestFakeBehavesLikeDrivers(t *testing.T) {
	f := New()
	f.Add("ens1f0np0")
	f.AddNoDCB("veth0")
	k := f.Kernel()

	if _, err := k.Get("veth0"); !errors.Is(err, syscall.EOPNOTSUPP) {
		t.Errorf("veth: %v", err)
	}
	if _, err := k.Get("nope"); !errors.Is(err, syscall.ENODEV) {
		t.Errorf("missing: %v", err)
	}
	if err := k.SetPFC("ens1f0np0", dcb.PFC{Enabled: 0x08}); err != nil {
		t.Fatal(err)
	}
	for _, a := range []dcb.App{dcb.DSCP(26, 3), dcb.DSCP(48, 6)} {
		if err := k.SetApp("ens1f0np0", a); err != nil {
			t.Fatal(err)
		}
	}
	ie, err := k.Get("ens1f0np0")
	if err != nil {
		t.Fatal(err)
	}
	if ie.PFC == nil || ie.PFC.Enabled != 0x08 {
		t.Errorf("PFC %+v", ie.PFC)
	}
	// Newest first, as the kernel's dcb_app_list.
	if want := []dcb.App{dcb.DSCP(48, 6), dcb.DSCP(26, 3)}; !reflect.DeepEqual(ie.Apps, want) {
		t.Errorf("apps %v, want %v", ie.Apps, want)
	}
	if err := k.SetApp("ens1f0np0", dcb.DSCP(26, 3)); !errors.Is(err, syscall.EEXIST) {
		t.Errorf("duplicate: %v", err)
	}
	if err := k.DelApp("ens1f0np0", dcb.DSCP(26, 4)); !errors.Is(err, syscall.ENOENT) || !strings.Contains(err.Error(), "dscp-prio 26:4") {
		t.Errorf("delete of an absent entry: %v, want ENOENT naming the entry", err)
	}

	f.Update("ens1f0np0", func(n *Netdev) { n.RefusePFC = syscall.EINVAL })
	err = k.SetPFC("ens1f0np0", dcb.PFC{Enabled: 0x10})
	var se *dcb.StatusError
	if !errors.As(err, &se) || !errors.Is(err, syscall.EINVAL) {
		t.Errorf("refused PFC: %v", err)
	}
	f.Update("ens1f0np0", func(n *Netdev) { n.RefusePFC, n.DropPFC = 0, true })
	if err := k.SetPFC("ens1f0np0", dcb.PFC{Enabled: 0x10}); err != nil {
		t.Errorf("dropped PFC is acknowledged: %v", err)
	}
	if n, _ := f.Netdev("ens1f0np0"); n.PFC.Enabled != 0x08 {
		t.Errorf("dropped PFC was kept: %#x", n.PFC.Enabled)
	}
	want := []string{"set-pfc ens1f0np0 0x08", "set-app ens1f0np0 26:3", "set-app ens1f0np0 48:6", "set-app ens1f0np0 26:3",
		"del-app ens1f0np0 26:4", "set-pfc ens1f0np0 0x10", "set-pfc ens1f0np0 0x10"}
	if got := f.Writes(); !reflect.DeepEqual(got, want) {
		t.Errorf("writes %q\nwant %q", got, want)
	}
}

// TestFakeSkipsWhatTheDriverLacks: as dcbnl_ieee_set, a SET of an object
// the driver has no operation for is acknowledged with status 0 and
// changes nothing, and the GET leaves it out.
func TestFakeSkipsWhatTheDriverLacks(t *testing.T) {
	f := New()
	f.Add("bnxt0")
	k := f.Kernel()
	for name, err := range map[string]error{
		"ets":     k.SetETS("bnxt0", dcb.ETS{PrioTC: [8]uint8{0, 0, 0, 1}}),
		"maxrate": k.SetMaxrate("bnxt0", dcb.Maxrate{Rate: [8]uint64{0, 25_000_000}}),
		"buffer":  k.SetBuffer("bnxt0", dcb.Buffer{PrioBuffer: [8]uint8{0, 0, 0, 1}}),
	} {
		if err != nil {
			t.Errorf("%s SET on a driver without it: %v, want status 0", name, err)
		}
	}
	ie, err := k.Get("bnxt0")
	if err != nil || ie.ETS != nil || ie.Maxrate != nil || ie.Buffer != nil {
		t.Errorf("GET: %+v %v, want no ETS, rate limits or buffers", ie, err)
	}
	if err := k.SetDCBX("bnxt0", dcb.CapHost|dcb.CapVerIEEE); !errors.Is(err, syscall.EOPNOTSUPP) {
		t.Errorf("DCBX SET without setdcbx: %v", err)
	}
}

// TestFakeMLX5 checks the mlx5 behaviour the qos part relies on.
func TestFakeMLX5(t *testing.T) {
	f := New()
	MLX5(f.Add("ens1f0np0"))
	k := f.Kernel()
	// Rates: 100 Mbit/s units up to 25.5 Gbit/s, 1 Gbit/s above.
	if err := k.SetMaxrate("ens1f0np0", dcb.Maxrate{Rate: [8]uint64{0, 25_000_000, 150, 25_550_000, 40_700_000}}); err != nil {
		t.Fatal(err)
	}
	n, _ := f.Netdev("ens1f0np0")
	if want := [8]uint64{0, 25_000_000, 100_000, 25_000_000, 40_000_000}; n.Maxrate.Rate != want {
		t.Errorf("rates %v, want %v", n.Maxrate.Rate, want)
	}
	// Cable length: 0 and 1000 or more are ignored.
	for _, d := range []uint16{10, 0, 1000} {
		if err := k.SetPFC("ens1f0np0", dcb.PFC{Enabled: 0x08, Delay: d}); err != nil {
			t.Fatal(err)
		}
	}
	if n, _ := f.Netdev("ens1f0np0"); n.PFC.Delay != 10 || n.LinkToggles != 1 {
		t.Errorf("delay %d, want 10 kept; %d link toggles, want 1 (the mask changed once)", n.PFC.Delay, n.LinkToggles)
	}
	// DSCP entries only.
	var se *dcb.StatusError
	if err := k.SetApp("ens1f0np0", dcb.DgramPort(dcb.RoCEv2Port, 3)); !errors.As(err, &se) || !errors.Is(err, syscall.EINVAL) {
		t.Errorf("datagram entry on mlx5: %v, want a refusal with EINVAL", err)
	}
	// DCBX: host without the IEEE bit is refused, host ieee taken.
	var re *dcb.DCBXRefusedError
	if err := k.SetDCBX("ens1f0np0", dcb.CapHost); !errors.As(err, &re) || re.Status != 1 {
		t.Errorf("host without ieee: %v", err)
	}
	if err := k.SetDCBX("ens1f0np0", dcb.CapHost|dcb.CapVerIEEE); err != nil {
		t.Errorf("host ieee: %v", err)
	}
	// The read-only fields stay the driver's.
	if err := k.SetETS("ens1f0np0", dcb.ETS{Cap: 2, PrioTC: [8]uint8{0, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if n, _ := f.Netdev("ens1f0np0"); n.ETS.Cap != 8 || n.ETS.PrioTC[3] != 1 {
		t.Errorf("ETS %+v", n.ETS)
	}
	want := []string{"set-dcbx ens1f0np0 0x01", "set-dcbx ens1f0np0 0x09"}
	var got []string
	for _, w := range f.Writes() {
		if len(w) > 8 && w[:8] == "set-dcbx" {
			got = append(got, w)
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("DCBX writes %q, want %q", got, want)
	}
}
