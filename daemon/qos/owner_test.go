package qos_test

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/rdmad/rdmad/daemon/dcb"
	"github.com/rdmad/rdmad/daemon/dcb/dcbtest"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/daemon/qos"
)

// Firmware that runs DCBX itself (LLD-managed) owns the netdev's DCB even
// where the driver also reports the host bit: rdmad writes nothing there.
func TestLLDManagedIsAnotherOwnerWithTheHostBit(t *testing.T) {
	e := newEnv(t, "mlx5")
	e.k.Add("ens1f0np0").DCBX = dcb.CapHost | dcb.CapLLDManaged | dcb.CapVerIEEE
	acts, _ := e.apply(t, policy(t, mlx5Rule), "mlx5_0")
	if got, want := statuses(acts), "mlx5_0/1 qos pfc held, mlx5_0/1 qos trust held"; got != want || !strings.Contains(acts[0].Err.Error(), "LLD-managed") {
		t.Fatalf("host and LLD-managed: %s %v", got, acts)
	}
	if w := e.k.Writes(); len(w) != 0 {
		t.Errorf("wrote %q", w)
	}
}

// A port takes PFC on as many priorities as its pfc_cap says, no more.
func TestPFCCapabilityBound(t *testing.T) {
	for _, tc := range []struct {
		pfc  string
		want string
	}{
		{"[3, 4]", "mlx5_0/1 qos pfc changed"},
		{"[2, 3, 4]", "mlx5_0/1 qos pfc failed"},
	} {
		e := newEnv(t, "mlx5")
		e.k.Add("ens1f0np0").PFC.Cap = 2
		acts, _ := e.apply(t, policy(t, "[[qos]]\ndevice = \"mlx5_0\"\npfc = "+tc.pfc+"\n"), "mlx5_0")
		if got := statuses(acts); got != tc.want {
			t.Errorf("pfc = %s on a port capable of 2: %s, want %s", tc.pfc, got, tc.want)
		}
		if tc.want == "mlx5_0/1 qos pfc failed" && !strings.Contains(acts[0].Err.Error(), "supports PFC on at most 2 priorities, 3 declared") {
			t.Errorf("refusal: %v", acts[0].Err)
		}
	}
}

// Putting PFC back is read back like any write: a driver that
// acknowledges the old mask and keeps the new one makes Undo fail.
func TestUndoOfPFCReadsBack(t *testing.T) {
	e := newEnv(t, "mlx5")
	e.k.Add("ens1f0np0").PFC.Enabled = 0x10
	acts, _ := e.apply(t, policy(t, "[[qos]]\ndevice = \"mlx5_0\"\npfc = [3]\n"), "mlx5_0")
	if got := statuses(acts); got != "mlx5_0/1 qos pfc changed" {
		t.Fatalf("apply: %s", got)
	}
	e.k.Update("ens1f0np0", func(n *dcbtest.Netdev) { n.DropPFC = true })
	err := e.part.Undo(context.Background(), acts[0])
	if err == nil || !strings.Contains(err.Error(), "put back PFC [4] but the driver kept [3]") {
		t.Errorf("undo against a driver that keeps the new PFC: %v", err)
	}
	e.k.Update("ens1f0np0", func(n *dcbtest.Netdev) { n.DropPFC = false })
	if err := e.part.Undo(context.Background(), acts[0]); err != nil {
		t.Errorf("undo: %v", err)
	}
	if n, _ := e.k.Netdev("ens1f0np0"); n.PFC.Enabled != 0x10 {
		t.Errorf("PFC after undo %#x, want 0x10", n.PFC.Enabled)
	}
}

// lldpad's configuration (libconfig) names a group `name :` on a line of
// its own; settings (`adminStatus = 3;`) and values are not groups, so a
// netdev named like a setting is not taken for one lldpad configures.
func TestLLDPadGroups(t *testing.T) {
	root := hosttest.Copy(t, "mlx5")
	hosttest.Write(t, root, qos.LLDPadConfFile, `dcbx :
{
  version = "1.0";
  dcbx_version = 2;
};
lldp :
{
  ens1f0np0 :
  {
    tlvid00000001 :
    {
      info = "04001B21AB1234";
    };
    adminStatus = 3;
  };
  common :
  {
    tlvid00000002 : { info = "03"; };
  };
};
`)
	h := hosttest.NewKernel(root).Host()
	groups, err := qos.LLDPadGroups(h)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"dcbx", "lldp", "ens1f0np0", "tlvid00000001", "common", "tlvid00000002"}; !reflect.DeepEqual(groups, want) {
		t.Errorf("groups = %q, want %q", groups, want)
	}
}
