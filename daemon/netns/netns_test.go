package netns_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/netns"
	"github.com/rdmad/rdmad/daemon/reconcile"
)

// fakeKernel models the kernel's rdma_compatdev_set: switching is refused
// with EBUSY while other namespaces exist.
type fakeKernel struct {
	mode       config.NetnsMode
	otherNetns bool
	sets       int
	modeErr    error
}

func (k *fakeKernel) Mode() (config.NetnsMode, error) { return k.mode, k.modeErr }

func (k *fakeKernel) SetMode(m config.NetnsMode) error {
	k.sets++
	if k.mode != m && k.otherNetns {
		return syscall.EBUSY
	}
	k.mode = m
	return nil
}

func newHost(t *testing.T, ibCore bool) *host.Host {
	t.Helper()
	h := host.New(t.TempDir())
	if err := os.MkdirAll(h.Path("proc"), 0o755); err != nil {
		t.Fatal(err)
	}
	mods := "ext4 1 0 - Live 0x0\n"
	if ibCore {
		mods += "ib_core 1 0 - Live 0x0\n"
	}
	if err := os.WriteFile(h.Path(host.ProcModules), []byte(mods), 0o644); err != nil {
		t.Fatal(err)
	}
	return h
}

func byWhat(acts []reconcile.Action) map[string]reconcile.Action {
	m := map[string]reconcile.Action{}
	for _, a := range acts {
		m[string(a.Kind)] = a
	}
	return m
}

func pol(m config.NetnsMode) *config.Policy { return &config.Policy{Netns: config.Netns{Mode: m}} }

func TestRender(t *testing.T) {
	if got := string(netns.Render(config.NetnsExclusive)); !strings.HasSuffix(got, "options ib_core netns_mode=0\n") || !strings.HasPrefix(got, "# Managed by rdmad") {
		t.Errorf("exclusive:\n%s", got)
	}
	if got := string(netns.Render(config.NetnsShared)); !strings.HasSuffix(got, "options ib_core netns_mode=1\n") {
		t.Errorf("shared:\n%s", got)
	}
}

func TestSwitchesAndPersists(t *testing.T) {
	h := newHost(t, true)
	k := &fakeKernel{mode: config.NetnsShared}
	p := &netns.Part{Host: h, Kernel: k}
	acts := byWhat(p.ApplyHost(context.Background(), &reconcile.HostRun{Policy: pol(config.NetnsExclusive)}).Actions)
	if a := acts["netns mode"]; a.Status != reconcile.Changed || a.From != "shared" || a.To != "exclusive" {
		t.Errorf("mode: %v", a)
	}
	if a := acts["netns modprobe.d"]; a.Status != reconcile.Changed {
		t.Errorf("file: %v", a)
	}
	data, err := os.ReadFile(h.Path(netns.ModprobeFile))
	if err != nil || !strings.Contains(string(data), "options ib_core netns_mode=0\n") {
		t.Fatalf("file = %q, %v", data, err)
	}
	// Second pass: nothing to do.
	acts = byWhat(p.ApplyHost(context.Background(), &reconcile.HostRun{Policy: pol(config.NetnsExclusive)}).Actions)
	if acts["netns mode"].Status != reconcile.Unchanged || acts["netns modprobe.d"].Status != reconcile.Unchanged {
		t.Errorf("second pass: %v", acts)
	}
	if k.sets != 1 {
		t.Errorf("SetMode called %d times", k.sets)
	}
}

func TestEBUSYIsExplained(t *testing.T) {
	h := newHost(t, true)
	k := &fakeKernel{mode: config.NetnsShared, otherNetns: true}
	p := &netns.Part{Host: h, Kernel: k}
	acts := byWhat(p.ApplyHost(context.Background(), &reconcile.HostRun{Policy: pol(config.NetnsExclusive)}).Actions)
	a := acts["netns mode"]
	if a.Status != reconcile.Failed {
		t.Fatalf("mode: %v", a)
	}
	want := "cannot switch RDMA netns mode to exclusive while non-init network namespaces exist (EBUSY); it takes effect at next boot through"
	if !strings.Contains(a.Err.Error(), want) {
		t.Errorf("error %q does not contain %q", a.Err, want)
	}
	if !errors.Is(a.Err, syscall.EBUSY) {
		t.Errorf("error %q does not wrap EBUSY", a.Err)
	}
	// The persistent option is still written: it applies at next boot.
	if acts["netns modprobe.d"].Status != reconcile.Changed {
		t.Errorf("file: %v", acts["netns modprobe.d"])
	}
}

func TestWithoutIBCoreOnlyPersists(t *testing.T) {
	h := newHost(t, false)
	k := &fakeKernel{modeErr: errors.New("must not be called")}
	p := &netns.Part{Host: h, Kernel: k}
	acts := byWhat(p.ApplyHost(context.Background(), &reconcile.HostRun{Policy: pol(config.NetnsExclusive)}).Actions)
	if a := acts["netns mode"]; a.Status != reconcile.NotApplicable {
		t.Errorf("mode: %v", a)
	}
	if a := acts["netns modprobe.d"]; a.Status != reconcile.Changed {
		t.Errorf("file: %v", a)
	}
}

func TestUndeclaredRemovesOnlyOwnFile(t *testing.T) {
	h := newHost(t, true)
	k := &fakeKernel{mode: config.NetnsExclusive}
	p := &netns.Part{Host: h, Kernel: k}
	if acts := p.ApplyHost(context.Background(), &reconcile.HostRun{Policy: pol(config.NetnsExclusive)}).Actions; len(acts) != 2 {
		t.Fatalf("%v", acts)
	}
	acts := p.ApplyHost(context.Background(), &reconcile.HostRun{Policy: pol(config.NetnsUnmanaged)}).Actions
	if len(acts) != 1 || acts[0].Status != reconcile.Changed || acts[0].To != "absent" {
		t.Fatalf("undeclare: %v", acts)
	}
	if h.Exists(netns.ModprobeFile) {
		t.Fatal("own file not removed")
	}
	if k.sets != 0 {
		t.Errorf("runtime mode touched without declaration")
	}
	// An administrator's file of the same name is left alone both ways.
	admin := []byte("options ib_core netns_mode=0\n")
	if err := os.WriteFile(h.Path(netns.ModprobeFile), admin, 0o644); err != nil {
		t.Fatal(err)
	}
	if acts := p.ApplyHost(context.Background(), &reconcile.HostRun{Policy: pol(config.NetnsUnmanaged)}).Actions; len(acts) != 0 {
		t.Errorf("undeclared with foreign file: %v", acts)
	}
	sharedActs := byWhat(p.ApplyHost(context.Background(), &reconcile.HostRun{Policy: pol(config.NetnsShared)}).Actions)
	if a := sharedActs["netns modprobe.d"]; a.Status != reconcile.Failed || !strings.Contains(a.Err.Error(), "not written by rdmad") {
		t.Errorf("declared with foreign file: %v", a)
	}
	if got, _ := os.ReadFile(filepath.Join(h.Root, netns.ModprobeFile)); string(got) != string(admin) {
		t.Errorf("foreign file changed: %q", got)
	}
}

// TestRealKernelMode runs against the running kernel where ib_core exists
// (the e2e VM); on hosts without RDMA it is skipped.
func TestRealKernelMode(t *testing.T) {
	if _, err := os.Stat("/sys/module/ib_core"); err != nil {
		t.Skip("ib_core not present in this kernel")
	}
	m, err := netns.RDMANetlink{}.Mode()
	if err != nil {
		t.Fatalf("Mode: %v", err)
	}
	if m != config.NetnsShared && m != config.NetnsExclusive {
		t.Fatalf("Mode = %q", m)
	}
	// Setting the mode in force is always allowed and changes nothing.
	if err := (netns.RDMANetlink{}).SetMode(m); err != nil {
		t.Fatalf("SetMode(%s): %v", m, err)
	}
}

// A runtime mode (D-Bus without persist) is switched in the kernel, while
// modprobe.d keeps the declared mode for the next boot.
func TestRuntimeModeIsNotPersisted(t *testing.T) {
	h := newHost(t, true)
	k := &fakeKernel{mode: config.NetnsShared}
	p := &netns.Part{Host: h, Kernel: k}
	pl := &config.Policy{Netns: config.Netns{Mode: config.NetnsShared, Runtime: config.NetnsExclusive}}
	acts := byWhat(p.ApplyHost(context.Background(), &reconcile.HostRun{Policy: pl}).Actions)
	if a := acts["netns mode"]; a.Status != reconcile.Changed || a.To != "exclusive" || k.mode != config.NetnsExclusive {
		t.Errorf("mode: %v (kernel %s)", a, k.mode)
	}
	data, err := os.ReadFile(h.Path(netns.ModprobeFile))
	if err != nil || !strings.Contains(string(data), "netns_mode=1\n") {
		t.Errorf("modprobe.d = %q, %v; want the declared shared", data, err)
	}
}

// Without a declared mode a runtime mode writes no modprobe.d, and removes
// the one rdmad wrote for an earlier declaration.
func TestRuntimeModeAloneWritesNoFile(t *testing.T) {
	h := newHost(t, true)
	k := &fakeKernel{mode: config.NetnsShared}
	p := &netns.Part{Host: h, Kernel: k}
	p.ApplyHost(context.Background(), &reconcile.HostRun{Policy: pol(config.NetnsExclusive)})
	if _, err := os.Stat(h.Path(netns.ModprobeFile)); err != nil {
		t.Fatal(err)
	}
	pl := &config.Policy{Netns: config.Netns{Runtime: config.NetnsExclusive}}
	acts := byWhat(p.ApplyHost(context.Background(), &reconcile.HostRun{Policy: pl}).Actions)
	if a := acts["netns modprobe.d"]; a.Status != reconcile.Changed || a.To != "absent" {
		t.Errorf("modprobe.d: %v", a)
	}
	if _, err := os.Stat(h.Path(netns.ModprobeFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("modprobe.d still there: %v", err)
	}
	if a := acts["netns mode"]; a.Status != reconcile.Unchanged || k.mode != config.NetnsExclusive {
		t.Errorf("mode: %v (kernel %s)", a, k.mode)
	}
}

// EBUSY for a runtime mode does not promise the next boot, and the errno
// stays reachable.
func TestRuntimeModeEBUSY(t *testing.T) {
	h := newHost(t, true)
	k := &fakeKernel{mode: config.NetnsShared, otherNetns: true}
	p := &netns.Part{Host: h, Kernel: k}
	pl := &config.Policy{Netns: config.Netns{Runtime: config.NetnsExclusive}}
	a := byWhat(p.ApplyHost(context.Background(), &reconcile.HostRun{Policy: pl}).Actions)["netns mode"]
	if a.Status != reconcile.Failed || !errors.Is(a.Err, syscall.EBUSY) {
		t.Fatalf("mode: %v", a)
	}
	if strings.Contains(a.Err.Error(), "next boot through") {
		t.Errorf("a runtime mode claims to apply at next boot: %v", a.Err)
	}
}

// The netns part undoes its own actions: the running kernel goes back to
// the previous mode, modprobe.d back to what it held (removed when absent).
func TestUndo(t *testing.T) {
	h := newHost(t, true)
	k := &fakeKernel{mode: config.NetnsShared}
	p := &netns.Part{Host: h, Kernel: k}
	ctx := context.Background()
	acts := byWhat(p.ApplyHost(ctx, &reconcile.HostRun{Policy: pol(config.NetnsExclusive)}).Actions)
	mode, file := acts["netns mode"], acts["netns modprobe.d"]
	o, _ := netns.Mode.Old(mode)
	n, _ := netns.Mode.New(mode)
	if o != netns.ModeValue(config.NetnsShared) || n != netns.ModeValue(config.NetnsExclusive) {
		t.Errorf("mode values: %#v -> %#v", mode.Old, mode.New)
	}
	for _, a := range []reconcile.Action{mode, file} {
		if err := p.Undo(ctx, a); err != nil {
			t.Fatalf("Undo(%v): %v", a, err)
		}
	}
	if k.mode != config.NetnsShared {
		t.Errorf("kernel mode after undo = %s", k.mode)
	}
	if _, err := os.Stat(h.Path(netns.ModprobeFile)); !os.IsNotExist(err) {
		t.Errorf("modprobe.d file after undo: %v, want absent", err)
	}

	// A file that existed comes back with its content.
	p.ApplyHost(ctx, &reconcile.HostRun{Policy: pol(config.NetnsShared)})
	acts = byWhat(p.ApplyHost(ctx, &reconcile.HostRun{Policy: pol(config.NetnsExclusive)}).Actions)
	if err := p.Undo(ctx, acts["netns modprobe.d"]); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(h.Path(netns.ModprobeFile)); string(data) != string(netns.Render(config.NetnsShared)) {
		t.Errorf("modprobe.d after undo = %q", data)
	}
}

// The modprobe.d file found.json holds is put back only when its lines are
// the options line rdmad writes, and the mode one a configuration takes.
func TestFoundModprobeFileMustBeWhatRdmadWrites(t *testing.T) {
	valid := netns.Modprobe.Setting().Valid
	for _, m := range []config.NetnsMode{config.NetnsShared, config.NetnsExclusive} {
		if err := valid(host.FileSnapshot{Exists: true, Data: netns.Render(m)}); err != nil {
			t.Errorf("%s: %v", m, err)
		}
	}
	hostile := append(netns.Render(config.NetnsShared), "install ib_core /bin/sh -c 'touch /tmp/owned'\n"...)
	if err := valid(host.FileSnapshot{Exists: true, Data: hostile}); err == nil {
		t.Error("an install line passes")
	}
	if err := netns.Mode.Setting().Valid(netns.ModeValue("private")); err == nil {
		t.Error("mode private passes")
	}
}
