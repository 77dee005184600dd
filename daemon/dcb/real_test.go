package dcb

import (
	"errors"
	"os"
	"runtime"
	"syscall"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// inPrivateNetns runs f on a thread in a new network namespace holding a
// veth pair veth0/veth1. The thread is never unlocked, so Go discards it
// (and the namespace) when f returns.
func inPrivateNetns(t *testing.T, f func()) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for a network namespace")
	}
	skip := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			skip <- err
			return
		}
		veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "veth0"}, PeerName: "veth1"}
		if err := netlink.LinkAdd(veth); err != nil {
			skip <- err
			return
		}
		f()
	}()
	<-done
	select {
	case err := <-skip:
		t.Skipf("cannot create a network namespace with a veth here: %v", err)
	default:
	}
}

// TestRealKernelVethHasNoDCB sends the real requests to this host's
// kernel: a veth has no dcbnl_ops, so every command is refused with
// EOPNOTSUPP, which proves the framing and the interface name reach
// dcb_doit (a malformed request is EINVAL, a wrong name ENODEV).
func TestRealKernelVethHasNoDCB(t *testing.T) {
	var errs [12]error
	var missing [3]error
	inPrivateNetns(t, func() {
		var k Netlink
		_, errs[0] = k.Get("veth0")
		_, errs[1] = k.DCBX("veth0")
		errs[2] = k.SetPFC("veth0", PFC{Enabled: 0x08})
		errs[3] = k.SetApp("veth0", DSCP(26, 3))
		errs[4] = k.DelApp("veth0", DSCP(26, 3))
		errs[5] = k.SetApp("veth0", DgramPort(RoCEv2Port, 3))
		errs[6] = k.DelApp("veth0", DgramPort(RoCEv2Port, 3))
		errs[7] = k.SetETS("veth0", ETS{PrioTC: [8]uint8{0, 0, 0, 1}, TxBW: [8]uint8{50, 50}, TSA: [8]TSA{TSAETS, TSAETS}})
		errs[8] = k.SetMaxrate("veth0", Maxrate{Rate: [8]uint64{0, 25_000_000}})
		errs[9] = k.SetBuffer("veth0", Buffer{PrioBuffer: [8]uint8{0, 0, 0, 1}})
		errs[10] = k.SetDCBX("veth0", CapHost|CapVerIEEE)
		_, errs[11] = k.Get("nosuchdev0")
		missing[0] = k.SetETS("nosuchdev0", ETS{})
		missing[1] = k.SetDCBX("nosuchdev0", CapHost|CapVerIEEE)
		missing[2] = k.SetApp("nosuchdev0", DgramPort(RoCEv2Port, 3))
	})
	for i, err := range errs[:11] {
		if !errors.Is(err, syscall.EOPNOTSUPP) || !Unsupported(err) {
			t.Errorf("request %d on veth0: %v, want EOPNOTSUPP", i, err)
		}
	}
	if !errors.Is(errs[11], syscall.ENODEV) {
		t.Errorf("GET of a missing netdev: %v, want ENODEV", errs[11])
	}
	for i, err := range missing {
		if !errors.Is(err, syscall.ENODEV) {
			t.Errorf("SET %d on a missing netdev: %v, want ENODEV", i, err)
		}
	}
}
