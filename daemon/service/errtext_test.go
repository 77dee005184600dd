package service_test

import (
	"context"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/dcb"
	"github.com/rdmad/rdmad/daemon/dcb/dcbtest"
	"github.com/rdmad/rdmad/daemon/service"
)

// vanishAfterUndo is the DCB kernel of a netdev that goes away just as
// rdmad puts its PFC back: the undo's write is taken, its read-back finds
// no netdev.
type vanishAfterUndo struct {
	dcb.Kernel
	fake *dcbtest.Fake
	pfc  int
}

func (k *vanishAfterUndo) SetPFC(ifname string, p dcb.PFC) error {
	err := k.Kernel.SetPFC(ifname, p)
	if k.pfc++; k.pfc == 2 {
		k.fake.Remove(ifname)
	}
	return err
}

// TestUndoErrorReadsAsOneSentence is what a user reads when a refused
// call's rollback fails, through every layer it crosses (the service's
// rollback, the reconciler's undo, the qos part's read-back, the DCB
// codec): each layer adds the object and the step, none its package name.
func TestUndoErrorReadsAsOneSentence(t *testing.T) {
	var k *vanishAfterUndo
	svc, _, _ := qosEnvKernel(t, "", func(f *dcbtest.Fake) {
		f.Update("ens1f0np0", func(n *dcbtest.Netdev) { n.PFC.Enabled = 0x01; n.RefuseApps = syscall.EINVAL })
	}, func(f *dcbtest.Fake) dcb.Kernel {
		k = &vanishAfterUndo{Kernel: f.Kernel(), fake: f}
		return k
	})
	err := svc.SetQoS(context.Background(), service.QoSChange{Device: "mlx5_0", Port: 1, Trust: config.TrustDSCP, PFC: []uint8{3}, HasPFC: true})
	if err == nil {
		t.Fatal("SetQoS took a call the driver refuses")
	}
	want := `the kernel refused the change: mlx5_0/1 qos trust "dscp": add APP entry dscp-prio 0:0 to ens1f0np0: driver refused the DCB setting (status -22: invalid argument).` +
		` The declaration was withdrawn, but undoing it failed: put back mlx5_0/1 qos pfc "[0]": read it back: get IEEE DCB of ens1f0np0: no such device`
	if diff := cmp.Diff(want, err.Error()); diff != "" {
		t.Errorf("error text (-want +got):\n%s", diff)
	}
}
