package capture

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/rdmad/rdmad/daemon/dcb"
	"github.com/rdmad/rdmad/daemon/dcb/dcbtest"
	"github.com/rdmad/rdmad/daemon/ethtool/ethtooltest"
	"github.com/rdmad/rdmad/daemon/fixturekernel"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
)

// On a real host the capture reads each RDMA netdev's DCB and ethtool
// state through rdmad's codecs (here on the fake kernels behind them) and
// writes fixture/kernel.json: the unpacked capture's fixture kernel then
// answers as the host's did, refusals and missing objects included.
func TestKernelStateIsReadThroughTheCodecs(t *testing.T) {
	root := hosttest.Copy(t, "demo")
	if err := os.Remove(filepath.Join(root, fixturekernel.File)); err != nil {
		t.Fatal(err)
	}
	fd, fe := dcbtest.New(), ethtooltest.New()
	n := fd.Add("ens1f0np0")
	dcbtest.MLX5(n)
	n.PFC.Enabled = 1 << 3
	n.Apps = []dcb.App{{Selector: dcb.SelDSCP, Protocol: 26, Priority: 3}}
	dcbtest.MLX5(fd.Add("ens1f1np1"))
	fd.AddNoDCB("veth0") // ens2 (mlx4_en) is not there: ENODEV
	ethtooltest.MLX5(fe.Add("ens1f0np0"))
	fe.Add("ens1f1np1")
	fe.AddVirtual("veth0")
	k := &Kernel{DCB: fd.Kernel(), Ethtool: fe.Kernel()}

	tarball, _ := capture(t, Options{Root: root, Dir: "host", Kernel: k})
	dst := t.TempDir()
	unpack(t, tarball, dst)
	h := host.New(filepath.Join(dst, "host"))
	fk := fixturekernel.New(h)
	s, err := fk.Read()
	if err != nil {
		t.Fatal(err)
	}
	for _, ifname := range []string{"ens1f0np0", "ens1f1np1", "ens2", "veth0"} {
		if _, ok := s.Netdevs[ifname]; !ok {
			t.Errorf("%s is not in %s", ifname, fixturekernel.File)
		}
	}
	if d := s.Netdevs["ens1f0np0"].Driver; d != "mlx5_core" {
		t.Errorf("ens1f0np0's driver = %q", d)
	}
	if d := s.Netdevs["veth0"].Driver; d != "" {
		t.Errorf("veth0's driver = %q", d)
	}
	for _, ifname := range []string{"ens1f0np0", "ens1f1np1", "veth0", "ens2"} {
		wantIE, wantErr := k.DCB.Get(ifname)
		gotIE, gotErr := fk.Get(ifname)
		if !sameErrno(wantErr, gotErr) || wantErr == nil && !cmp.Equal(wantIE, gotIE, cmpopts.EquateEmpty()) {
			t.Errorf("%s: DCB differs (-the host's +the capture's):\n%s%v, %v", ifname, cmp.Diff(wantIE, gotIE, cmpopts.EquateEmpty()), wantErr, gotErr)
		}
		wantP, wantErr := k.Ethtool.Pause(ifname)
		gotP, gotErr := fk.Pause(ifname)
		if !sameErrno(wantErr, gotErr) || wantP != gotP {
			t.Errorf("%s: pause %+v, %v; the host's %+v, %v", ifname, gotP, gotErr, wantP, wantErr)
		}
		wantT, wantErr := k.Ethtool.PFCStormTimeout(ifname)
		gotT, gotErr := fk.PFCStormTimeout(ifname)
		if !sameErrno(wantErr, gotErr) || wantT != gotT {
			t.Errorf("%s: storm timeout %d, %v; the host's %d, %v", ifname, gotT, gotErr, wantT, wantErr)
		}
	}
	if ie, err := fk.Get("ens1f0np0"); err != nil || ie.PFC == nil || ie.PFC.Enabled != 1<<3 || len(ie.Apps) != 1 {
		t.Errorf("ens1f0np0's PFC and APP table did not come through: %+v, %v", ie, err)
	}
}

// sameErrno reports whether a and b are both nil or carry the same errno.
func sameErrno(a, b error) bool {
	if a == nil || b == nil {
		return a == b
	}
	var ea, eb syscall.Errno
	return errors.As(a, &ea) && errors.As(b, &eb) && ea == eb
}

// Under a fixture's root the fixture's own state file is the capture's.
func TestKernelStateOfAFixtureIsItsFile(t *testing.T) {
	root := hosttest.Copy(t, "mlx5")
	tarball, _ := capture(t, Options{Root: root, Dir: "host"})
	dst := t.TempDir()
	unpack(t, tarball, dst)
	want, err := fixturekernel.New(host.New(root)).Read()
	if err != nil {
		t.Fatal(err)
	}
	got, err := fixturekernel.New(host.New(filepath.Join(dst, "host"))).Read()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(want, got) {
		t.Errorf("the capture's %s differs from the fixture's", fixturekernel.File)
	}
}
