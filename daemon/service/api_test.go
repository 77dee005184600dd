package service_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/rdmad/rdmad/daemon/compose"
	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/daemon/links"
	"github.com/rdmad/rdmad/daemon/links/linkstest"
	"github.com/rdmad/rdmad/daemon/netns"
	"github.com/rdmad/rdmad/daemon/netns/netnstest"
	"github.com/rdmad/rdmad/daemon/reconcile"
	"github.com/rdmad/rdmad/daemon/roce"
	"github.com/rdmad/rdmad/daemon/service"
)

// env is a copy of the mlx5 fixture host behind a kernel-like AttrIO, with
// rdmad's service on it (links and netns managed by fakes).
type env struct {
	root string
	k    *hosttest.Kernel
	h    *host.Host
	nl   *linkstest.Netlink
	ns   *netnstest.Kernel
	svc  *service.Service
	log  *lockedBuffer // the service's log

	passes atomic.Int64 // passes after the first
}

const mainFile = "etc/rdma/rdmad.toml"

// newEnv writes cfg (after "[modules] enable = false") as rdmad.toml; setup
// runs before the service loads it (kernel refusals, extra files).
func newEnv(t *testing.T, cfg string, setup func(e *env)) *env {
	t.Helper()
	return newEnvOn(t, "mlx5", cfg, setup)
}

// newEnvOn is newEnv on another fixture host.
func newEnvOn(t *testing.T, fixture, cfg string, setup func(e *env)) *env {
	t.Helper()
	e := &env{root: hosttest.Copy(t, fixture), ns: netnstest.New(config.NetnsShared), log: &lockedBuffer{}}
	hosttest.Write(t, e.root, mainFile, "[modules]\nenable = false\n"+cfg)
	e.k = hosttest.NewKernel(e.root)
	e.h = e.k.Host()
	if err := linkstest.AddNetdev(e.h, "eth1"); err != nil {
		t.Fatal(err)
	}
	e.nl = &linkstest.Netlink{Host: e.h}
	if setup != nil {
		setup(e)
	}
	log := slog.New(slog.NewTextHandler(e.log, nil))
	kernel := compose.Kernel{Modules: &hosttest.Modprobe{}, Links: e.nl, Netns: e.ns}
	svc, err := service.New(service.Options{Host: e.h, Parts: compose.Parts(kernel), Log: log})
	if err != nil {
		t.Fatal(err)
	}
	svc.ReconcileNow(context.Background())
	svc.Reconciler().OnChange(func(reconcile.Change) { e.passes.Add(1) })
	e.svc = svc
	return e
}

func (e *env) read(t *testing.T, rel string) string {
	t.Helper()
	return hosttest.Read(t, e.root, rel)
}

func (e *env) port(t *testing.T, dev string, port int, attr string) string {
	t.Helper()
	return e.read(t, host.ConfigfsPortPath(dev, port, attr))
}

func (e *env) persisted() string {
	b, err := os.ReadFile(filepath.Join(e.root, config.DropInDir, config.PersistedName))
	if errors.Is(err, os.ErrNotExist) {
		return "<none>"
	}
	if err != nil {
		return "<" + err.Error() + ">"
	}
	return string(b)
}

// A missing configfs rdma_cm makes the RoCE part fail at device level
// (subject mlx5_0, kind roce.Configfs) and refuse the port's declared TOS
// for that reason: the call must fail, not report a success when nothing
// was applied.
func TestSetRoCEDeviceLevelFailureFailsTheCall(t *testing.T) {
	for _, persist := range []bool{false, true} {
		e := newEnv(t, "", nil)
		if err := os.RemoveAll(filepath.Join(e.root, host.ConfigfsRdmaCM)); err != nil {
			t.Fatal(err)
		}
		err := e.svc.SetRoCE(context.Background(), service.RoCEChange{Device: "mlx5_0", TOS: 77, Persist: persist})
		var ae *service.ApplyError
		if !errors.As(err, &ae) {
			t.Fatalf("persist=%v: SetRoCE with no configfs rdma_cm = %v, want an ApplyError", persist, err)
		}
		if len(ae.Failed) == 0 || ae.Failed[0].Subject != reconcile.PortSubject("mlx5_0", 1) || ae.Failed[0].Kind != roce.TOS.Kind() ||
			!strings.Contains(ae.Failed[0].Err.Error(), "rdma_cm does not exist") {
			t.Errorf("persist=%v: failed actions %+v", persist, ae.Failed)
		}
		if ov := e.svc.RuntimeOverlay(); !ov.Empty() {
			t.Errorf("persist=%v: refused change stays in the overlay: %+v", persist, ov)
		}
		if got := e.persisted(); got != "<none>" {
			t.Errorf("persist=%v: refused change left a drop-in: %q", persist, got)
		}
	}
}

// An old failure of another field (the file declares mode v1, the port
// answers EIO) is not this call's failure: a TOS change succeeds and stays.
func TestSetRoCEIgnoresFailuresOfOtherFields(t *testing.T) {
	for _, persist := range []bool{false, true} {
		e := newEnv(t, "\n[[roce]]\ndevice = \"mlx5_0\"\nmode = \"v1\"\n", func(e *env) {
			e.k.Refuse("mlx5_0/ports/1/default_roce_mode", "IB/RoCE v1", syscall.EIO)
		})
		if len(e.svc.Reconciler().DeviceStates([]string{"mlx5_0"})[0].Ports[0].Failures) == 0 {
			t.Fatal("setup: the declared mode v1 did not fail")
		}
		if err := e.svc.SetRoCE(context.Background(), service.RoCEChange{Device: "mlx5_0", TOS: 77, Persist: persist}); err != nil {
			t.Fatalf("persist=%v: SetRoCE(tos=77) = %v, want success (only the mode, not asked for, fails)", persist, err)
		}
		if got := e.port(t, "mlx5_0", 1, "default_roce_tos"); got != "77" {
			t.Errorf("persist=%v: configfs tos = %q", persist, got)
		}
		d := e.svc.PolicyInForce().RoCEFor(config.Target{Name: "mlx5_0"}, 1)
		if d.TOS == nil || *d.TOS != 77 {
			t.Errorf("persist=%v: declared tos withdrawn: %+v", persist, d)
		}
	}
}

// Failures of the same field on another device are not this call's either.
func TestSetRoCEIgnoresFailuresOfOtherDevices(t *testing.T) {
	e := newEnv(t, "\n[[roce]]\ndevice = \"mlx5_1\"\ntos = 9\n", func(e *env) {
		e.k.Refuse("mlx5_1/ports/1/default_roce_tos", "9", syscall.EINVAL)
	})
	if err := e.svc.SetRoCE(context.Background(), service.RoCEChange{Device: "mlx5_0", TOS: 8}); err != nil {
		t.Fatalf("SetRoCE(mlx5_0) = %v; only mlx5_1 fails", err)
	}
}

// A refused call leaves nothing half-applied: the TOS it did set is put
// back, the declaration is withdrawn, and the error says so.
func TestSetRoCERefusedRestoresWhatItSet(t *testing.T) {
	for _, persist := range []bool{false, true} {
		e := newEnv(t, "", func(e *env) {
			e.k.Refuse("mlx5_0/ports/1/default_roce_mode", "IB/RoCE v1", syscall.EIO)
		})
		before := e.port(t, "mlx5_0", 1, "default_roce_tos")
		err := e.svc.SetRoCE(context.Background(), service.RoCEChange{Device: "mlx5_0", Mode: config.RoCEv1, TOS: 77, Persist: persist})
		var ae *service.ApplyError
		if !errors.As(err, &ae) {
			t.Fatalf("persist=%v: SetRoCE refused by the kernel = %v", persist, err)
		}
		if !errors.Is(err, syscall.EIO) {
			t.Errorf("persist=%v: error does not wrap the kernel's EIO: %v", persist, err)
		}
		if len(ae.Failed) != 1 || ae.Failed[0].Kind != roce.Mode.Kind() || ae.Failed[0].Subject != reconcile.PortSubject("mlx5_0", 1) {
			t.Errorf("persist=%v: failed %+v, want the mode only", persist, ae.Failed)
		}
		if got := e.port(t, "mlx5_0", 1, "default_roce_tos"); got != before {
			t.Errorf("persist=%v: tos = %q after the refused call, want %q put back", persist, got, before)
		}
		// Only what the call changed is put back, and that without error.
		if len(ae.Restored) != 1 || ae.Restored[0].Kind != roce.TOS.Kind() || ae.UndoErr != nil {
			t.Errorf("persist=%v: restored %+v (undo error %v), want the TOS only, put back", persist, ae.Restored, ae.UndoErr)
		}
		if msg := err.Error(); !strings.Contains(msg, "withdrawn") || !strings.Contains(msg, "put back") {
			t.Errorf("persist=%v: error does not say what was undone: %s", persist, msg)
		}
		if d := e.svc.PolicyInForce().RoCEFor(config.Target{Name: "mlx5_0"}, 1); !d.Empty() {
			t.Errorf("persist=%v: declaration not withdrawn: %+v", persist, d)
		}
		if got := e.persisted(); got != "<none>" {
			t.Errorf("persist=%v: drop-in after refused call: %q", persist, got)
		}
	}
}

// What a refused call found as it asked is nothing to put back: a TOS
// already at the value asked for is neither restored nor rewritten.
func TestSetRoCERefusedPutsBackOnlyWhatItChanged(t *testing.T) {
	e := newEnv(t, "", func(e *env) {
		e.k.Refuse("mlx5_0/ports/1/default_roce_mode", "IB/RoCE v1", syscall.EIO)
	})
	tos := e.port(t, "mlx5_0", 1, "default_roce_tos")
	n, err := strconv.Atoi(tos)
	if err != nil {
		t.Fatal(err)
	}
	err = e.svc.SetRoCE(context.Background(), service.RoCEChange{Device: "mlx5_0", Mode: config.RoCEv1, TOS: n})
	var ae *service.ApplyError
	if !errors.As(err, &ae) {
		t.Fatalf("SetRoCE refused by the kernel = %v", err)
	}
	if len(ae.Restored) != 0 || ae.UndoErr != nil {
		t.Errorf("restored %+v (undo error %v), want nothing: the TOS was already %s", ae.Restored, ae.UndoErr, tos)
	}
}

// A value the call set that cannot be put back is said: the undo error is
// in the call's error, and the value is not listed as restored.
func TestSetRoCERefusedSaysWhatItCouldNotPutBack(t *testing.T) {
	e := newEnv(t, "", nil)
	before := e.port(t, "mlx5_0", 1, "default_roce_tos")
	e.k.Refuse("mlx5_0/ports/1/default_roce_mode", "IB/RoCE v1", syscall.EIO)
	e.k.Refuse("mlx5_0/ports/1/default_roce_tos", before, syscall.EBUSY)
	err := e.svc.SetRoCE(context.Background(), service.RoCEChange{Device: "mlx5_0", Mode: config.RoCEv1, TOS: 77})
	var ae *service.ApplyError
	if !errors.As(err, &ae) {
		t.Fatalf("SetRoCE refused by the kernel = %v", err)
	}
	if ae.UndoErr == nil || !errors.Is(ae.UndoErr, syscall.EBUSY) || len(ae.Restored) != 0 {
		t.Errorf("restored %+v, undo error %v: want the TOS not put back, with EBUSY", ae.Restored, ae.UndoErr)
	}
	if !strings.Contains(err.Error(), "device or resource busy") {
		t.Errorf("the call's error does not say what could not be put back: %v", err)
	}
}

// A value the files declare is re-applied after a refused call, not
// overwritten by the restore.
func TestSetRoCERefusedKeepsFileDeclaration(t *testing.T) {
	e := newEnv(t, "\n[[roce]]\ndevice = \"mlx5_0\"\ntos = 5\n", func(e *env) {
		e.k.Refuse("mlx5_0/ports/1/default_roce_mode", "IB/RoCE v1", syscall.EIO)
	})
	err := e.svc.SetRoCE(context.Background(), service.RoCEChange{Device: "mlx5_0", Mode: config.RoCEv1, TOS: 77})
	if err == nil {
		t.Fatal("SetRoCE refused by the kernel succeeded")
	}
	if got := e.port(t, "mlx5_0", 1, "default_roce_tos"); got != "5" {
		t.Errorf("tos = %q, want the declared 5", got)
	}
}

// A runtime netns mode is switched in the kernel but never written for the
// next boot: modprobe.d keeps the files' mode. Persisting writes it.
func TestRuntimeNetnsModeDoesNotSurviveReboot(t *testing.T) {
	e := newEnv(t, "\n[netns]\nmode = \"shared\"\n", nil)
	if got := e.read(t, netns.ModprobeFile); !strings.Contains(got, "netns_mode=1") {
		t.Fatalf("setup: modprobe.d = %q", got)
	}
	if err := e.svc.SetNetnsMode(context.Background(), config.NetnsExclusive, false); err != nil {
		t.Fatal(err)
	}
	if m, _ := e.ns.Mode(); m != config.NetnsExclusive {
		t.Errorf("kernel mode = %s, want the runtime exclusive", m)
	}
	if got := e.read(t, netns.ModprobeFile); !strings.Contains(got, "netns_mode=1") {
		t.Errorf("a runtime change rewrote modprobe.d for the next boot: %q", got)
	}
	if err := e.svc.SetNetnsMode(context.Background(), config.NetnsExclusive, true); err != nil {
		t.Fatal(err)
	}
	if got := e.read(t, netns.ModprobeFile); !strings.Contains(got, "netns_mode=0") {
		t.Errorf("a persisted change did not reach modprobe.d: %q", got)
	}
	if ov := e.svc.RuntimeOverlay(); ov.Netns != config.NetnsUnmanaged {
		t.Errorf("runtime mode not forgotten after persisting: %q", ov.Netns)
	}
}

// With no [netns] in the files a runtime mode writes no modprobe.d at all.
func TestRuntimeNetnsModeWritesNoModprobeFile(t *testing.T) {
	e := newEnv(t, "", nil)
	if err := e.svc.SetNetnsMode(context.Background(), config.NetnsExclusive, false); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(e.root, netns.ModprobeFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("runtime mode created /%s (%v)", netns.ModprobeFile, err)
	}
	if m, _ := e.ns.Mode(); m != config.NetnsExclusive {
		t.Errorf("kernel mode = %s", m)
	}
	if got := e.svc.PolicyInForce().Netns; got.Runtime != config.NetnsExclusive || got.Mode != config.NetnsUnmanaged {
		t.Errorf("policy netns = %+v", got)
	}
}

// DeleteLink(persist) of a link an administrator's file declares, also when
// the drop-in or the overlay shadows it, is refused before anything changes:
// the next pass would recreate it.
func TestDeleteLinkPersistRefusesAdminDeclaredLink(t *testing.T) {
	const admin = "\n[[link]]\nname = \"rxe0\"\ntype = \"rxe\"\nnetdev = \"eth1\"\n"
	for _, tc := range []struct {
		name   string
		shadow func(t *testing.T, e *env)
	}{
		{"declared", func(*testing.T, *env) {}},
		{"shadowed by the drop-in", func(t *testing.T, e *env) {
			if err := e.svc.AddLink(context.Background(), config.Link{Name: "rxe0", Type: config.LinkRXE, Netdev: "eth1"}, true); err != nil {
				t.Fatal(err)
			}
			if src, _ := e.svc.PolicyInForce().LinkSource("rxe0"); !config.IsPersistedFile(src) {
				t.Fatalf("setup: rxe0 declared at %s", src)
			}
		}},
		{"shadowed at runtime", func(t *testing.T, e *env) {
			if err := e.svc.AddLink(context.Background(), config.Link{Name: "rxe0", Type: config.LinkRXE, Netdev: "eth1"}, false); err != nil {
				t.Fatal(err)
			}
			if src, _ := e.svc.PolicyInForce().LinkSource("rxe0"); src.File != config.RuntimeFile {
				t.Fatalf("setup: rxe0 declared at %s", src)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, admin, nil)
			tc.shadow(t, e)
			drop := e.persisted()
			calls := len(e.nl.Calls())
			err := e.svc.DeleteLink(context.Background(), "rxe0", true)
			var ae *service.ArgError
			if !errors.As(err, &ae) || ae.Arg != "name" {
				t.Fatalf("DeleteLink(persist) = %v, want an invalid name argument", err)
			}
			if !strings.Contains(err.Error(), filepath.Join(e.root, mainFile)+":4") {
				t.Errorf("error does not name the admin file and line: %v", err)
			}
			if got := e.persisted(); got != drop {
				t.Errorf("drop-in changed: %q -> %q", drop, got)
			}
			if got := e.nl.Calls(); len(got) != calls {
				t.Errorf("kernel touched: %v", got[calls:])
			}
			if !e.h.Exists(host.ClassInfiniband + "/rxe0") {
				t.Error("rxe0 deleted")
			}
		})
	}
}

// A link only rdmad's drop-in declares is removed persistently.
func TestDeleteLinkPersistRemovesDropInLink(t *testing.T) {
	e := newEnv(t, "", nil)
	if err := e.svc.AddLink(context.Background(), config.Link{Name: "rxe0", Type: config.LinkRXE, Netdev: "eth1"}, true); err != nil {
		t.Fatal(err)
	}
	if !e.h.Exists(host.ClassInfiniband + "/rxe0") {
		t.Fatal("rxe0 not created")
	}
	if err := e.svc.DeleteLink(context.Background(), "rxe0", true); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(e.persisted(), "rxe0") {
		t.Errorf("drop-in still declares rxe0: %q", e.persisted())
	}
	e.svc.ReconcileNow(context.Background())
	if e.h.Exists(host.ClassInfiniband + "/rxe0") {
		t.Error("rxe0 recreated")
	}
}

// Every overlay change reaches the config-change listeners (the bus view),
// even when no pass has anything to do: deleting a declared link that does
// not exist in the kernel.
func TestOverlayChangeNotifiesListeners(t *testing.T) {
	e := newEnv(t, "\n[[link]]\nname = \"rxe9\"\ntype = \"rxe\"\nnetdev = \"nosuch0\"\n", nil)
	var mu sync.Mutex
	var seen [][]string
	e.svc.OnConfigChange(func() {
		var names []string
		for _, l := range e.svc.PolicyInForce().Links {
			names = append(names, l.Name)
		}
		mu.Lock()
		seen = append(seen, names)
		mu.Unlock()
	})
	if err := e.svc.DeleteLink(context.Background(), "rxe9", false); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) == 0 || len(seen[len(seen)-1]) != 0 {
		t.Errorf("listeners saw %v, want a last call without rxe9", seen)
	}
}

// A runtime DeleteLink failure in the kernel keeps the link declared.
func TestDeleteLinkKernelFailureKeepsDeclaration(t *testing.T) {
	for _, persist := range []bool{false, true} {
		e := newEnv(t, "", nil)
		if err := e.svc.AddLink(context.Background(), config.Link{Name: "rxe0", Type: config.LinkRXE, Netdev: "eth1"}, persist); err != nil {
			t.Fatal(err)
		}
		drop := e.persisted()
		e.nl.DelErr = syscall.EBUSY
		err := e.svc.DeleteLink(context.Background(), "rxe0", persist)
		var ae *service.ApplyError
		if !errors.As(err, &ae) || !errors.Is(err, syscall.EBUSY) {
			t.Fatalf("persist=%v: DeleteLink refused by the kernel = %v", persist, err)
		}
		if len(ae.Failed) != 1 || ae.Failed[0].Subject != reconcile.LinkSubject("rxe0") || ae.Failed[0].Kind != links.Remove {
			t.Errorf("persist=%v: failed %+v", persist, ae.Failed)
		}
		if _, ok := e.svc.PolicyInForce().LinkSource("rxe0"); !ok {
			t.Errorf("persist=%v: rxe0 no longer declared after a failed delete", persist)
		}
		if got := e.persisted(); got != drop {
			t.Errorf("persist=%v: drop-in %q, want it as before %q", persist, got, drop)
		}
		if !e.h.Exists(host.ClassInfiniband + "/rxe0") {
			t.Errorf("persist=%v: rxe0 gone", persist)
		}
	}
}

// A kernel refusal of AddLink fails the call and withdraws the link, at
// runtime and persisted alike.
func TestAddLinkKernelRefusalFailsAndRollsBack(t *testing.T) {
	for _, persist := range []bool{false, true} {
		e := newEnv(t, "", nil)
		e.nl.AddErr = syscall.EOPNOTSUPP
		err := e.svc.AddLink(context.Background(), config.Link{Name: "rxe1", Type: config.LinkRXE, Netdev: "eth1"}, persist)
		var ae *service.ApplyError
		if !errors.As(err, &ae) || !errors.Is(err, syscall.EOPNOTSUPP) {
			t.Fatalf("persist=%v: AddLink refused by the kernel = %v, want an ApplyError", persist, err)
		}
		if len(ae.Failed) != 1 || ae.Failed[0].Subject != reconcile.LinkSubject("rxe1") || ae.Failed[0].Kind != links.Create {
			t.Errorf("persist=%v: failed %+v", persist, ae.Failed)
		}
		if _, ok := e.svc.PolicyInForce().LinkSource("rxe1"); ok {
			t.Errorf("persist=%v: refused link still declared", persist)
		}
		if got := e.persisted(); got != "<none>" {
			t.Errorf("persist=%v: drop-in %q", persist, got)
		}
		if ov := e.svc.RuntimeOverlay(); !ov.Empty() {
			t.Errorf("persist=%v: overlay %+v", persist, ov)
		}
	}
}

// A kernel refusal of the netns switch fails the call and withdraws the
// mode: not switched, not written for the next boot.
func TestSetNetnsModeKernelRefusalFailsAndRollsBack(t *testing.T) {
	for _, persist := range []bool{false, true} {
		e := newEnv(t, "", func(e *env) { hosttest.Write(t, e.root, host.ProcModules, "ib_core 1 0 - Live 0x0\n") })
		e.ns.Refuse(&os.SyscallError{Syscall: "rdma system set netns", Err: syscall.EPERM})
		err := e.svc.SetNetnsMode(context.Background(), config.NetnsExclusive, persist)
		var ae *service.ApplyError
		if !errors.As(err, &ae) || !errors.Is(err, syscall.EPERM) {
			t.Fatalf("persist=%v: SetNetnsMode refused = %v", persist, err)
		}
		if len(ae.Failed) != 1 || ae.Failed[0].Subject != reconcile.HostSubject() || ae.Failed[0].Kind != netns.Mode.Kind() {
			t.Errorf("persist=%v: failed %+v", persist, ae.Failed)
		}
		if m := e.svc.PolicyInForce().Netns; m.Mode != config.NetnsUnmanaged || m.Runtime != config.NetnsUnmanaged {
			t.Errorf("persist=%v: mode still declared: %+v", persist, m)
		}
		if _, err := os.Stat(filepath.Join(e.root, netns.ModprobeFile)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("persist=%v: modprobe.d written for a refused mode (%v)", persist, err)
		}
		if got := e.persisted(); got != "<none>" {
			t.Errorf("persist=%v: drop-in %q", persist, got)
		}
	}
}

// Each call costs exactly one pass; a refused one two (the pass and the
// one after the rollback).
func TestOnePassPerCall(t *testing.T) {
	e := newEnv(t, "", nil)
	count := func(what string, want int64, call func() error) {
		t.Helper()
		before := e.passes.Load()
		if err := call(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got := e.passes.Load() - before; got != want {
			t.Errorf("%s ran %d passes, want %d", what, got, want)
		}
	}
	ctx := context.Background()
	count("Reload", 1, func() error { _, err := e.svc.ReloadNow(ctx); return err })
	count("SetRoCE", 1, func() error { return e.svc.SetRoCE(ctx, service.RoCEChange{Device: "mlx5_0", Port: 1, TOS: 3}) })
	count("SetRoCE --persist", 1, func() error {
		return e.svc.SetRoCE(ctx, service.RoCEChange{Device: "mlx5_0", Port: 1, TOS: 4, Persist: true})
	})
	count("AddLink --persist", 1, func() error {
		return e.svc.AddLink(ctx, config.Link{Name: "rxe0", Type: config.LinkRXE, Netdev: "eth1"}, true)
	})
	count("DeleteLink --persist", 1, func() error { return e.svc.DeleteLink(ctx, "rxe0", true) })
	count("SetNetnsMode", 1, func() error { return e.svc.SetNetnsMode(ctx, config.NetnsShared, false) })
	// A reload of files that did not change queues nothing (rdmad's own
	// drop-in writes come back through the file watcher); a changed file
	// queues a pass.
	expired, cancel := context.WithCancel(ctx)
	cancel()
	if err := e.svc.Reload(); err != nil {
		t.Fatal(err)
	}
	if err := e.svc.Idle(expired); err != nil {
		t.Errorf("a reload of unchanged files queued a pass")
	}
	hosttest.Write(t, e.root, mainFile, "[modules]\nenable = false\n[[roce]]\ndevice = \"mlx5_1\"\ntos = 1\n")
	if err := e.svc.Reload(); err != nil {
		t.Fatal(err)
	}
	if err := e.svc.Idle(expired); err == nil {
		t.Errorf("a reload of a changed file queued no pass")
	}
}

// A persisted mode the running kernel refuses (EBUSY: other namespaces)
// stays persisted for the next boot, and the call says the switch waits;
// a modprobe.d file rdmad does not own fails the call and withdraws it.
func TestSetNetnsModePersistedButBusy(t *testing.T) {
	e := newEnv(t, "", func(e *env) { hosttest.Write(t, e.root, host.ProcModules, "ib_core 1 0 - Live 0x0\n") })
	e.ns.Refuse(&os.SyscallError{Syscall: "rdma system set netns", Err: syscall.EBUSY})
	err := e.svc.SetNetnsMode(context.Background(), config.NetnsExclusive, true)
	var nb *service.NextBootError
	if !errors.As(err, &nb) || !errors.Is(err, syscall.EBUSY) || !strings.Contains(err.Error(), "next boot") {
		t.Fatalf("SetNetnsMode(persist) refused with EBUSY = %v, want a NextBootError", err)
	}
	if got := e.svc.PolicyInForce().Netns.Mode; got != config.NetnsExclusive {
		t.Errorf("declared mode %q, want exclusive kept", got)
	}
	if got := e.read(t, netns.ModprobeFile); !strings.Contains(got, "netns_mode=0") {
		t.Errorf("modprobe.d = %q, want exclusive for the next boot", got)
	}
	if !strings.Contains(e.persisted(), "exclusive") {
		t.Errorf("drop-in %q", e.persisted())
	}
	if m, _ := e.ns.Mode(); m != config.NetnsShared {
		t.Errorf("kernel mode %s", m)
	}
}

func TestSetNetnsModePersistRefusesForeignModprobeFile(t *testing.T) {
	e := newEnv(t, "", func(e *env) {
		hosttest.Write(t, e.root, host.ProcModules, "ib_core 1 0 - Live 0x0\n")
		hosttest.Write(t, e.root, netns.ModprobeFile, "options ib_core netns_mode=1\n") // an admin's file
	})
	err := e.svc.SetNetnsMode(context.Background(), config.NetnsExclusive, true)
	var ae *service.ApplyError
	if !errors.As(err, &ae) || !errors.Is(err, host.ErrNotManaged) {
		t.Fatalf("SetNetnsMode(persist) over a foreign modprobe.d file = %v", err)
	}
	if len(ae.Failed) != 1 || ae.Failed[0].Subject != reconcile.HostSubject() || ae.Failed[0].Kind != netns.Modprobe.Kind() {
		t.Errorf("failed %+v", ae.Failed)
	}
	if got := e.svc.PolicyInForce().Netns.Mode; got != config.NetnsUnmanaged {
		t.Errorf("declared mode %q after the refused call", got)
	}
	if got := e.read(t, netns.ModprobeFile); got != "options ib_core netns_mode=1" {
		t.Errorf("the admin's file changed: %q", got)
	}
	if got := e.persisted(); got != "<none>" {
		t.Errorf("drop-in %q", got)
	}
}

// Reloads from the file watcher or SIGHUP may run while persisted calls
// write rdmad's drop-in: every call stands, and the policy in force at the
// end is the files' (each load and its putting in force are one step).
func TestConcurrentReloadsAndPersistedCalls(t *testing.T) {
	e := newEnv(t, "", nil)
	ctx := context.Background()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
				_ = e.svc.Reload()
			}
		}
	}()
	for i := 0; i < 40; i++ {
		if err := e.svc.SetRoCE(ctx, service.RoCEChange{Device: "mlx5_0", Port: 1, TOS: i, Persist: true}); err != nil {
			t.Errorf("SetRoCE %d: %v", i, err)
		}
	}
	close(stop)
	wg.Wait()
	if err := e.svc.Reload(); err != nil {
		t.Fatal(err)
	}
	d := e.svc.PolicyInForce().RoCEFor(config.Target{Name: "mlx5_0"}, 1)
	if d.TOS == nil || *d.TOS != 39 {
		t.Errorf("declared tos %v after the last persisted call, want 39", d.TOS)
	}
}

// A name with a byte that is not UTF-8 cannot be stored in the TOML
// drop-in (it would come back as another name): a persisted call is refused
// naming the argument and nothing is created or written; without persist
// the same name is accepted.
func TestPersistRefusesNamesTOMLCannotHold(t *testing.T) {
	e := newEnv(t, "", nil)
	if err := linkstest.AddNetdev(e.h, "eth\xff"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		arg  string
		link config.Link
	}{
		{"name", config.Link{Name: "rxe\xff", Type: config.LinkRXE, Netdev: "eth1"}},
		{"netdev", config.Link{Name: "rxe0", Type: config.LinkRXE, Netdev: "eth\xff"}},
	} {
		err := e.svc.AddLink(context.Background(), c.link, true)
		var ae *service.ArgError
		if !errors.As(err, &ae) || ae.Arg != c.arg || !strings.Contains(ae.Msg, "UTF-8") {
			t.Errorf("AddLink(%q, %q, persist) = %v, want an ArgError on %s naming UTF-8", c.link.Name, c.link.Netdev, err, c.arg)
		}
		if e.h.Exists(host.ClassInfiniband + "/" + c.link.Name) {
			t.Errorf("%q created by a refused call", c.link.Name)
		}
	}
	if got := e.persisted(); got != "<none>" {
		t.Errorf("drop-in written by refused calls: %q", got)
	}
	if err := e.svc.AddLink(context.Background(), config.Link{Name: "rxe\xff", Type: config.LinkRXE, Netdev: "eth1"}, false); err != nil {
		t.Errorf("AddLink without persist = %v, want success", err)
	}
	err := e.svc.SetRoCE(context.Background(), service.RoCEChange{Device: "rxe\xff", Port: 1, Mode: config.RoCEv2, TOS: -1, Persist: true})
	var ae *service.ArgError
	if !errors.As(err, &ae) || ae.Arg != "device" {
		t.Errorf("SetRoCE(persist) on a non-UTF-8 device = %v, want an ArgError on device", err)
	}
	if got := e.persisted(); got != "<none>" {
		t.Errorf("drop-in written by a refused SetRoCE: %q", got)
	}
}

// Every AfterEachCall listener hears the end of every mutating call, in
// the order they were added, with the policy status that holds then: an
// accepted call's declaration, and for a refused call the policy as it was
// before it (its tentative change is never published). A second listener
// is added beside the first, never in its place.
func TestAfterEachCallPublishesToEveryListener(t *testing.T) {
	e := newEnv(t, "", nil)
	e.nl.AddErr = syscall.EOPNOTSUPP
	var mu sync.Mutex
	var heard []string
	for _, who := range []string{"first", "second"} {
		e.svc.AfterEachCall(func(st service.PolicyStatus) {
			tos := "none"
			if rs := st.Policy.RoCE; len(rs) > 0 && rs[len(rs)-1].TOS != nil {
				tos = strconv.Itoa(*rs[len(rs)-1].TOS)
			}
			_, link := st.Policy.LinkSource("rxe1")
			mu.Lock()
			heard = append(heard, fmt.Sprintf("%s: tos %s, rxe1 %v, %s", who, tos, link, st.InForce.Origin))
			mu.Unlock()
		})
	}
	ctx := context.Background()
	if err := e.svc.SetRoCE(ctx, service.RoCEChange{Device: "mlx5_0", Port: 1, TOS: 3}); err != nil {
		t.Fatal(err)
	}
	if err := e.svc.AddLink(ctx, config.Link{Name: "rxe1", Type: config.LinkRXE, Netdev: "eth1"}, false); err == nil {
		t.Fatal("AddLink accepted by a kernel that refuses links")
	}
	origin := e.svc.PolicyStatus().InForce.Origin
	want := []string{
		fmt.Sprintf("first: tos 3, rxe1 false, %s", origin), fmt.Sprintf("second: tos 3, rxe1 false, %s", origin),
		fmt.Sprintf("first: tos 3, rxe1 false, %s", origin), fmt.Sprintf("second: tos 3, rxe1 false, %s", origin),
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(heard, want) {
		t.Errorf("the listeners heard\n%s\nwant\n%s", strings.Join(heard, "\n"), strings.Join(want, "\n"))
	}
	if got := e.svc.PolicyStatus(); got.Policy != e.svc.PolicyInForce() || got.ConfigError != nil {
		t.Errorf("PolicyStatus %+v, not the policy in force", got)
	}
}
