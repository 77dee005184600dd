package links_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/links"
	"github.com/rdmad/rdmad/daemon/links/linkstest"
	"github.com/rdmad/rdmad/daemon/reconcile"
)

// fakeLoader records loads and marks the modules loaded in proc/modules, as
// modprobe would.
type fakeLoader struct {
	h     *host.Host
	mu    sync.Mutex
	loads []string
	err   error
}

func (f *fakeLoader) Load(_ context.Context, names []string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.loads = append(f.loads, strings.Join(names, " "))
	if f.err != nil {
		return f.err
	}
	fh, err := os.OpenFile(f.h.Path(host.ProcModules), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer fh.Close()
	for _, n := range names {
		if _, err := fh.WriteString(n + " 16384 0 - Live 0x0\n"); err != nil {
			return err
		}
	}
	return nil
}

type fixture struct {
	h      *host.Host
	nl     *linkstest.Netlink
	loader *fakeLoader
	part   *links.Part
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	h := host.New(t.TempDir())
	for _, d := range []string{host.ClassInfiniband, host.ClassNet, "proc"} {
		if err := os.MkdirAll(h.Path(d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(h.Path(host.ProcModules), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	f := &fixture{h: h, nl: &linkstest.Netlink{Host: h}, loader: &fakeLoader{h: h}}
	f.part = &links.Part{Host: h, Netlink: f.nl, Loader: f.loader}
	return f
}

func policy(ls ...config.Link) *config.Policy {
	return &config.Policy{Links: ls}
}

var rxe0 = config.Link{Name: "rxe0", Type: config.LinkRXE, Netdev: "eth1", Source: config.Position{File: "/etc/rdma/rdmad.toml", Line: 7}}

func only(t *testing.T, acts []reconcile.Action) reconcile.Action {
	t.Helper()
	if len(acts) != 1 {
		t.Fatalf("want 1 action, got %d: %v", len(acts), acts)
	}
	return acts[0]
}

func TestWaitsForNetdevThenCreatesAndStays(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	pol := policy(rxe0)

	a := only(t, f.part.ApplyHost(ctx, &reconcile.HostRun{Policy: pol}).Actions)
	if a.Status != reconcile.NotApplicable || a.Err == nil || a.Err.Error() != "waiting for netdev eth1" {
		t.Fatalf("without netdev: %v", a)
	}
	if len(f.nl.Calls()) != 0 {
		t.Fatalf("netlink called without netdev: %v", f.nl.Calls())
	}

	if err := linkstest.AddNetdev(f.h, "eth1"); err != nil {
		t.Fatal(err)
	}
	a = only(t, f.part.ApplyHost(ctx, &reconcile.HostRun{Policy: pol}).Actions)
	if a.Status != reconcile.Changed {
		t.Fatalf("with netdev: %v", a)
	}
	if a.Source != "/etc/rdma/rdmad.toml:7" {
		t.Errorf("source = %q", a.Source)
	}
	if got := f.loader.loads; len(got) != 1 || got[0] != "rdma_rxe" {
		t.Errorf("loads = %v, want [rdma_rxe]", got)
	}
	d, err := f.h.Device("rxe0")
	if err != nil {
		t.Fatalf("link not visible after pass: %v", err)
	}
	if sl, ok := links.Classify(&d); !ok || sl.Type != config.LinkRXE || sl.Netdev != "eth1" {
		t.Errorf("classify = %+v %v", sl, ok)
	}

	// Idempotent: nothing more to do, module not reloaded.
	a = only(t, f.part.ApplyHost(ctx, &reconcile.HostRun{Policy: pol}).Actions)
	if a.Status != reconcile.Unchanged {
		t.Fatalf("second pass: %v", a)
	}
	if n := len(f.nl.Calls()); n != 1 {
		t.Errorf("netlink calls = %v", f.nl.Calls())
	}
	if n := len(f.loader.loads); n != 1 {
		t.Errorf("loads = %v", f.loader.loads)
	}
}

func TestRecreatedAfterNetdevFlap(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	pol := policy(rxe0)
	if err := linkstest.AddNetdev(f.h, "eth1"); err != nil {
		t.Fatal(err)
	}
	if a := only(t, f.part.ApplyHost(ctx, &reconcile.HostRun{Policy: pol}).Actions); a.Status != reconcile.Changed {
		t.Fatalf("create: %v", a)
	}
	// The netdev goes away: the kernel unregisters rxe0 with it.
	if err := linkstest.RemoveNetdev(f.h, "eth1"); err != nil {
		t.Fatal(err)
	}
	if f.h.Exists(filepath.Join(host.ClassInfiniband, "rxe0")) {
		t.Fatal("fake did not remove rxe0 with its netdev")
	}
	if a := only(t, f.part.ApplyHost(ctx, &reconcile.HostRun{Policy: pol}).Actions); a.Status != reconcile.NotApplicable {
		t.Fatalf("netdev gone: %v", a)
	}
	// It comes back: the link is recreated.
	if err := linkstest.AddNetdev(f.h, "eth1"); err != nil {
		t.Fatal(err)
	}
	if a := only(t, f.part.ApplyHost(ctx, &reconcile.HostRun{Policy: pol}).Actions); a.Status != reconcile.Changed {
		t.Fatalf("netdev back: %v", a)
	}
	want := []string{"add rxe0 rxe eth1", "add rxe0 rxe eth1"}
	if got := f.nl.Calls(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("calls = %v, want %v", got, want)
	}
	// The module was already loaded the second time.
	if len(f.loader.loads) != 1 {
		t.Errorf("loads = %v", f.loader.loads)
	}
}

func TestMismatchedExistingDeviceFailsAndIsKept(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	for _, n := range []string{"eth1", "eth2"} {
		if err := linkstest.AddNetdev(f.h, n); err != nil {
			t.Fatal(err)
		}
	}
	if err := linkstest.AddDevice(f.h, "rxe0", "rxe", "eth2"); err != nil {
		t.Fatal(err)
	}
	a := only(t, f.part.ApplyHost(ctx, &reconcile.HostRun{Policy: policy(rxe0)}).Actions)
	if a.Status != reconcile.Failed || !strings.Contains(a.Err.Error(), "exists as rxe on eth2, declared rxe on eth1") {
		t.Fatalf("other netdev: %v", a)
	}
	siw := rxe0
	siw.Type = config.LinkSIW
	siw.Netdev = "eth2"
	a = only(t, f.part.ApplyHost(ctx, &reconcile.HostRun{Policy: policy(siw)}).Actions)
	if a.Status != reconcile.Failed || !strings.Contains(a.Err.Error(), "exists as rxe on eth2, declared siw on eth2") {
		t.Fatalf("other type: %v", a)
	}
	if len(f.nl.Calls()) != 0 {
		t.Errorf("netlink touched a device it must leave alone: %v", f.nl.Calls())
	}
	if !f.h.Exists(filepath.Join(host.ClassInfiniband, "rxe0")) {
		t.Error("existing device was removed")
	}
}

func TestHardwareDeviceWithDeclaredNameFails(t *testing.T) {
	f := newFixture(t)
	hw := f.h.Path(host.ClassInfiniband, "mlx5_0")
	if err := os.MkdirAll(filepath.Join(hw, "ports", "1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(hw, "node_type"), []byte("1: CA\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := linkstest.AddNetdev(f.h, "eth1"); err != nil {
		t.Fatal(err)
	}
	l := rxe0
	l.Name = "mlx5_0"
	a := only(t, f.part.ApplyHost(context.Background(), &reconcile.HostRun{Policy: policy(l)}).Actions)
	if a.Status != reconcile.Failed || !strings.Contains(a.Err.Error(), "is not a soft link") {
		t.Fatalf("%v", a)
	}
	err := f.part.Delete(context.Background(), "mlx5_0").Err
	if !errors.Is(err, links.ErrNotSoftLink) {
		t.Fatalf("Delete(mlx5_0) = %v, want ErrNotSoftLink", err)
	}
	if len(f.nl.Calls()) != 0 {
		t.Errorf("netlink called: %v", f.nl.Calls())
	}
}

func TestNetdevAlreadyCarriesAnotherLink(t *testing.T) {
	f := newFixture(t)
	if err := linkstest.AddNetdev(f.h, "eth1"); err != nil {
		t.Fatal(err)
	}
	if err := linkstest.AddDevice(f.h, "rxe_eth1", "rxe", "eth1"); err != nil {
		t.Fatal(err)
	}
	// The part knows the host's devices from the pass (the reconciler's
	// cache); it does not list them again.
	devs, err := f.h.Devices()
	if err != nil {
		t.Fatal(err)
	}
	pass := &reconcile.HostRun{Policy: policy(rxe0)}
	for i := range devs {
		pass.Devices = append(pass.Devices, &devs[i])
	}
	a := only(t, f.part.ApplyHost(context.Background(), pass).Actions)
	if a.Status != reconcile.Failed || !strings.Contains(a.Err.Error(), "already carries rxe device rxe_eth1") {
		t.Fatalf("%v", a)
	}
}

func TestModuleLoadAndNetlinkFailuresAreReported(t *testing.T) {
	f := newFixture(t)
	if err := linkstest.AddNetdev(f.h, "eth1"); err != nil {
		t.Fatal(err)
	}
	f.loader.err = errors.New("modprobe: FATAL: Module rdma_rxe not found")
	a := only(t, f.part.ApplyHost(context.Background(), &reconcile.HostRun{Policy: policy(rxe0)}).Actions)
	if a.Status != reconcile.Failed || !strings.Contains(a.Err.Error(), "load rdma_rxe for rxe0") {
		t.Fatalf("load failure: %v", a)
	}
	f.loader.err = nil
	f.nl.AddErr = syscall.EOPNOTSUPP
	a = only(t, f.part.ApplyHost(context.Background(), &reconcile.HostRun{Policy: policy(rxe0)}).Actions)
	if a.Status != reconcile.Failed || !errors.Is(a.Err, syscall.EOPNOTSUPP) {
		t.Fatalf("netlink failure: %v", a)
	}
}

func TestSiwLink(t *testing.T) {
	f := newFixture(t)
	if err := linkstest.AddNetdev(f.h, "enp0s1"); err != nil {
		t.Fatal(err)
	}
	l := config.Link{Name: "siw0", Type: config.LinkSIW, Netdev: "enp0s1"}
	if a := only(t, f.part.ApplyHost(context.Background(), &reconcile.HostRun{Policy: policy(l)}).Actions); a.Status != reconcile.Changed {
		t.Fatalf("%v", a)
	}
	if got := f.loader.loads; len(got) != 1 || got[0] != "siw" {
		t.Errorf("loads = %v", got)
	}
	d, err := f.h.Device("siw0")
	if err != nil {
		t.Fatal(err)
	}
	if sl, ok := links.Classify(&d); !ok || sl != (links.SoftLink{Name: "siw0", Type: config.LinkSIW}) {
		t.Fatalf("Classify = %+v, %v", sl, ok)
	}
	if a := only(t, f.part.ApplyHost(context.Background(), &reconcile.HostRun{Policy: policy(l)}).Actions); a.Status != reconcile.Unchanged {
		t.Fatalf("second: %v", a)
	}
}

func TestDelete(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if err := linkstest.AddNetdev(f.h, "eth1"); err != nil {
		t.Fatal(err)
	}
	if a := only(t, f.part.ApplyHost(ctx, &reconcile.HostRun{Policy: policy(rxe0)}).Actions); a.Status != reconcile.Changed {
		t.Fatalf("create: %v", a)
	}
	if a := f.part.Delete(ctx, "rxe0"); a.Status != reconcile.Changed || a.Kind != links.Remove || a.Err != nil {
		t.Fatalf("Delete: %v", a)
	}
	if f.h.Exists(filepath.Join(host.ClassInfiniband, "rxe0")) {
		t.Error("rxe0 still present")
	}
	if a := f.part.Delete(ctx, "rxe0"); a.Status != reconcile.Failed || !errors.Is(a.Err, host.ErrNoDevice) {
		t.Errorf("Delete missing = %v, want ErrNoDevice", a)
	}
}

// The links part undoes its own actions: a link it created is deleted, a
// link deleted over D-Bus comes back as it was (type and netdev).
func TestUndo(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if err := linkstest.AddNetdev(f.h, "eth1"); err != nil {
		t.Fatal(err)
	}
	created := only(t, f.part.ApplyHost(ctx, &reconcile.HostRun{Policy: policy(rxe0)}).Actions)
	if n, _ := links.Link.New(created); created.Status != reconcile.Changed || n != (links.Value{Exists: true, Type: rxe0.Type, Netdev: rxe0.Netdev}) {
		t.Fatalf("create: %v, New %#v", created, created.New)
	}
	if err := f.part.Undo(ctx, created); err != nil {
		t.Fatalf("Undo(create): %v", err)
	}
	if f.h.Exists(filepath.Join(host.ClassInfiniband, "rxe0")) {
		t.Fatal("Undo(create) left rxe0")
	}

	only(t, f.part.ApplyHost(ctx, &reconcile.HostRun{Policy: policy(rxe0)}).Actions)
	removed := f.part.Delete(ctx, "rxe0")
	if removed.Status != reconcile.Changed {
		t.Fatalf("Delete: %v", removed)
	}
	if want, o := (links.Value{Exists: true, Type: config.LinkRXE, Netdev: "eth1"}), removed.Old; o != want {
		t.Errorf("Delete's Old = %#v, want %#v", removed.Old, want)
	}
	if err := f.part.Undo(ctx, removed); err != nil {
		t.Fatalf("Undo(delete): %v", err)
	}
	d, err := f.h.ReadDevice("rxe0", host.DetailPolicy)
	if err != nil {
		t.Fatalf("rxe0 not back: %v", err)
	}
	if sl, ok := links.Classify(&d); !ok || sl.Type != config.LinkRXE || sl.Netdev != "eth1" {
		t.Errorf("rxe0 came back as %+v", sl)
	}

	// Undoing a creation never deletes a device that is not a soft link.
	notSoft := reconcile.Action{Subject: reconcile.LinkSubject("mlx5_0"), Kind: links.Create, Status: reconcile.Changed}
	if err := f.part.Undo(ctx, notSoft); err == nil {
		t.Error("Undo of a creation of a device that does not exist succeeded")
	}
	// Putting back a link found absent (its declaration went) when it is
	// gone already is done.
	gone := reconcile.Action{Subject: reconcile.LinkSubject("rxe9"), Kind: links.Create, Setting: links.Link.Setting(), Old: links.Value{}, Status: reconcile.Changed}
	if err := f.part.Undo(ctx, gone); err != nil {
		t.Errorf("Undo of a link found absent, absent now: %v", err)
	}
}
