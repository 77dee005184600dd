package qos

import (
	"strings"
	"syscall"
	"testing"

	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
)

const ecnDir = "sys/devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0/net/ens1f0np0/ecn/"

func TestOFEDECNPresent(t *testing.T) {
	h := host.New(hosttest.FixtureDir("mlx5-ofed"))
	e, err := readOFEDECN(h, "ens1f0np0")
	if err != nil {
		t.Fatal(err)
	}
	// Firmware enables all eight priorities and marks CNPs DSCP 48, priority 6.
	want := OFEDECN{Present: true, RP: 0xff, NP: 0xff, CNPDSCP: 48, CNPPrio: 6}
	if e != want || e.On() != 0xff {
		t.Errorf("ECN %+v, want %+v", e, want)
	}
}

func TestOFEDECNAbsentUpstream(t *testing.T) {
	h := host.New(hosttest.FixtureDir("mlx5"))
	e, err := readOFEDECN(h, "ens1f0np0")
	if err != nil || e.Present || e.CNPDSCP != -1 || e.CNPPrio != -1 {
		t.Errorf("upstream ECN %+v %v, want absent", e, err)
	}
}

func TestOFEDECNWriteAndReadBack(t *testing.T) {
	root := hosttest.Copy(t, "mlx5-ofed")
	h := host.New(root)
	for p := 0; p < 8; p++ {
		on := p == 3
		if err := writeECNEnable(h, "ens1f0np0", ecnReaction, p, on); err != nil {
			t.Fatal(err)
		}
		if err := writeECNEnable(h, "ens1f0np0", ecnNotification, p, on || p == 5); err != nil {
			t.Fatal(err)
		}
	}
	if err := writeCNPDSCP(h, "ens1f0np0", 46); err != nil {
		t.Fatal(err)
	}
	if err := writeCNPPriority(h, "ens1f0np0", 7); err != nil {
		t.Fatal(err)
	}
	e, err := readOFEDECN(h, "ens1f0np0")
	if err != nil || e.RP != 0x08 || e.NP != 0x28 || e.On() != 0x08 || e.CNPDSCP != 46 || e.CNPPrio != 7 {
		t.Errorf("after writes: %+v %v", e, err)
	}
	if got := hosttest.Read(t, root, ecnDir+"roce_np/enable/5"); got != "1" {
		t.Errorf("roce_np/enable/5 holds %q", got)
	}
	for _, err := range []error{
		writeECNEnable(h, "ens1f0np0", "roce_xx", 3, true),
		writeECNEnable(h, "ens1f0np0", ecnReaction, 8, true),
		writeCNPDSCP(h, "ens1f0np0", 64),
		writeCNPPriority(h, "ens1f0np0", -1),
	} {
		if err == nil {
			t.Error("an out-of-range write was accepted")
		}
	}
}

func TestOFEDECNOddContents(t *testing.T) {
	root := hosttest.Copy(t, "mlx5-ofed")
	h := host.New(root)
	// The driver prints nothing when its firmware query fails.
	hosttest.Write(t, root, ecnDir+"roce_rp/enable/2", "")
	e, err := readOFEDECN(h, "ens1f0np0")
	if err != nil || e.Unread != 0x04 || e.RP&0x04 != 0 || e.On()&0x04 != 0 {
		t.Errorf("empty enable file: %+v %v, want priority 2 unread", e, err)
	}
	hosttest.Write(t, root, ecnDir+"roce_np/cnp_dscp", "")
	if e, err := readOFEDECN(h, "ens1f0np0"); err != nil || e.CNPDSCP != -1 {
		t.Errorf("empty cnp_dscp: %+v %v", e, err)
	}
	hosttest.Write(t, root, ecnDir+"roce_np/enable/4", "yes\n")
	if _, err := readOFEDECN(h, "ens1f0np0"); err == nil || !strings.Contains(err.Error(), "roce_np/enable/4") {
		t.Errorf("garbage enable file: %v, want an error naming the file", err)
	}
	hosttest.Write(t, root, ecnDir+"roce_np/enable/4", "1\n")
	hosttest.Write(t, root, ecnDir+"roce_np/cnp_802p_prio", "9\n")
	if _, err := readOFEDECN(h, "ens1f0np0"); err == nil || !strings.Contains(err.Error(), "cnp_802p_prio") {
		t.Errorf("out-of-range priority: %v", err)
	}
}

// TestOFEDECNRefused: a driver refusal (OFED answers EPERM to enabling
// ECN while QCN is on) comes back as the errno.
func TestOFEDECNRefused(t *testing.T) {
	k := hosttest.NewKernel(hosttest.Copy(t, "mlx5-ofed"))
	k.Refuse("roce_rp/enable/3", "1", syscall.EPERM)
	err := writeECNEnable(k.Host(), "ens1f0np0", ecnReaction, 3, true)
	if err == nil || !strings.Contains(err.Error(), "operation not permitted") {
		t.Errorf("refused write: %v", err)
	}
}
