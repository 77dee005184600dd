package reconcile_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/daemon/memlock"
	"github.com/rdmad/rdmad/daemon/modules"
	"github.com/rdmad/rdmad/daemon/reconcile"
	"github.com/rdmad/rdmad/daemon/roce"
)

var quiet = slog.New(slog.DiscardHandler)

func tos(v int) *int { return &v }

func demoPolicy() *config.Policy {
	return &config.Policy{
		Modules: config.Modules{Enable: true, Directory: "/etc/rdma/modules"},
		Memlock: &config.Memlock{Group: "rdma", Soft: config.Limit{Unlimited: true}, Hard: config.Limit{Unlimited: true}, Services: true},
		RoCE: []config.RoCERule{
			{Selector: config.Selector{Device: config.Glob("*")}, TOS: tos(106)},
			{Selector: config.Selector{Device: config.Glob("mlx5_*")}, Mode: config.RoCEv1},
			{Selector: config.Selector{Device: config.Glob("rxe0")}, Mode: config.RoCEv1}, // rxe refuses v1
		},
	}
}

// countingIO counts attribute reads through the kernel-like fixture IO.
type countingIO struct {
	*hosttest.Kernel
	reads atomic.Int64
}

func (c *countingIO) ReadAttr(name string) ([]byte, error) {
	c.reads.Add(1)
	return c.Kernel.ReadAttr(name)
}

type env struct {
	root   string
	k      *hosttest.Kernel
	io     *countingIO
	loader *hosttest.Modprobe
	r      *reconcile.Reconciler
	pol    *config.Policy
}

// newEnv is the daemon's reconciler (full reads, the parts rdmad runs
// without netlink) on a copy of the demo host.
func newEnv(t testing.TB) *env {
	root := hosttest.Copy(t, "demo")
	k := hosttest.NewKernel(root)
	e := &env{root: root, k: k, io: &countingIO{Kernel: k}, loader: &hosttest.Modprobe{Root: root}, pol: demoPolicy()}
	h := host.NewWithIO(root, e.io)
	e.r = reconcile.New(reconcile.Options{
		Host:        h,
		Log:         quiet,
		HostParts:   []reconcile.HostPart{&modules.Part{Host: h, Loader: e.loader}, &memlock.Part{Host: h}},
		DeviceParts: []reconcile.DevicePart{&roce.Part{Host: h, Loader: e.loader}},
		Detail:      host.DetailFull,
	})
	return e
}

func (e *env) full() reconcile.Report {
	return e.r.Pass(context.Background(), e.pol, reconcile.Scope{Full: true})
}

func (e *env) devices(names ...string) reconcile.Report {
	sc := reconcile.Scope{Devices: map[string][]int{}}
	for _, n := range names {
		sc.Devices[n] = nil
	}
	return e.r.Pass(context.Background(), e.pol, sc)
}

func TestFullPassThenIdempotent(t *testing.T) {
	e := newEnv(t)
	e.k.Refuse("rdma_cm/rxe0/ports/1/default_roce_mode", "IB/RoCE v1", syscall.EIO)
	var changes []reconcile.Change
	e.r.OnChange(func(c reconcile.Change) { changes = append(changes, c) })

	rep := e.full()
	if f := rep.Failures(); len(f) != 1 || f[0].Subject != reconcile.PortSubject("rxe0", 1) || f[0].Kind != roce.Mode.Kind() {
		t.Fatalf("want exactly the rxe0 mode failure, got %v", f)
	}
	if n := len(e.loader.Calls()); n != 1 {
		t.Errorf("modprobe calls = %d, want 1 batch", n)
	}
	st := e.r.Snapshot()
	if len(changes) != 1 || !changes[0].Full || len(changes[0].Updated) != 4 || len(st.Devices) != 4 {
		t.Fatalf("changes %+v, %d devices", changes, len(st.Devices))
	}
	rxe := st.Device("rxe0")
	if tos, _ := observed(rxe.Ports[0], roce.TOS); rxe == nil || len(rxe.Ports[0].Failures) != 1 || !strings.Contains(rxe.Ports[0].Failures[0].Err.Error(), "does not support") || tos != 106 {
		t.Errorf("rxe0 port state = %+v", rxe.Ports[0])
	}
	if r := record(rxe.Ports[0], roce.Mode); r == nil || r.State != reconcile.Refused || !r.Drifted() {
		t.Errorf("rxe0's refused mode: record %+v", r)
	}
	mlx := st.Device("mlx5_0")
	mode, _ := observed(mlx.Ports[0], roce.Mode)
	want, _ := roce.Mode.Declared(*record(mlx.Ports[0], roce.Mode))
	if mode.String() != "IB/RoCE v1" || want.Mode != config.RoCEv1 || len(mlx.Ports[0].Failures) != 0 {
		t.Errorf("mlx5_0 port = %+v", mlx.Ports[0])
	}
	ib := st.Device("mlx4_0").Ports[0]
	if r := record(ib, roce.TOS); ib.Transport != host.TransportInfiniBand || r == nil || r.State != reconcile.Inapplicable || r.Observed != nil ||
		hosttest.Read(t, e.root, host.ConfigfsPortPath("mlx4_0", 1, "default_roce_tos")) != "0" {
		t.Errorf("IB port touched or misread: %+v", ib)
	}
	if got := reconcile.Summarize(e.r.Summary().Failures); !strings.Contains(got, "rxe0/1") {
		t.Errorf("summary = %q", got)
	}
	// Every listed module is present after the pass; the demo host had
	// ib_uverbs and rdma_ucm loaded already (its user space), so only the
	// others were loaded.
	var missing []string
	for _, m := range st.Modules {
		if m != "ib_uverbs" && m != "rdma_ucm" {
			missing = append(missing, m)
		}
	}
	if len(missing) != len(st.Modules)-2 || !reflect.DeepEqual(missing, e.loader.Calls()[0]) {
		t.Errorf("modules %q, loaded %q", st.Modules, e.loader.Calls()[0])
	}

	writes := e.k.WriteCount()
	rep = e.full()
	if rep.Count(reconcile.Changed) != 0 {
		t.Errorf("second pass changed: %+v", rep.Actions)
	}
	// Only the refused write is retried: the kernel may accept it after a change elsewhere.
	for _, w := range e.k.Writes[writes:] {
		if !strings.Contains(w, "rxe0/ports/1/default_roce_mode") {
			t.Errorf("second pass wrote %s", w)
		}
	}
}

// A device pass reads that device only, however many others there are,
// and leaves their published state as it was.
func TestDevicePassReadsOnlyItsDevice(t *testing.T) {
	e := newEnv(t)
	e.full()
	before := e.r.DeviceStates([]string{"mlx4_0"})
	var changes []reconcile.Change
	e.r.OnChange(func(c reconcile.Change) { changes = append(changes, c) })

	e.io.reads.Store(0)
	alone := e.devices("mlx5_1")
	readsOne := e.io.reads.Load()
	if alone.Read != 1 {
		t.Errorf("pass read %d devices", alone.Read)
	}
	if after := e.r.DeviceStates([]string{"mlx4_0"}); !reflect.DeepEqual(before, after) {
		t.Errorf("mlx4_0 changed by a pass over mlx5_1")
	}
	e.io.reads.Store(0)
	e.full()
	readsAll := e.io.reads.Load()
	if readsOne*3 > readsAll {
		t.Errorf("a one-device pass read %d attributes, a full pass %d: the device pass reads more than its device", readsOne, readsAll)
	}
	if len(changes) < 1 || changes[0].Full || !reflect.DeepEqual(changes[0].Updated, []string{"mlx5_1"}) {
		t.Errorf("change of the device pass = %+v", changes[0])
	}
}

// Devices gives the observed devices as DeviceStates has them, every one
// in order for nil, and copies: a reader's change does not reach the store.
func TestDevicesAreCopiesOfTheObserved(t *testing.T) {
	e := newEnv(t)
	e.full()
	all := e.r.Devices(nil)
	names := e.r.Summary().Devices
	if len(all) != len(names) || len(all) < 2 {
		t.Fatalf("Devices(nil) = %d devices, the reconciler knows %v", len(all), names)
	}
	states := e.r.DeviceStates(names)
	for i := range all {
		if !reflect.DeepEqual(all[i], states[i].Device) {
			t.Errorf("Devices(nil)[%d] = %+v, DeviceStates has %+v", i, all[i], states[i].Device)
		}
	}
	some := e.r.Devices([]string{names[1], "nosuch0"})
	if len(some) != 1 || some[0].Name != names[1] {
		t.Fatalf("Devices(%s, nosuch0) = %+v", names[1], some)
	}
	if got := e.r.Devices([]string{}); len(got) != 0 {
		t.Errorf("Devices of no names = %+v", got)
	}
	d := &some[0]
	d.Name = "changed"
	d.Ports[0].GIDTypes = append(d.Ports[0].GIDTypes[:0], "changed")
	d.Ports[0].State = "changed"
	if after := e.r.DeviceStates([]string{names[1]}); !reflect.DeepEqual(after[0].Device, states[1].Device) {
		t.Errorf("a change to Devices' copy reached the store: %+v", after[0].Device)
	}
}

// A port-scoped pass (a D-Bus call on one port) re-reads that port.
func TestPortPassReadsThePort(t *testing.T) {
	e := newEnv(t)
	e.full()
	// Someone changes the TOS behind rdmad's back; a pass over that port
	// sees it and puts it back.
	hosttest.Write(t, e.root, host.ConfigfsPortPath("mlx5_0", 1, "default_roce_tos"), "5\n")
	rep := e.r.Pass(context.Background(), e.pol, reconcile.Scope{Devices: map[string][]int{"mlx5_0": {1}}})
	a, ok := rep.Find(reconcile.PortSubject("mlx5_0", 1), roce.TOS.Kind())
	if !ok || a.Status != reconcile.Changed || a.From != "5" || a.To != "106" {
		t.Fatalf("tos action = %+v, %v", a, ok)
	}
	d, _ := e.r.Device("mlx5_0")
	ds := e.r.DeviceStates([]string{"mlx5_0"})[0]
	if tos, _ := observed(ds.Ports[0], roce.TOS); tos != 106 || len(d.Ports[0].GIDTypes) == 0 || d.FWVersion == "" {
		t.Errorf("device after a port pass = %+v", ds)
	}
}

func TestDevicePassFollowsArrivalAndRemoval(t *testing.T) {
	e := newEnv(t)
	e.full()
	var changes []reconcile.Change
	e.r.OnChange(func(c reconcile.Change) { changes = append(changes, c) })

	// mlx5_1 leaves (hot unplug): its object goes, the others keep their state.
	if err := os.Remove(filepath.Join(e.root, host.ClassInfiniband, "mlx5_1")); err != nil {
		t.Fatal(err)
	}
	e.devices("mlx5_1")
	st := e.r.Snapshot()
	if st.Device("mlx5_1") != nil || st.Device("mlx5_0") == nil || len(st.Devices) != 3 {
		t.Fatalf("after removal: %d devices", len(st.Devices))
	}
	if len(changes) != 1 || !reflect.DeepEqual(changes[0].Removed, []string{"mlx5_1"}) {
		t.Errorf("changes = %+v", changes)
	}

	// It comes back with kernel defaults (configfs is reset): the policy is reapplied.
	if err := os.Symlink("../../devices/pci0000:3a/0000:3a:00.0/0000:3b:00.1/infiniband/mlx5_1", filepath.Join(e.root, host.ClassInfiniband, "mlx5_1")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(e.root, host.ConfigfsRdmaCM, "mlx5_1")); err != nil {
		t.Fatal(err)
	}
	rep := e.devices("mlx5_1")
	if rep.Failed() {
		t.Fatal(rep.Failures())
	}
	if got := hosttest.Read(t, e.root, host.ConfigfsPortPath("mlx5_1", 1, "default_roce_tos")); got != "106" {
		t.Errorf("tos after re-arrival = %q", got)
	}
	if mode, _ := observed(e.r.DeviceStates([]string{"mlx5_1"})[0].Ports[0], roce.Mode); mode.String() != "IB/RoCE v1" {
		t.Errorf("state mode after re-arrival = %q", mode)
	}
}

func TestPartialPassKeepsOtherDevicesFailures(t *testing.T) {
	e := newEnv(t)
	e.k.Refuse("rdma_cm/rxe0/ports/1/default_roce_mode", "IB/RoCE v1", syscall.EIO)
	e.full()
	if rep := e.devices("mlx5_0"); rep.Failed() {
		t.Fatalf("the mlx5_0 pass itself failed: %v", rep.Failures())
	}
	if f := e.r.DeviceStates([]string{"rxe0"})[0].Ports[0].Failures; len(f) != 1 {
		t.Error("rxe0's failure was lost by a pass over mlx5_0")
	}
	if got := reconcile.Summarize(e.r.Summary().Failures); !strings.HasPrefix(got, "1 failed") || !strings.Contains(got, "rxe0/1") {
		t.Errorf("summary after a clean pass over mlx5_0 = %q, want rxe0's failure still shown", got)
	}
}

// A device that fails and then goes away takes its failures with it: the
// summary no longer lists them (nor looks for the state it no longer has).
func TestRemovedDeviceLeavesTheFailures(t *testing.T) {
	e := newEnv(t)
	e.k.Refuse("rdma_cm/rxe0/ports/1/default_roce_mode", "IB/RoCE v1", syscall.EIO)
	e.full()
	if got := reconcile.Summarize(e.r.Summary().Failures); !strings.Contains(got, "rxe0/1") {
		t.Fatalf("summary before the removal = %q, want rxe0's failure", got)
	}
	if err := os.Remove(filepath.Join(e.root, host.ClassInfiniband, "rxe0")); err != nil {
		t.Fatal(err)
	}
	e.devices("rxe0")
	if f := e.r.Summary().Failures; len(f) != 0 {
		t.Errorf("failures after rxe0 left = %v, want none", f)
	}
	if st := e.r.Snapshot(); len(st.Failures()) != 0 {
		t.Errorf("snapshot failures after rxe0 left = %v", st.Failures())
	}
}

// record is the record of setting h on a port, nil when there is none.
func record[V reconcile.Value](p reconcile.PortState, h reconcile.Handle[V]) *reconcile.Record {
	for i := range p.Records {
		if h.Is(p.Records[i]) {
			return &p.Records[i]
		}
	}
	return nil
}

// observed is the kernel's value of setting h on a port, as recorded.
func observed[V reconcile.Value](p reconcile.PortState, h reconcile.Handle[V]) (V, bool) {
	if r := record(p, h); r != nil {
		return h.Observed(*r)
	}
	var zero V
	return zero, false
}

func roceTOS() reconcile.Handle[roce.TOSValue] { return roce.TOS }

// removeAllAndFile replaces a directory by a file: unreadable as one.
func removeAllAndFile(dir string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	return os.WriteFile(dir, nil, 0o644)
}

func BenchmarkFullPassDemoHost(b *testing.B) {
	e := newEnv(b)
	e.full()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		e.full()
	}
}

// reregisteringPart changes a device and makes it vanish, as an mlx4 port
// type switch does (the driver unregisters and re-adds the RDMA device).
type reregisteringPart struct{ root string }

func (reregisteringPart) Kinds() []reconcile.Kind        { return []reconcile.Kind{"vpi port type"} }
func (reregisteringPart) Settings() []*reconcile.Setting { return nil }

func (reregisteringPart) Undo(context.Context, reconcile.Action) error {
	return reconcile.ErrNotUndoable
}

func (reregisteringPart) RecreatesDevice(a reconcile.Action) bool { return a.Kind == "vpi port type" }

func (p reregisteringPart) ApplyDevice(_ context.Context, run *reconcile.DeviceRun) {
	d := run.Device
	if d.Name != "mlx4_0" {
		return
	}
	os.Remove(filepath.Join(p.root, host.ClassInfiniband, d.Name))
	run.Act(reconcile.Action{Subject: reconcile.PortSubject(d.Name, 1), Kind: "vpi port type", From: "ib", To: "eth", Status: reconcile.Changed})
}

func TestDeviceReregisteringAfterChangeIsNotAFailure(t *testing.T) {
	root := hosttest.Copy(t, "demo")
	r := reconcile.New(reconcile.Options{Host: host.New(root), Log: quiet, DeviceParts: []reconcile.DevicePart{reregisteringPart{root}}})
	rep := r.Pass(context.Background(), &config.Policy{}, reconcile.Scope{Full: true})
	if rep.Failed() {
		t.Errorf("re-registration reported as failure: %v", rep.Failures())
	}
	if st := r.Snapshot(); st.Device("mlx4_0") != nil || len(st.Devices) != 3 {
		t.Errorf("state still shows the re-registering device: %d devices", len(st.Devices))
	}
}

func TestUnreadableDeviceKeepsItsObject(t *testing.T) {
	e := newEnv(t)
	e.full()
	// ports/ of mlx5_1 turns into something unreadable (EACCES, ENOTDIR...).
	ports := filepath.Join(e.root, host.ClassInfiniband, "mlx5_1", "ports")
	if err := os.RemoveAll(ports); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ports, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	e.full()
	st := e.r.Snapshot()
	d := st.Device("mlx5_1")
	if d == nil {
		t.Fatal("an existing but unreadable device vanished from the state")
	}
	if d.ReadError == nil || d.NodeGUID != "b859:9f03:00d4:2e7b" {
		t.Errorf("kept device = read error %v guid %q", d.ReadError, d.NodeGUID)
	}
	if got := reconcile.Summarize(st.Failures()); !strings.Contains(got, "mlx5_1") || st.Device("mlx5_0") == nil {
		t.Errorf("summary %q", got)
	}
}

// The state of InfiniBand ports changes without an event: the periodic
// refresh reads it and publishes only the devices that changed.
func TestRefreshPortStates(t *testing.T) {
	e := newEnv(t)
	e.full()
	var changes []reconcile.Change
	e.r.OnChange(func(c reconcile.Change) { changes = append(changes, c) })
	ib := func(d *host.Device, p *host.Port) bool { return d.PortTransport(p) == host.TransportInfiniBand }
	if got := e.r.RefreshPortStates(context.Background(), ib); len(got) != 0 || len(changes) != 0 {
		t.Fatalf("nothing changed, yet %v", got)
	}
	hosttest.Write(t, e.root, filepath.Join(host.ClassInfiniband, "mlx4_0", "ports", "1", "state"), "1: DOWN\n")
	if got := e.r.RefreshPortStates(context.Background(), ib); !reflect.DeepEqual(got, []string{"mlx4_0"}) {
		t.Fatalf("refreshed %v", got)
	}
	if st := e.r.DeviceStates([]string{"mlx4_0"})[0]; st.Ports[0].State != "DOWN" || st.Device.Ports[0].State != "DOWN" {
		t.Errorf("state after refresh = %q / %q", st.Ports[0].State, st.Device.Ports[0].State)
	}
	if len(changes) != 1 || !reflect.DeepEqual(changes[0].Updated, []string{"mlx4_0"}) {
		t.Errorf("changes %+v", changes)
	}
}

type undoPart struct {
	reregisteringPart
	kinds  []reconcile.Kind
	undone []reconcile.Action
}

func (p *undoPart) Kinds() []reconcile.Kind { return p.kinds }
func (p *undoPart) Undo(_ context.Context, a reconcile.Action) error {
	p.undone = append(p.undone, a)
	return nil
}

// Reconciler.Undo hands a changed action to the part that reports its
// kind, and refuses one that did not change anything or that no part owns.
func TestUndoGoesToTheOwningPart(t *testing.T) {
	a, b := &undoPart{kinds: []reconcile.Kind{"a"}}, &undoPart{kinds: []reconcile.Kind{"b"}}
	r := reconcile.New(reconcile.Options{Host: host.New(t.TempDir()), Log: quiet, DeviceParts: []reconcile.DevicePart{a, b}})
	ctx := context.Background()
	act := reconcile.Action{Kind: "b", Status: reconcile.Changed, Old: roce.TOSValue(1), New: roce.TOSValue(2)}
	if err := r.Undo(ctx, act); err != nil || len(b.undone) != 1 || len(a.undone) != 0 || b.undone[0].Old != roce.TOSValue(1) {
		t.Fatalf("Undo = %v; a got %v, b got %v", err, a.undone, b.undone)
	}
	for _, bad := range []reconcile.Action{
		{Kind: "b", Status: reconcile.Unchanged},
		{Kind: "b", Status: reconcile.Failed},
		{Kind: "c", Status: reconcile.Changed},
	} {
		if err := r.Undo(ctx, bad); err == nil {
			t.Errorf("Undo(%v) = nil", bad)
		}
	}
	if len(b.undone) != 1 {
		t.Errorf("refused undos reached the part: %v", b.undone)
	}
	defer func() {
		if recover() == nil {
			t.Error("two parts reporting one kind: no panic")
		}
	}()
	reconcile.New(reconcile.Options{Host: host.New(t.TempDir()), DeviceParts: []reconcile.DevicePart{a, &undoPart{kinds: []reconcile.Kind{"a"}}}})
}

// The refresh runs every 10 s: on a host whose ports have no state to
// poll (RoCE), it copies no device and reads nothing, whatever the number
// of devices.
func TestRefreshPortStatesOfRoCEHostAllocatesLittle(t *testing.T) {
	root := hosttest.SynthRoot(t, 64)
	h := host.New(root)
	r := reconcile.New(reconcile.Options{Host: h, Detail: host.DetailFull})
	r.Pass(context.Background(), &config.Policy{}, reconcile.Scope{Full: true, Forced: true})
	ib := func(d *host.Device, p *host.Port) bool { return d.PortTransport(p) == host.TransportInfiniBand }
	allocs := testing.AllocsPerRun(5, func() {
		if got := r.RefreshPortStates(context.Background(), ib); len(got) != 0 {
			t.Fatalf("refreshed %v", got)
		}
	})
	if allocs > 16 {
		t.Errorf("a refresh of 64 RoCE devices allocates %v times, bound 16", allocs)
	}
}
