package ethtool

import (
	"errors"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/rdmad/rdmad/test/testdeps"
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

// TestRealKernelVethHasNoPauseNorTunable sends the real requests to this
// host's kernel: a veth has neither pause nor tunables, so each is refused
// with EOPNOTSUPP, which proves the family, the framing and the name reach
// ethnl (a malformed request is EINVAL, a wrong name ENODEV) and that the
// ioctl works on an AF_NETLINK socket, the only family the unit allows
// besides AF_UNIX.
func TestRealKernelVethHasNoPauseNorTunable(t *testing.T) {
	var errs [4]error
	var missing [4]error
	inPrivateNetns(t, func() {
		var k Netlink
		_, errs[0] = k.Pause("veth0")
		errs[1] = k.SetPause("veth0", false, false)
		_, errs[2] = k.PFCStormTimeout("veth0")
		errs[3] = k.SetPFCStormTimeout("veth0", 100)
		_, missing[0] = k.Pause("nosuchdev0")
		missing[1] = k.SetPause("nosuchdev0", false, false)
		_, missing[2] = k.PFCStormTimeout("nosuchdev0")
		missing[3] = k.SetPFCStormTimeout("nosuchdev0", 100)
	})
	if errors.Is(errs[0], ErrNoFamily) {
		t.Skip("this kernel has no ethtool netlink")
	}
	for i, err := range errs {
		if !errors.Is(err, syscall.EOPNOTSUPP) || !Unsupported(err) {
			t.Errorf("request %d on veth0: %v, want EOPNOTSUPP", i, err)
		}
	}
	for i, err := range missing {
		if !errors.Is(err, syscall.ENODEV) {
			t.Errorf("request %d on a missing netdev: %v, want ENODEV", i, err)
		}
	}
}

// TestRealKernelMonitorGroup joins the ethtool monitor group on this
// host's kernel and sees the notification ethtool -K causes on a veth
// (a features change: no virtual netdev has pause to change), from the
// kernel, naming the netdev.
func TestRealKernelMonitorGroup(t *testing.T) {
	tool := testdeps.Tool(t, "ethtool", "ethtool")
	var got []Notification
	var recvErr error
	inPrivateNetns(t, func() {
		m, err := OpenMonitor(0)
		if err != nil {
			recvErr = err
			return
		}
		defer m.Close()
		if err := m.sock.SetReceiveTimeout(&unix.Timeval{Sec: 5}); err != nil {
			recvErr = err
			return
		}
		// ethtool runs in this thread's namespace: the child inherits it.
		cmd := exec.Command(tool, "-K", "veth0", "tso", "off")
		if out, err := cmd.CombinedOutput(); err != nil {
			recvErr = errors.New("ethtool -K: " + err.Error() + ": " + string(out))
			return
		}
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) && len(got) == 0 {
			ns, err := m.Receive()
			if err != nil {
				recvErr = err
				return
			}
			for _, n := range ns {
				if n.Ifname == "veth0" {
					got = append(got, n)
				}
			}
		}
	})
	if errors.Is(recvErr, ErrNoFamily) {
		t.Skip("this kernel has no ethtool netlink")
	}
	if recvErr != nil {
		t.Fatal(recvErr)
	}
	if len(got) == 0 || got[0].Pause() || got[0].Ifindex == 0 {
		t.Errorf("notifications for veth0: %+v, want a features notification with its index", got)
	}
}
