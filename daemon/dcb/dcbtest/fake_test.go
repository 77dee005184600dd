package dcbtest

import (
	"errors"
	"reflect"
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
	if err := k.SetApps("ens1f0np0", []dcb.App{dcb.DSCP(26, 3), dcb.DSCP(48, 6)}); err != nil {
		t.Fatal(err)
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
	if err := k.SetApps("ens1f0np0", []dcb.App{dcb.DSCP(26, 3)}); !errors.Is(err, syscall.EEXIST) {
		t.Errorf("duplicate: %v", err)
	}
	if err := k.DelApps("ens1f0np0", []dcb.App{dcb.DSCP(26, 4)}); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("delete of an absent entry: %v", err)
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
	want := []string{"set-pfc ens1f0np0 0x08", "set-app ens1f0np0 26:3 48:6", "set-app ens1f0np0 26:3",
		"del-app ens1f0np0 26:4", "set-pfc ens1f0np0 0x10", "set-pfc ens1f0np0 0x10"}
	if got := f.Writes(); !reflect.DeepEqual(got, want) {
		t.Errorf("writes %q\nwant %q", got, want)
	}
}
