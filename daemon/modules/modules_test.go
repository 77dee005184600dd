package modules_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/daemon/modules"
	"github.com/rdmad/rdmad/daemon/reconcile"
	"github.com/rdmad/rdmad/test/livetest"
)

func TestConfFilesByTransport(t *testing.T) {
	for _, tc := range []struct {
		fixture string
		want    []string
	}{
		{"mlx5", []string{"infiniband", "rdma", "roce"}}, // rdma-core: mlx5_core means both
		{"mlx4", []string{"infiniband", "rdma", "roce"}},
		{"hfi1", []string{"opa", "rdma"}},
		{"rxe", []string{"rdma", "roce"}},
		{"sparse", []string{"rdma", "roce"}}, // bnxt_en
	} {
		devs, err := host.New(hosttest.FixtureDir(tc.fixture)).Devices()
		if err != nil {
			t.Fatal(err)
		}
		if got := modules.ConfFiles(pass(nil, devs).Devices); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: ConfFiles = %v, want %v", tc.fixture, got, tc.want)
		}
	}
	if got := modules.ConfFiles(nil); got != nil {
		t.Errorf("no devices: %v", got)
	}
}

func policy(dir string) *config.Policy {
	return &config.Policy{Modules: config.Modules{Enable: true, Directory: dir}}
}

// pass is what the reconciler hands the part: the policy and every device.
func pass(pol *config.Policy, devs []host.Device) *reconcile.HostRun {
	p := &reconcile.HostRun{Policy: pol}
	for i := range devs {
		p.Devices = append(p.Devices, &devs[i])
	}
	return p
}

func TestPartLoadsMissingInOneBatch(t *testing.T) {
	root := hosttest.Copy(t, "rxe")
	h := host.New(root)
	devs, _ := h.Devices()
	hosttest.Write(t, root, "etc/rdma/modules/roce.conf", "rdma_rxe\nrdma-ucm\n")
	l := &hosttest.Modprobe{Root: root}
	res := (&modules.Part{Host: h, Loader: l}).ApplyHost(context.Background(), pass(policy("/etc/rdma/modules"), devs))
	want := [][]string{{"ib_iser", "ib_isert", "ib_uverbs", "rdma_ucm", "xprtrdma", "svcrdma"}}
	if !reflect.DeepEqual(l.Calls(), want) {
		t.Fatalf("modprobe calls = %q, want %q (rdma_rxe loaded, rdma-ucm same as rdma_ucm)", l.Calls(), want)
	}
	acts := res.Actions
	if len(acts) != 1 || acts[0].Status != reconcile.Changed || acts[0].Kind != modules.Load || acts[0].Subject != reconcile.HostSubject() {
		t.Fatalf("acts = %+v", acts)
	}
	if wantMods := []string{"ib_iser", "ib_isert", "ib_uverbs", "rdma_ucm", "xprtrdma", "svcrdma", "rdma_rxe"}; !reflect.DeepEqual(res.Modules, wantMods) {
		t.Errorf("modules fact = %q, want %q", res.Modules, wantMods)
	}

	// Once the kernel has them (the fake appended them to proc/modules),
	// nothing is loaded again.
	res = (&modules.Part{Host: h, Loader: l}).ApplyHost(context.Background(), pass(policy("/etc/rdma/modules"), devs))
	if len(l.Calls()) != 1 || len(res.Actions) != 1 || res.Actions[0].Status != reconcile.Unchanged {
		t.Fatalf("second pass: calls %q acts %+v", l.Calls(), res.Actions)
	}
}

// In the daemon a pass never waits for modprobe: the load runs in the
// background, the action is pending, and its end asks for a pass. A batch
// that failed is not retried by every pass, only by a forced one.
func TestBackgroundLoads(t *testing.T) {
	root := hosttest.Copy(t, "rxe")
	h := host.New(root)
	devs, _ := h.Devices()
	hosttest.Write(t, root, "etc/rdma/modules/rdma.conf", "ib_uverbs\n")
	block := make(chan struct{})
	l := &hosttest.Modprobe{Root: root, Block: block}
	done := make(chan struct{}, 4)
	p := &modules.Part{Host: h, Loader: l, Done: func() { done <- struct{}{} }}
	pol := policy("/etc/rdma/modules")
	res := p.ApplyHost(context.Background(), pass(pol, devs))
	if len(res.Actions) != 1 || res.Actions[0].Status != reconcile.Pending {
		t.Fatalf("first pass: %+v", res.Actions)
	}
	if res2 := p.ApplyHost(context.Background(), pass(pol, devs)); res2.Actions[0].Status != reconcile.Pending {
		t.Fatalf("a second pass during the load: %+v", res2.Actions)
	}
	close(block)
	<-done
	p.Wait()
	if n := len(l.Calls()); n != 1 {
		t.Fatalf("a second pass during the load started another: %d calls", n)
	}
	if res := p.ApplyHost(context.Background(), pass(pol, devs)); res.Actions[0].Status != reconcile.Unchanged || !reflect.DeepEqual(res.Modules, []string{"ib_uverbs"}) {
		t.Fatalf("after the load: %+v, modules %q", res.Actions, res.Modules)
	}

	// A module that cannot load: one attempt, then a standing failure.
	hosttest.Write(t, root, "etc/rdma/modules/rdma.conf", "ib_uverbs\nnosuch_mod\n")
	l.Fail("nosuch_mod", errors.New("modprobe: FATAL: Module nosuch_mod not found"))
	p.ApplyHost(context.Background(), pass(pol, devs))
	<-done
	p.Wait()
	for i := 0; i < 3; i++ {
		res := p.ApplyHost(context.Background(), pass(pol, devs))
		if res.Actions[0].Status != reconcile.Failed || !strings.Contains(res.Actions[0].Err.Error(), "nosuch_mod not found") {
			t.Fatalf("pass %d after the failed load: %+v", i, res.Actions)
		}
	}
	if n := len(l.Calls()); n != 2 {
		t.Errorf("modprobe ran %d times; a failed batch must not be retried by every pass", n)
	}
	forced := pass(pol, devs)
	forced.Forced = true
	if res := p.ApplyHost(context.Background(), forced); res.Actions[0].Status != reconcile.Pending {
		t.Errorf("forced pass: %+v", res.Actions)
	}
	<-done
	p.Wait()
	if n := len(l.Calls()); n != 3 {
		t.Errorf("a forced pass must retry: %d calls", n)
	}
}

func TestPartDisabledNoDevicesAndFailures(t *testing.T) {
	root := hosttest.Copy(t, "hfi1")
	h := host.New(root)
	devs, _ := h.Devices()
	l := &hosttest.Modprobe{}
	p := &modules.Part{Host: h, Loader: l}
	if res := p.ApplyHost(context.Background(), pass(&config.Policy{Modules: config.Modules{Enable: false}}, devs)); res.Actions != nil || len(l.Calls()) != 0 {
		t.Errorf("disabled: %+v %q", res.Actions, l.Calls())
	}
	if res := p.ApplyHost(context.Background(), pass(policy("/etc/rdma/modules"), nil)); res.Actions != nil || len(l.Calls()) != 0 {
		t.Errorf("no devices: %+v %q", res.Actions, l.Calls())
	}
	l.Fail("opa_vnic", errors.New("modprobe: FATAL: Module opa_vnic not found"))
	acts := p.ApplyHost(context.Background(), pass(policy("/etc/rdma/modules"), devs)).Actions
	if len(acts) != 1 || acts[0].Status != reconcile.Failed || !strings.Contains(acts[0].Err.Error(), "opa_vnic") {
		t.Fatalf("acts = %+v", acts)
	}
	if !strings.Contains(acts[0].Source, "opa.conf") {
		t.Errorf("source %q does not name opa.conf", acts[0].Source)
	}
	hosttest.Write(t, root, "etc/rdma/modules/rdma.conf", "-v\n")
	acts = p.ApplyHost(context.Background(), pass(policy("/etc/rdma/modules"), devs)).Actions
	if len(acts) != 2 || acts[0].Kind != modules.ReadList || acts[0].Status != reconcile.Failed || !strings.Contains(acts[0].Err.Error(), `rdma.conf:1: "-v" is not a module name`) {
		t.Fatalf("option smuggled as module: %+v", acts)
	}
	for _, c := range l.Calls() {
		if slices.Contains(c, "-v") {
			t.Errorf("modprobe was given -v: %q", l.Calls())
		}
	}
}

// An invalid line of a list (an inline comment: comments only start a
// line) is skipped and named with its file and line, as
// systemd-modules-load does; the list's other modules still load.
func TestInvalidLineSkippedOthersLoad(t *testing.T) {
	root := hosttest.Copy(t, "rxe")
	h := host.New(root)
	devs, _ := h.Devices()
	hosttest.Write(t, root, "etc/rdma/modules/rdma.conf", "# ok\nib_uverbs # user verbs\nrdma_ucm\n")
	hosttest.Write(t, root, "etc/rdma/modules/roce.conf", "")
	l := &hosttest.Modprobe{}
	p := &modules.Part{Host: h, Loader: l}
	acts := p.ApplyHost(context.Background(), pass(policy("/etc/rdma/modules"), devs)).Actions
	if len(acts) != 2 || acts[0].Kind != modules.ReadList || acts[0].Status != reconcile.Failed ||
		!strings.Contains(acts[0].Err.Error(), `/etc/rdma/modules/rdma.conf:2: "ib_uverbs # user verbs" is not a module name`) {
		t.Fatalf("acts = %v", acts)
	}
	if acts[1].Kind != modules.Load || acts[1].Status != reconcile.Changed || !reflect.DeepEqual(l.Calls(), [][]string{{"rdma_ucm"}}) {
		t.Errorf("load: %v, modprobe calls %q; want rdma_ucm loaded alone", acts[1], l.Calls())
	}
}

// TestModprobeRunsFromPATH runs the real Loader against a recording
// modprobe placed first in PATH, as the daemon's --once tests do.
func TestModprobeRunsFromPATH(t *testing.T) {
	env, log := hosttest.ModprobeScript(t, "")
	hosttest.UsePATH(t, env)
	if err := (modules.Modprobe{}).Load(context.Background(), []string{"ib_uverbs", "rdma_ucm"}); err != nil {
		t.Fatal(err)
	}
	err := (modules.Modprobe{}).Load(context.Background(), []string{"nosuch"})
	if err == nil || !strings.Contains(err.Error(), "Module nosuch not found") {
		t.Errorf("err = %v", err)
	}
	b, _ := os.ReadFile(log)
	if got := string(b); got != "-a -- ib_uverbs rdma_ucm\n-a -- nosuch\n" {
		t.Errorf("modprobe saw %q", got)
	}
	t.Setenv("PATH", t.TempDir())
	if err := (modules.Modprobe{}).Load(context.Background(), []string{"x"}); err == nil {
		t.Error("no modprobe in PATH: no error")
	}
}

// A modprobe that never returns (a module waiting for firmware) is cut off.
func TestModprobeHangIsBounded(t *testing.T) {
	hosttest.UsePATH(t, hosttest.CommandInPath(t, "modprobe", "exec sleep 600\n"))
	err := (modules.Modprobe{Timeout: 50 * time.Millisecond}).Load(context.Background(), []string{"mlx5_ib"})
	if err == nil || !strings.Contains(err.Error(), "no answer after 50ms") {
		t.Errorf("err = %v", err)
	}
}

// Debian's rdma.conf lists xprtrdma and svcrdma, aliases of rpcrdma: once
// rpcrdma is loaded, nothing is missing and modprobe is not run again.
func TestAliasedModulesAreNotLoadedAgain(t *testing.T) {
	root := hosttest.Copy(t, "rxe")
	h := host.New(root)
	devs, _ := h.Devices()
	hosttest.Write(t, root, "etc/rdma/modules/rdma.conf", "xprtrdma\nsvcrdma\n")
	hosttest.Write(t, root, host.ProcOSRelease, "6.1.0-28-amd64\n")
	hosttest.Write(t, root, "lib/modules/6.1.0-28-amd64/modules.alias", "alias xprtrdma rpcrdma\nalias svcrdma rpcrdma\n")
	hosttest.Write(t, root, "proc/modules", "rdma_rxe 1 0 - Live 0x0\nrpcrdma 1 0 - Live 0x0\n")
	l := &hosttest.Modprobe{}
	acts := (&modules.Part{Host: h, Loader: l}).ApplyHost(context.Background(), pass(policy("/etc/rdma/modules"), devs)).Actions
	if len(l.Calls()) != 0 || len(acts) != 1 || acts[0].Status != reconcile.Unchanged {
		t.Errorf("modprobe calls %q, acts %+v", l.Calls(), acts)
	}
}

// A modules list someone other than root may write is refused: rdmad would
// load whatever it names with its privileges.
func TestUntrustedListIsRefused(t *testing.T) {
	root := hosttest.Copy(t, "rxe")
	h := host.New(root)
	devs, _ := h.Devices()
	list := filepath.Join(root, "etc/rdma/modules/rdma.conf")
	if err := os.Chmod(list, 0o666); err != nil {
		t.Fatal(err)
	}
	l := &hosttest.Modprobe{}
	acts := (&modules.Part{Host: h, Loader: l}).ApplyHost(context.Background(), pass(policy("/etc/rdma/modules"), devs)).Actions
	if len(acts) != 1 || acts[0].Status != reconcile.Failed || !errors.Is(acts[0].Err, host.ErrUntrusted) || len(l.Calls()) != 0 {
		t.Fatalf("world-writable list: %+v, calls %v", acts, l.Calls())
	}
	os.Chmod(list, 0o644)
	os.Chmod(filepath.Dir(list), 0o777)
	acts = (&modules.Part{Host: h, Loader: l}).ApplyHost(context.Background(), pass(policy("/etc/rdma/modules"), devs)).Actions
	if len(acts) != 1 || !errors.Is(acts[0].Err, host.ErrUntrusted) {
		t.Fatalf("world-writable directory: %+v", acts)
	}
}

// Loading modules is the one host action that is not undone, and Undo
// says so for every kind the part reports.
func TestUndoIsRefused(t *testing.T) {
	p := &modules.Part{}
	for _, k := range p.Kinds() {
		err := p.Undo(context.Background(), reconcile.Action{Subject: reconcile.HostSubject(), Kind: k, Status: reconcile.Changed})
		if !errors.Is(err, reconcile.ErrNotUndoable) {
			t.Errorf("Undo(%s) = %v, want ErrNotUndoable", k, err)
		}
	}
}

// The daemon logs each background load: which modules, for which devices
// (those whose transports' lists name them), from which lists, and how
// long modprobe took; a failed load is a warning with modprobe's error.
func TestBackgroundLoadsAreLogged(t *testing.T) {
	root := hosttest.Copy(t, "mlx5")
	h := host.New(root)
	devs, _ := h.Devices()
	hosttest.Write(t, root, "etc/rdma/modules/rdma.conf", "")
	hosttest.Write(t, root, "etc/rdma/modules/infiniband.conf", "ib_core\n") // loaded already: not in the batch
	hosttest.Write(t, root, "etc/rdma/modules/roce.conf", "rdma_ucm\n")
	hosttest.Write(t, root, "etc/rdma/modules/opa.conf", "hfi1_only\n") // no OPA device: not loaded
	block := make(chan struct{})
	l := &hosttest.Modprobe{Root: root, Block: block}
	done := make(chan struct{}, 2)
	var logs livetest.SyncBuffer
	p := &modules.Part{Host: h, Loader: l, Done: func() { done <- struct{}{} },
		Log: slog.New(slog.NewJSONHandler(&logs, nil))}
	pol := policy("/etc/rdma/modules")
	p.ApplyHost(context.Background(), pass(pol, devs))
	const held = 50 * time.Millisecond
	time.Sleep(held) // modprobe "runs" at least this long
	close(block)
	<-done
	p.Wait()

	var rec struct {
		Level, Msg, Modules, For, Lists string
		TookMS                          int64 `json:"took_ms"`
	}
	line, _, _ := strings.Cut(logs.String(), "\n")
	if err := json.Unmarshal([]byte(line), &rec); err != nil {
		t.Fatalf("log %q: %v", logs.String(), err)
	}
	var names []string
	for _, d := range devs {
		names = append(names, d.Name)
	}
	slices.Sort(names)
	if rec.Level != "INFO" || rec.Msg != "modules: loaded" || rec.Modules != "rdma_ucm" || rec.For != strings.Join(names, " ") ||
		rec.Lists != "/etc/rdma/modules/roce.conf" || rec.TookMS < held.Milliseconds() {
		t.Errorf("log record %+v, want modules rdma_ucm for %v from roce.conf, took at least %v", rec, names, held)
	}

	hosttest.Write(t, root, "etc/rdma/modules/rdma.conf", "nosuch_mod\n")
	hosttest.Write(t, root, "etc/rdma/modules/roce.conf", "")
	l.Fail("nosuch_mod", errors.New("modprobe: FATAL: Module nosuch_mod not found"))
	var logs2 livetest.SyncBuffer
	p.Log = slog.New(slog.NewJSONHandler(&logs2, nil))
	p.ApplyHost(context.Background(), pass(pol, devs))
	<-done
	p.Wait()
	if s := logs2.String(); !strings.Contains(s, `"level":"WARN"`) || !strings.Contains(s, `"modules":"nosuch_mod"`) || !strings.Contains(s, "Module nosuch_mod not found") {
		t.Errorf("failed load logged as %s", s)
	}
}

func TestDevicesAttrIsBounded(t *testing.T) {
	var devs []string
	for i := 0; i < 1000; i++ {
		devs = append(devs, fmt.Sprintf("mlx5_%d", i))
	}
	got := modules.DevicesAttr(devs)
	if !strings.HasPrefix(got, "mlx5_0 mlx5_1 ") || !strings.HasSuffix(got, " and 992 more") || len(got) > 120 {
		t.Errorf("devicesAttr of 1000 devices = %q", got)
	}
}
