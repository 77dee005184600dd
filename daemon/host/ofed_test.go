package host_test

import (
	"strings"
	"syscall"
	"testing"

	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
)

const ecnDir = "sys/devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0/net/ens1f0np0/ecn/"

func TestOFEDSysfsPresent(t *testing.T) {
	h := host.New(hosttest.FixtureDir("mlx5-ofed"))
	e, err := h.ReadECN("ens1f0np0")
	if err != nil {
		t.Fatal(err)
	}
	// Firmware enables all eight priorities and marks CNPs DSCP 48, priority 6.
	want := host.ECN{Present: true, RP: 0xff, NP: 0xff, CNPDSCP: 48, CNPPrio: 6}
	if e != want || e.On() != 0xff {
		t.Errorf("ECN %+v, want %+v", e, want)
	}
	tc, err := h.ReadTrafficClass("mlx5_0", 1)
	if err != nil || tc != (host.TrafficClass{Present: true}) || tc.String() != "unset" {
		t.Errorf("traffic class %+v %v, want present and unset", tc, err)
	}
}

func TestOFEDSysfsAbsentUpstream(t *testing.T) {
	h := host.New(hosttest.FixtureDir("mlx5"))
	e, err := h.ReadECN("ens1f0np0")
	if err != nil || e.Present || e.CNPDSCP != -1 || e.CNPPrio != -1 {
		t.Errorf("upstream ECN %+v %v, want absent", e, err)
	}
	tc, err := h.ReadTrafficClass("mlx5_0", 1)
	if err != nil || tc.Present || tc.String() != "absent" {
		t.Errorf("upstream traffic class %+v %v, want absent", tc, err)
	}
}

func TestOFEDSysfsWriteAndReadBack(t *testing.T) {
	root := hosttest.Copy(t, "mlx5-ofed")
	h := host.New(root)
	for p := 0; p < 8; p++ {
		on := p == 3
		if err := h.WriteECNEnable("ens1f0np0", host.ECNReaction, p, on); err != nil {
			t.Fatal(err)
		}
		if err := h.WriteECNEnable("ens1f0np0", host.ECNNotification, p, on || p == 5); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.WriteCNPDSCP("ens1f0np0", 46); err != nil {
		t.Fatal(err)
	}
	if err := h.WriteCNPPrio("ens1f0np0", 7); err != nil {
		t.Fatal(err)
	}
	e, err := h.ReadECN("ens1f0np0")
	if err != nil || e.RP != 0x08 || e.NP != 0x28 || e.On() != 0x08 || e.CNPDSCP != 46 || e.CNPPrio != 7 {
		t.Errorf("after writes: %+v %v", e, err)
	}
	if got := hosttest.Read(t, root, ecnDir+"roce_np/enable/5"); got != "1" {
		t.Errorf("roce_np/enable/5 holds %q", got)
	}
	for _, err := range []error{
		h.WriteECNEnable("ens1f0np0", "roce_xx", 3, true),
		h.WriteECNEnable("ens1f0np0", host.ECNReaction, 8, true),
		h.WriteCNPDSCP("ens1f0np0", 64),
		h.WriteCNPPrio("ens1f0np0", -1),
	} {
		if err == nil {
			t.Error("an out-of-range write was accepted")
		}
	}

	if err := h.WriteTrafficClass("mlx5_0", 1, host.TrafficClass{Set: true, Value: 106}); err != nil {
		t.Fatal(err)
	}
	// The fixture is a plain file: what the driver then prints is put there
	// by hand (it keeps the number and prints it as "Global tclass=N").
	if got := hosttest.Read(t, root, host.TrafficClassPath("mlx5_0", 1)); got != "106" {
		t.Errorf("wrote %q", got)
	}
	if err := h.WriteTrafficClass("mlx5_0", 1, host.TrafficClass{}); err != nil {
		t.Fatal(err)
	}
	if got := hosttest.Read(t, root, host.TrafficClassPath("mlx5_0", 1)); got != "-1" {
		t.Errorf("unset wrote %q, want -1 (the driver's value for no global class)", got)
	}
}

func TestOFEDSysfsOddContents(t *testing.T) {
	root := hosttest.Copy(t, "mlx5-ofed")
	h := host.New(root)
	// The driver prints nothing when its firmware query fails.
	hosttest.Write(t, root, ecnDir+"roce_rp/enable/2", "")
	e, err := h.ReadECN("ens1f0np0")
	if err != nil || e.Unread != 0x04 || e.RP&0x04 != 0 || e.On()&0x04 != 0 {
		t.Errorf("empty enable file: %+v %v, want priority 2 unread", e, err)
	}
	hosttest.Write(t, root, ecnDir+"roce_np/cnp_dscp", "")
	if e, err := h.ReadECN("ens1f0np0"); err != nil || e.CNPDSCP != -1 {
		t.Errorf("empty cnp_dscp: %+v %v", e, err)
	}
	hosttest.Write(t, root, ecnDir+"roce_np/enable/4", "yes\n")
	if _, err := h.ReadECN("ens1f0np0"); err == nil || !strings.Contains(err.Error(), "roce_np/enable/4") {
		t.Errorf("garbage enable file: %v, want an error naming the file", err)
	}
	hosttest.Write(t, root, ecnDir+"roce_np/enable/4", "1\n")
	hosttest.Write(t, root, ecnDir+"roce_np/cnp_802p_prio", "9\n")
	if _, err := h.ReadECN("ens1f0np0"); err == nil || !strings.Contains(err.Error(), "cnp_802p_prio") {
		t.Errorf("out-of-range priority: %v", err)
	}

	tcFile := host.TrafficClassPath("mlx5_1", 1)
	for _, c := range []struct {
		content string
		want    host.TrafficClass
		bad     bool
	}{
		{"", host.TrafficClass{Present: true}, false},
		{"Global tclass=106\n", host.TrafficClass{Present: true, Set: true, Value: 106}, false},
		// Address rules are printed after the global class, and alone.
		{"Global tclass=0\ndst_ip=10.0.0.0/8,tclass=96\n", host.TrafficClass{Present: true, Set: true}, false},
		{"dst_ip=10.0.0.0/8,tclass=96\n", host.TrafficClass{Present: true}, false},
		{"Global tclass=300\n", host.TrafficClass{}, true},
		{"Global tclass=x\n", host.TrafficClass{}, true},
	} {
		hosttest.Write(t, root, tcFile, c.content)
		got, err := h.ReadTrafficClass("mlx5_1", 1)
		if (err != nil) != c.bad || (!c.bad && got != c.want) {
			t.Errorf("%q: %+v %v", c.content, got, err)
		}
		if c.bad && !strings.Contains(err.Error(), "traffic_class") {
			t.Errorf("%q: error %v does not name the file", c.content, err)
		}
	}
}

// TestOFEDSysfsRefused: a driver refusal (OFED answers EPERM to enabling
// ECN while QCN is on) comes back as the errno.
func TestOFEDSysfsRefused(t *testing.T) {
	k := hosttest.NewKernel(hosttest.Copy(t, "mlx5-ofed"))
	k.Refuse("roce_rp/enable/3", "1", syscall.EPERM)
	err := k.Host().WriteECNEnable("ens1f0np0", host.ECNReaction, 3, true)
	if err == nil || !strings.Contains(err.Error(), "operation not permitted") {
		t.Errorf("refused write: %v", err)
	}
}
