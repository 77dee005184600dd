package reconcile_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/daemon/reconcile"
	"github.com/rdmad/rdmad/daemon/service"
)

// kernelLoader stands in for modprobe: it "loads" modules by listing them
// in the fixture's proc/modules, as the kernel would.
type kernelLoader struct {
	root  string
	calls int
}

func (l *kernelLoader) Load(_ context.Context, names []string) error {
	l.calls++
	f, err := os.OpenFile(filepath.Join(l.root, "proc/modules"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, n := range names {
		if _, err := f.WriteString(n + " 16384 0 - Live 0x0\n"); err != nil {
			return err
		}
	}
	return nil
}

var quiet = slog.New(slog.DiscardHandler)

func tos(v int) *int { return &v }

func demoPolicy() *config.Policy {
	return &config.Policy{
		Modules: config.Modules{Enable: true, Directory: "/etc/rdma/modules"},
		Memlock: &config.Memlock{Group: "rdma", Soft: config.Limit{Unlimited: true}, Hard: config.Limit{Unlimited: true}, Services: true},
		RoCE: []config.RoCERule{
			{Selector: config.Selector{Device: "*"}, TOS: tos(106)},
			{Selector: config.Selector{Device: "mlx5_*"}, Mode: config.RoCEv1},
			{Selector: config.Selector{Device: "rxe0"}, Mode: config.RoCEv1}, // rxe refuses v1
		},
	}
}

func newRec(t *testing.T, k *hosttest.Kernel) (*reconcile.Reconciler, *kernelLoader) {
	l := &kernelLoader{root: k.Root}
	r := service.NewReconciler(k.Host(), service.Kernel{Modules: l}, quiet)
	r.SetPolicy(demoPolicy())
	return r, l
}

func TestFullPassThenIdempotent(t *testing.T) {
	root := hosttest.Copy(t, "demo")
	k := hosttest.NewKernel(root)
	k.Refuse("rdma_cm/rxe0/ports/1/default_roce_mode", "IB/RoCE v1", syscall.EIO)
	r, loader := newRec(t, k)
	var published []reconcile.State
	r.OnChange(func(s reconcile.State) { published = append(published, s) })

	rep := r.All(context.Background())
	if !rep.Failed() || rep.FailedCount() != 1 {
		t.Fatalf("want exactly the rxe0 mode failure, got %s", rep.Summary())
	}
	if loader.calls != 1 {
		t.Errorf("modprobe calls = %d, want 1 batch", loader.calls)
	}
	st := r.State()
	if len(published) != 1 || len(st.Devices) != 4 {
		t.Fatalf("published %d states, %d devices", len(published), len(st.Devices))
	}
	rxe := st.Device("rxe0")
	if rxe == nil || !strings.Contains(rxe.Ports[0].Error, "does not support") || rxe.Ports[0].RoCETOS != 106 {
		t.Errorf("rxe0 port state = %+v", rxe.Ports[0])
	}
	mlx := st.Device("mlx5_0")
	if mlx.Ports[0].RoCEMode != "IB/RoCE v1" || mlx.Ports[0].Desired.Mode != config.RoCEv1 || mlx.Ports[0].Error != "" {
		t.Errorf("mlx5_0 port = %+v", mlx.Ports[0])
	}
	ib := st.Device("mlx4_0").Ports[0]
	if ib.Transport != host.TransportInfiniBand || ib.RoCEMode != "IB/RoCE v1" || ib.RoCETOS != 0 {
		t.Errorf("IB port touched or misread: %+v", ib)
	}
	if !strings.Contains(st.LastResult, "rxe0/1") {
		t.Errorf("LastResult = %q", st.LastResult)
	}

	writes := k.WriteCount()
	rep = r.All(context.Background())
	if rep.Count(reconcile.Changed) != 0 {
		t.Errorf("second pass changed: %+v", rep.Actions)
	}
	// Only the refused write is retried: the kernel may accept it after a change elsewhere.
	for _, w := range k.Writes[writes:] {
		if !strings.Contains(w, "rxe0/ports/1/default_roce_mode") {
			t.Errorf("second pass wrote %s", w)
		}
	}
}

func TestDevicePassFollowsArrivalAndRemoval(t *testing.T) {
	root := hosttest.Copy(t, "demo")
	k := hosttest.NewKernel(root)
	r, _ := newRec(t, k)
	r.All(context.Background())

	// mlx5_1 leaves (hot unplug): its object goes, the others keep their state.
	if err := os.Remove(filepath.Join(root, host.ClassInfiniband, "mlx5_1")); err != nil {
		t.Fatal(err)
	}
	r.Devices(context.Background(), "mlx5_1")
	st := r.State()
	if st.Device("mlx5_1") != nil || st.Device("mlx5_0") == nil || len(st.Devices) != 3 {
		t.Fatalf("after removal: %d devices", len(st.Devices))
	}

	// It comes back with kernel defaults (configfs is reset): the policy is reapplied.
	if err := os.Symlink("../../devices/pci0000:3a/0000:3a:00.0/0000:3b:00.1/infiniband/mlx5_1", filepath.Join(root, host.ClassInfiniband, "mlx5_1")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(root, host.ConfigfsRdmaCM, "mlx5_1")); err != nil {
		t.Fatal(err)
	}
	rep := r.Devices(context.Background(), "mlx5_1")
	if rep.Failed() {
		t.Fatal(rep.Summary())
	}
	if got := hosttest.Read(t, root, host.ConfigfsPortPath("mlx5_1", 1, "default_roce_tos")); got != "106" {
		t.Errorf("tos after re-arrival = %q", got)
	}
	if got := r.State().Device("mlx5_1").Ports[0].RoCEMode; got != "IB/RoCE v1" {
		t.Errorf("state mode after re-arrival = %q", got)
	}
}

func TestPartialPassKeepsOtherDevicesErrors(t *testing.T) {
	root := hosttest.Copy(t, "demo")
	k := hosttest.NewKernel(root)
	k.Refuse("rdma_cm/rxe0/ports/1/default_roce_mode", "IB/RoCE v1", syscall.EIO)
	r, _ := newRec(t, k)
	r.All(context.Background())
	r.Devices(context.Background(), "mlx5_0")
	if e := r.State().Device("rxe0").Ports[0].Error; e == "" {
		t.Error("rxe0's error was lost by a pass over mlx5_0")
	}
}

func BenchmarkFullPassDemoHost(b *testing.B) {
	root := hosttest.Copy(b, "demo")
	k := hosttest.NewKernel(root)
	r := service.NewReconciler(k.Host(), service.Kernel{Modules: &kernelLoader{root: root}}, quiet)
	r.SetPolicy(demoPolicy())
	r.All(context.Background())
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r.All(context.Background())
	}
}

// reregisteringPart changes a device and makes it vanish, as an mlx4 port
// type switch does (the driver unregisters and re-adds the RDMA device).
type reregisteringPart struct{ root string }

func (reregisteringPart) Name() string { return "reregister" }
func (p reregisteringPart) Apply(_ context.Context, _ *config.Policy, d *host.Device) []reconcile.Action {
	if d.Name != "mlx4_0" {
		return nil
	}
	os.Remove(filepath.Join(p.root, host.ClassInfiniband, d.Name))
	return []reconcile.Action{{Target: d.Name + "/1", What: "vpi port type", From: "ib", To: "eth", Status: reconcile.Changed}}
}

func TestDeviceReregisteringAfterChangeIsNotAFailure(t *testing.T) {
	root := hosttest.Copy(t, "demo")
	r := reconcile.New(reconcile.Options{Host: host.New(root), Log: quiet, DeviceParts: []reconcile.DevicePart{reregisteringPart{root}}})
	rep := r.All(context.Background())
	if rep.Failed() {
		t.Errorf("re-registration reported as failure: %s", rep.Summary())
	}
	if st := r.State(); st.Device("mlx4_0") != nil || len(st.Devices) != 3 {
		t.Errorf("state still shows the re-registering device: %d devices", len(st.Devices))
	}
}

func TestLastResultKeepsOtherDevicesFailures(t *testing.T) {
	root := hosttest.Copy(t, "demo")
	k := hosttest.NewKernel(root)
	k.Refuse("rdma_cm/rxe0/ports/1/default_roce_mode", "IB/RoCE v1", syscall.EIO)
	r, _ := newRec(t, k)
	r.All(context.Background())
	if rep := r.Devices(context.Background(), "mlx5_0"); rep.Failed() {
		t.Fatalf("the mlx5_0 pass itself failed: %s", rep.Summary())
	}
	if got := r.State().LastResult; !strings.HasPrefix(got, "1 failed") || !strings.Contains(got, "rxe0/1") {
		t.Errorf("LastResult after a clean pass over mlx5_0 = %q, want rxe0's failure still shown", got)
	}
}

func TestUnreadableDeviceKeepsItsObject(t *testing.T) {
	root := hosttest.Copy(t, "demo")
	k := hosttest.NewKernel(root)
	r, _ := newRec(t, k)
	r.All(context.Background())
	// ports/ of mlx5_1 turns into something unreadable (EACCES, ENOTDIR...).
	ports := filepath.Join(root, host.ClassInfiniband, "mlx5_1", "ports")
	if err := os.RemoveAll(ports); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ports, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	rep := r.All(context.Background())
	st := r.State()
	d := st.Device("mlx5_1")
	if d == nil {
		t.Fatal("an existing but unreadable device vanished from the state")
	}
	if !strings.Contains(d.Error, "cannot read") || d.NodeGUID != "b859:9f03:00d4:2e7b" {
		t.Errorf("kept device = error %q guid %q", d.Error, d.NodeGUID)
	}
	if !rep.Failed() || !strings.Contains(st.LastResult, "mlx5_1") || st.Device("mlx5_0") == nil {
		t.Errorf("report %s / LastResult %q", rep.Summary(), st.LastResult)
	}
}
