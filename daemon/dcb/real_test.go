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
	var errs [6]error
	inPrivateNetns(t, func() {
		var k Netlink
		_, errs[0] = k.Get("veth0")
		_, errs[1] = k.DCBX("veth0")
		errs[2] = k.SetPFC("veth0", PFC{Enabled: 0x08})
		errs[3] = k.SetApps("veth0", []App{DSCP(26, 3)})
		errs[4] = k.DelApps("veth0", []App{DSCP(26, 3)})
		_, errs[5] = k.Get("nosuchdev0")
	})
	for i, err := range errs[:5] {
		if !errors.Is(err, syscall.EOPNOTSUPP) || !Unsupported(err) {
			t.Errorf("request %d on veth0: %v, want EOPNOTSUPP", i, err)
		}
	}
	if !errors.Is(errs[5], syscall.ENODEV) {
		t.Errorf("GET of a missing netdev: %v, want ENODEV", errs[5])
	}
}
