package roce_test

import (
	"context"
	"errors"
	"testing"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/daemon/reconcile"
	"github.com/rdmad/rdmad/daemon/roce"
)

// The RoCE part's actions carry typed values, and Undo writes the old ones
// back through the kernel-like fixture (read back, as a change is).
func TestUndoPutsBackModeAndTOS(t *testing.T) {
	root := hosttest.Copy(t, "mlx5")
	k := hosttest.NewKernel(root)
	h := k.Host()
	pol := &config.Policy{RoCE: []config.RoCERule{{Selector: config.Selector{Device: config.Glob("mlx5_0")}, Mode: config.RoCEv1, TOS: tos(106)}}}
	modeAttr := host.ConfigfsPortPath("mlx5_0", 1, "default_roce_mode")
	tosAttr := host.ConfigfsPortPath("mlx5_0", 1, "default_roce_tos")
	before := [2]string{hosttest.Read(t, root, modeAttr), hosttest.Read(t, root, tosAttr)}
	acts := apply(t, h, pol, "mlx5_0")
	if len(acts) != 2 || acts[0].Status != reconcile.Changed || acts[1].Status != reconcile.Changed {
		t.Fatalf("apply: %s", statuses(acts))
	}
	if o, _ := roce.Mode.Old(acts[0]); o != (roce.ModeValue{Mode: config.RoCEv2}) {
		t.Errorf("mode Old %#v, want v2", acts[0].Old)
	}
	if n, _ := roce.Mode.New(acts[0]); n != (roce.ModeValue{Mode: config.RoCEv1}) {
		t.Errorf("mode New %#v, want v1", acts[0].New)
	}
	if o, _ := roce.TOS.Old(acts[1]); o != 0 {
		t.Errorf("tos Old %#v, want 0", acts[1].Old)
	}
	if n, _ := roce.TOS.New(acts[1]); n != 106 {
		t.Errorf("tos New %#v, want 106", acts[1].New)
	}
	p := &roce.Part{Host: h}
	for _, a := range acts {
		if err := p.Undo(context.Background(), a); err != nil {
			t.Fatalf("Undo(%v): %v", a, err)
		}
	}
	if got := [2]string{hosttest.Read(t, root, modeAttr), hosttest.Read(t, root, tosAttr)}; got != before {
		t.Errorf("after undo: %q, want %q", got, before)
	}
}

// An old value the part does not know (not read, or a text the kernel does
// not give) is not guessed: Undo refuses and writes nothing.
func TestUndoWithoutOldValueWritesNothing(t *testing.T) {
	root := hosttest.Copy(t, "mlx5")
	k := hosttest.NewKernel(root)
	p := &roce.Part{Host: k.Host()}
	for _, a := range []reconcile.Action{
		{Subject: reconcile.PortSubject("mlx5_0", 1), Kind: roce.Mode.Kind(), Setting: roce.Mode.Setting(), Status: reconcile.Changed, From: "RoCE v3",
			Old: roce.ModeValue{Other: "RoCE v3"}, New: roce.ModeValue{Mode: config.RoCEv1}},
		{Subject: reconcile.PortSubject("mlx5_0", 1), Kind: roce.TOS.Kind(), Setting: roce.TOS.Setting(), Status: reconcile.Changed, New: roce.TOSValue(106)},
		{Subject: reconcile.DeviceSubject("mlx5_0"), Kind: roce.TOS.Kind(), Setting: roce.TOS.Setting(), Status: reconcile.Changed, Old: roce.TOSValue(0), New: roce.TOSValue(106)},
		// A value of another setting's type is not this one's.
		{Subject: reconcile.PortSubject("mlx5_0", 1), Kind: roce.TOS.Kind(), Status: reconcile.Changed, Old: roce.ModeValue{Mode: config.RoCEv2}},
	} {
		if err := p.Undo(context.Background(), a); err == nil {
			t.Errorf("Undo(%v) = nil, want an error", a)
		}
	}
	if k.WriteCount() != 0 {
		t.Errorf("wrote %v", k.Writes)
	}
}

// Creating a device's rdma_cm directory is the one RoCE action that is not
// undone, and Undo says so.
func TestUndoConfigfsDirIsNotUndoable(t *testing.T) {
	root := hosttest.Copy(t, "rxe")
	k := hosttest.NewKernel(root)
	if err := removeAll(root, host.ConfigfsRdmaCM+"/rxe0"); err != nil {
		t.Fatal(err)
	}
	pol := &config.Policy{RoCE: []config.RoCERule{{Selector: config.Selector{Device: config.Glob("rxe0")}, TOS: tos(32)}}}
	acts := apply(t, k.Host(), pol, "rxe0")
	if acts[0].Kind != roce.Configfs || acts[0].Status != reconcile.Changed {
		t.Fatalf("apply: %s", statuses(acts))
	}
	err := (&roce.Part{Host: k.Host()}).Undo(context.Background(), acts[0])
	if !errors.Is(err, reconcile.ErrNotUndoable) {
		t.Errorf("Undo(configfs dir) = %v, want ErrNotUndoable", err)
	}
	if !k.Host().Exists(host.ConfigfsRdmaCM + "/rxe0") {
		t.Error("the directory was removed")
	}
}
