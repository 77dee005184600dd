package service_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rdmad/rdmad/daemon/compose"
	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/daemon/modules"
	"github.com/rdmad/rdmad/daemon/reconcile"
	"github.com/rdmad/rdmad/daemon/roce"
	"github.com/rdmad/rdmad/daemon/service"
)

// Fault injection through the host seams (docs/security.md, Faults). In each case
// rdmad goes on (later calls and passes work), the other device is
// reconciled, the error sits on the object it concerns, and no file is
// lost or half written.

const faultPolicy = "\n[[roce]]\ndevice = \"mlx5_*\"\ntos = 42\n"

// portFailures is the Error a port object publishes, as its failures.
func portFailures(t *testing.T, svc *service.Service, dev string, port int) []reconcile.Action {
	t.Helper()
	st := svc.Reconciler().DeviceStates([]string{dev})
	if len(st) != 1 {
		t.Fatalf("no state for %s", dev)
	}
	for _, p := range st[0].Ports {
		if p.Number == port {
			return p.Failures
		}
	}
	t.Fatalf("no port %s/%d", dev, port)
	return nil
}

// configfs refuses a write with EIO, EINVAL or EACCES: that port fails,
// visibly, with the kernel's error; the other device is set; the failure
// clears when the kernel accepts again.
func TestConfigfsWriteErrorsStayOnTheirPort(t *testing.T) {
	for _, errno := range []syscall.Errno{syscall.EIO, syscall.EINVAL, syscall.EACCES} {
		t.Run(errno.Error(), func(t *testing.T) {
			e := newEnv(t, faultPolicy, func(e *env) {
				e.k.Refuse("mlx5_0/ports/1/default_roce_tos", "", errno)
			})
			fails := portFailures(t, e.svc, "mlx5_0", 1)
			if len(fails) != 1 || fails[0].Kind != roce.TOS.Kind() || !errors.Is(fails[0].Err, errno) {
				t.Fatalf("mlx5_0/1 failures %+v, want the TOS with %v", fails, errno)
			}
			if got := e.port(t, "mlx5_1", 1, "default_roce_tos"); got != "42" {
				t.Errorf("mlx5_1 not reconciled beside the failing port: tos %s", got)
			}
			if len(portFailures(t, e.svc, "mlx5_1", 1)) != 0 {
				t.Error("the failure spilled onto mlx5_1")
			}
			if sum := e.svc.Reconciler().Summary(); len(sum.Failures) != 1 {
				t.Errorf("summary failures %+v", sum.Failures)
			}
			e.k.Refuse("mlx5_0/ports/1/default_roce_tos", "", 0)
			e.svc.ReconcileNow(context.Background())
			if fails := portFailures(t, e.svc, "mlx5_0", 1); len(fails) != 0 || e.port(t, "mlx5_0", 1, "default_roce_tos") != "42" {
				t.Errorf("after the kernel accepts again: failures %+v", fails)
			}
		})
	}
}

// The device goes away between the read of the pass and its write (the
// kernel answers ENODEV): not a failure but a removal, which the device's
// remove event would report anyway; the other device is set. If the
// device is still there, ENODEV is a failure on that port like any other.
func TestDeviceVanishingBetweenReadAndWrite(t *testing.T) {
	e := newEnv(t, "", nil)
	if err := os.WriteFile(filepath.Join(e.root, mainFile), []byte("[modules]\nenable = false\n"+faultPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	vanished := false
	e.k.BeforeWrite(func(rel, _ string) {
		if strings.Contains(rel, "mlx5_0/") {
			once.Do(func() {
				vanished = true
				// Unplugged: sysfs and configfs forget it at once.
				os.Remove(filepath.Join(e.root, host.ClassInfiniband, "mlx5_0"))
				os.RemoveAll(filepath.Join(e.root, host.ConfigfsRdmaCM, "mlx5_0"))
				e.k.Refuse("mlx5_0/ports/1/default_roce_tos", "", syscall.ENODEV)
			})
		}
	})
	if _, err := e.svc.ReloadNow(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !vanished {
		t.Fatal("the pass wrote nothing to mlx5_0")
	}
	sum := e.svc.Reconciler().Summary()
	if strings.Join(sum.Devices, ",") != "mlx5_1" || len(sum.Failures) != 0 {
		t.Errorf("after mlx5_0 vanished mid-pass: devices %v, failures %+v", sum.Devices, sum.Failures)
	}
	if got := e.port(t, "mlx5_1", 1, "default_roce_tos"); got != "42" {
		t.Errorf("mlx5_1 tos %s", got)
	}

	// Still present, yet ENODEV (a driver resetting): a failure, on its port.
	e2 := newEnv(t, faultPolicy, func(e *env) {
		e.k.Refuse("mlx5_0/ports/1/default_roce_tos", "", syscall.ENODEV)
	})
	if fails := portFailures(t, e2.svc, "mlx5_0", 1); len(fails) != 1 || !errors.Is(fails[0].Err, syscall.ENODEV) || !strings.Contains(fails[0].Err.Error(), "went away") {
		t.Errorf("ENODEV on a present device: failures %+v", fails)
	}
	if got := e2.port(t, "mlx5_1", 1, "default_roce_tos"); got != "42" {
		t.Errorf("mlx5_1 tos %s", got)
	}
}

// daemonEnv is a service built as the daemon builds it (modules loaded in
// the background) over the mlx5 fixture, with its queue running.
func daemonEnv(t *testing.T, cfg string, mp *hosttest.Modprobe) (*service.Service, *hosttest.Kernel, string) {
	t.Helper()
	root := hosttest.Copy(t, "mlx5")
	hosttest.Write(t, root, mainFile, cfg)
	hosttest.Write(t, root, "etc/rdma/modules/rdma.conf", "ib_uverbs\nrdma_ucm\n")
	k := hosttest.NewKernel(root)
	svc, err := service.New(service.Options{Host: k.Host(), Parts: compose.Parts(compose.Kernel{Modules: mp}), Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = svc.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	svc.Start()
	return svc, k, root
}

func hostAction(svc *service.Service, kind reconcile.Kind) (reconcile.Action, bool) {
	st := svc.Reconciler().Snapshot()
	for _, a := range st.HostActions {
		if a.Kind == kind {
			return a, true
		}
	}
	return reconcile.Action{}, false
}

// modprobe hangs: the module load is pending in the background, and
// meanwhile passes, reloads and calls go on. When it returns, its result
// is published.
func TestModprobeHangDoesNotHoldPasses(t *testing.T) {
	mp := &hosttest.Modprobe{Block: make(chan struct{})}
	svc, _, root := daemonEnv(t, "[modules]\nenable = true\n"+faultPolicy, mp)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := svc.Idle(ctx); err != nil {
		t.Fatalf("the first pass waited for the hanging modprobe: %v", err)
	}
	if a, ok := hostAction(svc, modules.Load); !ok || a.Status != reconcile.Pending {
		t.Errorf("modules action %+v, want pending", a)
	}
	if got := hosttest.Read(t, root, host.ConfigfsPortPath("mlx5_0", 1, "default_roce_tos")); got != "42" {
		t.Errorf("RoCE waited for modprobe: tos %s", got)
	}
	if err := svc.SetRoCE(ctx, service.RoCEChange{Device: "mlx5_1", TOS: 7}); err != nil {
		t.Errorf("SetRoCE while modprobe hangs: %v", err)
	}
	if _, err := svc.ReloadNow(ctx); err != nil {
		t.Errorf("Reload while modprobe hangs: %v", err)
	}
	if n := len(mp.Calls()); n != 1 {
		t.Errorf("%d modprobe calls while the first hangs, want 1", n)
	}
	close(mp.Block)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if a, ok := hostAction(svc, modules.Load); ok && a.Status != reconcile.Pending {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the load's end was never published")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// modprobe fails: the failure is on the host object (Manager) with
// modprobe's words, RoCE is applied anyway, and the same batch is not
// retried on every pass.
func TestModprobeFailureIsPublishedNotRetriedEveryPass(t *testing.T) {
	mp := &hosttest.Modprobe{}
	mp.Fail("rdma_ucm", errors.New("modprobe: FATAL: Module rdma_ucm not found"))
	svc, _, root := daemonEnv(t, "[modules]\nenable = true\n"+faultPolicy, mp)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if a, ok := hostAction(svc, modules.Load); ok && a.Status == reconcile.Failed {
			if !strings.Contains(a.Err.Error(), "rdma_ucm not found") {
				t.Errorf("modules failure %v", a.Err)
			}
			break
		}
		if time.Now().After(deadline) {
			a, _ := hostAction(svc, modules.Load)
			t.Fatalf("the failed load was never published: %+v", a)
		}
		svc.RequestAll()
		time.Sleep(20 * time.Millisecond)
	}
	if got := hosttest.Read(t, root, host.ConfigfsPortPath("mlx5_0", 1, "default_roce_tos")); got != "42" {
		t.Errorf("tos %s", got)
	}
	calls := len(mp.Calls())
	for range 5 {
		svc.RequestAll()
		if err := svc.Idle(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(mp.Calls()); n != calls {
		t.Errorf("5 more passes called modprobe %d more times", n-calls)
	}
	if s := reconcile.Summarize(svc.Reconciler().Summary().Failures); !strings.Contains(s, "modules") {
		t.Errorf("Manager LastResult %q does not show the module failure", s)
	}
}

// mountSmallFS puts a tmpfs of size bytes on dir (root only; skipped where
// mounting is not allowed).
func mountSmallFS(t *testing.T, dir string, size int) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0755", size)); err != nil {
		t.Skipf("cannot mount a tmpfs here (%v): needs root", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
}

// Persisting to a full or read-only file system: the call fails with the
// kernel's error, rdmad's drop-in keeps its old content, no temp file is
// left, the declaration in force and the kernel are as before the call,
// and rdmad goes on (runtime changes work).
func TestPersistOnFullOrReadOnlyFileSystem(t *testing.T) {
	for _, tc := range []struct {
		name   string
		errno  syscall.Errno
		break_ func(t *testing.T, dir string)
	}{
		{"full", syscall.ENOSPC, func(t *testing.T, dir string) {
			f, err := os.Create(filepath.Join(dir, "fill"))
			if err != nil {
				t.Fatal(err)
			}
			_, _ = f.Write(make([]byte, 64<<10))
			f.Close()
		}},
		{"read-only", syscall.EROFS, func(t *testing.T, dir string) {
			if err := syscall.Mount("", dir, "", syscall.MS_REMOUNT|syscall.MS_RDONLY, ""); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var dropInDir string
			e := newEnv(t, "", func(e *env) {
				dropInDir = filepath.Join(e.root, config.DropInDir)
				mountSmallFS(t, dropInDir, 16<<10)
			})
			ctx := context.Background()
			if err := e.svc.SetRoCE(ctx, service.RoCEChange{Device: "mlx5_0", TOS: 11, Persist: true}); err != nil {
				t.Fatal(err)
			}
			old := e.persisted()
			tc.break_(t, dropInDir)

			err := e.svc.SetRoCE(ctx, service.RoCEChange{Device: "mlx5_0", TOS: 12, Mode: config.RoCEv1, Persist: true})
			if !errors.Is(err, tc.errno) {
				t.Fatalf("persist on a %s file system: %v, want %v", tc.name, err, tc.errno)
			}
			if got := e.persisted(); got != old {
				t.Errorf("drop-in changed:\n%s\nwas:\n%s", got, old)
			}
			if temps, _ := filepath.Glob(filepath.Join(dropInDir, ".*.tmp-*")); len(temps) != 0 {
				t.Errorf("temp files left: %v", temps)
			}
			if got := e.port(t, "mlx5_0", 1, "default_roce_tos"); got != "11" {
				t.Errorf("kernel tos %s after the failed persist, want 11", got)
			}
			if d := e.svc.PolicyInForce().RoCEFor(config.Target{Name: "mlx5_0"}, 1); d.TOS == nil || *d.TOS != 11 || d.Mode != "" {
				t.Errorf("declaration in force %+v after the failed persist", d)
			}
			if err := e.svc.SetRoCE(ctx, service.RoCEChange{Device: "mlx5_1", TOS: 13}); err != nil {
				t.Errorf("a runtime change after the failed persist: %v", err)
			}
		})
	}
}

// A persisted Withdraw that would empty rdmad's drop-in, on a read-only
// file system: the call fails with the kernel's error, and the drop-in
// and the declaration in force stay (a removal that failed is not taken
// for one that happened).
func TestPersistedWithdrawOnReadOnlyFileSystem(t *testing.T) {
	var dropInDir string
	e := newEnv(t, "", func(e *env) {
		dropInDir = filepath.Join(e.root, config.DropInDir)
		mountSmallFS(t, dropInDir, 16<<10)
	})
	ctx := context.Background()
	if err := e.svc.SetRoCE(ctx, service.RoCEChange{Device: "mlx5_0", Port: 1, TOS: 11, Persist: true}); err != nil {
		t.Fatal(err)
	}
	old := e.persisted()
	if err := syscall.Mount("", dropInDir, "", syscall.MS_REMOUNT|syscall.MS_RDONLY, ""); err != nil {
		t.Fatal(err)
	}
	err := e.svc.Withdraw(ctx, service.Withdrawal{Kind: service.WithdrawRoCE, Name: "mlx5_0", Port: 1, Persist: true})
	if !errors.Is(err, syscall.EROFS) {
		t.Fatalf("persisted Withdraw on a read-only file system: %v, want EROFS", err)
	}
	if got := e.persisted(); got != old {
		t.Errorf("drop-in changed:\n%s\nwas:\n%s", got, old)
	}
	if d := e.svc.PolicyInForce().RoCEFor(config.Target{Name: "mlx5_0"}, 1); d.TOS == nil || *d.TOS != 11 || !config.IsPersistedFile(d.TOSSource) {
		t.Errorf("declaration in force after the failed withdraw: tos %v from %s, want 11 from rdmad's drop-in", d.TOS, d.TOSSource)
	}
}
