package ethtooltest

import (
	"errors"
	"reflect"
	"syscall"
	"testing"

	"github.com/rdmad/rdmad/daemon/ethtool"
)

func TestFakeBehavesLikeDrivers(t *testing.T) {
	f := New()
	MLX5(f.Add("ens1f0np0"))
	f.AddVirtual("veth0")
	k := f.Kernel()

	if p, err := k.Pause("ens1f0np0"); err != nil || !p.RX || !p.TX {
		t.Errorf("pause %+v %v", p, err)
	}
	if err := k.SetPause("ens1f0np0", false, false); err != nil {
		t.Fatal(err)
	}
	if n, _ := f.Netdev("ens1f0np0"); !n.Pause.Off() {
		t.Errorf("pause not kept: %+v", n.Pause)
	}
	if ms, err := k.PFCStormTimeout("ens1f0np0"); err != nil || ms != ethtool.PFCStormAuto {
		t.Errorf("timeout %d %v", ms, err)
	}
	if err := k.SetPFCStormTimeout("ens1f0np0", 50); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("timeout 50 on mlx5: %v, want EINVAL", err)
	}
	if err := k.SetPFCStormTimeout("ens1f0np0", 100); err != nil {
		t.Error(err)
	}
	for _, err := range []error{
		func() error { _, err := k.Pause("veth0"); return err }(),
		k.SetPause("veth0", false, false),
		k.SetPFCStormTimeout("veth0", 100),
	} {
		if !ethtool.Unsupported(err) {
			t.Errorf("veth: %v", err)
		}
	}
	if _, err := k.Pause("nope"); !errors.Is(err, syscall.ENODEV) {
		t.Errorf("missing: %v", err)
	}
	f.Update("ens1f0np0", func(n *Netdev) { n.DropPause = true })
	if err := k.SetPause("ens1f0np0", true, true); err != nil {
		t.Errorf("dropped SET is acknowledged: %v", err)
	}
	if n, _ := f.Netdev("ens1f0np0"); !n.Pause.Off() {
		t.Errorf("dropped pause was kept: %+v", n.Pause)
	}
	want := []string{"set-pause ens1f0np0 rx off tx off", "set-timeout ens1f0np0 50", "set-timeout ens1f0np0 100",
		"set-pause veth0 rx off tx off", "set-timeout veth0 100", "set-pause ens1f0np0 rx on tx on"}
	if got := f.Writes(); !reflect.DeepEqual(got, want) {
		t.Errorf("writes %q\nwant %q", got, want)
	}
}
