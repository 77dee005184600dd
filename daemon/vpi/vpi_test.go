package vpi_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/reconcile"
	"github.com/rdmad/rdmad/daemon/vpi"
)

const pciDir = "sys/devices/pci0000:00/0000:00:02.0/0000:03:00.0"

// mlx4Host builds an mlx4 VPI adapter as sysfs lays it out: the RDMA device
// links to its PCI function, which holds mlx4_port1/2 and the driver link.
func mlx4Host(t *testing.T, driver string, ports map[int]string) *host.Host {
	t.Helper()
	root := t.TempDir()
	h := host.New(root)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(h.Path(pciDir), 0o755))
	must(os.MkdirAll(h.Path("sys/bus/pci/drivers", driver), 0o755))
	must(os.Symlink("../../../../bus/pci/drivers/"+driver, h.Path(pciDir, "driver")))
	dev := h.Path(host.ClassInfiniband, "mlx4_0")
	must(os.MkdirAll(dev, 0o755))
	must(os.Symlink("../../../devices/pci0000:00/0000:00:02.0/0000:03:00.0", filepath.Join(dev, "device")))
	must(os.WriteFile(filepath.Join(dev, "node_type"), []byte("1: CA\n"), 0o644))
	for n, typ := range ports {
		p := filepath.Join(dev, "ports", strconv.Itoa(n))
		must(os.MkdirAll(p, 0o755))
		ll := "InfiniBand"
		if strings.Contains(typ, "eth") {
			ll = "Ethernet"
		}
		must(os.WriteFile(filepath.Join(p, "link_layer"), []byte(ll+"\n"), 0o644))
		must(os.WriteFile(h.Path(pciDir, "mlx4_port"+strconv.Itoa(n)), []byte(typ+"\n"), 0o644))
	}
	return h
}

func rules(rs ...config.VPIRule) *config.Policy { return &config.Policy{VPI: rs} }

func rule(port int, typ config.VPIType) config.VPIRule {
	return config.VPIRule{Selector: config.Selector{Device: config.Glob("mlx4_*")}, Port: port, Type: typ, Source: config.Position{File: "/etc/rdma/rdmad.toml", Line: 3}}
}

func device(t *testing.T, h *host.Host) *host.Device {
	t.Helper()
	d, err := h.Device("mlx4_0")
	if err != nil {
		t.Fatal(err)
	}
	if d.Driver != "mlx4_core" && d.Driver != "mlx5_core" {
		t.Fatalf("fixture driver = %q", d.Driver)
	}
	return &d
}

func statuses(acts []reconcile.Action) string {
	var s []string
	for _, a := range acts {
		s = append(s, a.Subject.String()+"="+a.Status.String())
	}
	return strings.Join(s, " ")
}

func TestSetsAndIsIdempotent(t *testing.T) {
	h := mlx4Host(t, "mlx4_core", map[int]string{1: "ib", 2: "auto (ib)"})
	p := &vpi.Part{Host: h}
	pol := rules(rule(0, config.VPIauto), rule(1, config.VPIeth))

	acts := reconcile.RunDevice(context.Background(), p, pol, device(t, h)).Actions
	if got := statuses(acts); got != "mlx4_0/1=changed mlx4_0/2=unchanged" {
		t.Fatalf("first pass: %s (%v)", got, acts)
	}
	if acts[0].From != "ib" || acts[0].To != "eth" || acts[0].Source != "/etc/rdma/rdmad.toml:3" {
		t.Errorf("action: %+v", acts[0])
	}
	if b, _ := os.ReadFile(h.Path(pciDir, "mlx4_port1")); string(b) != "eth" {
		t.Errorf("mlx4_port1 = %q", b)
	}
	// Port 2 reads "auto (ib)" and auto is declared: never rewritten.
	if b, _ := os.ReadFile(h.Path(pciDir, "mlx4_port2")); string(b) != "auto (ib)\n" {
		t.Errorf("mlx4_port2 rewritten: %q", b)
	}
	acts = reconcile.RunDevice(context.Background(), p, pol, device(t, h)).Actions
	if got := statuses(acts); got != "mlx4_0/1=unchanged mlx4_0/2=unchanged" {
		t.Fatalf("second pass: %s", got)
	}
}

func TestMissingAttributeFails(t *testing.T) {
	h := mlx4Host(t, "mlx4_core", map[int]string{1: "ib"})
	if err := os.Remove(h.Path(pciDir, "mlx4_port1")); err != nil {
		t.Fatal(err)
	}
	acts := reconcile.RunDevice(context.Background(), &vpi.Part{Host: h}, rules(rule(1, config.VPIeth)), device(t, h)).Actions
	if len(acts) != 1 || acts[0].Status != reconcile.Failed || !strings.Contains(acts[0].Err.Error(), "not a VPI port") {
		t.Fatalf("%v", acts)
	}
}

func TestNonMlx4NotApplicable(t *testing.T) {
	h := mlx4Host(t, "mlx5_core", map[int]string{1: "eth"})
	acts := reconcile.RunDevice(context.Background(), &vpi.Part{Host: h}, rules(rule(0, config.VPIib)), device(t, h)).Actions
	if len(acts) != 1 || acts[0].Status != reconcile.NotApplicable || !strings.Contains(acts[0].Err.Error(), "mlx5_core") {
		t.Fatalf("%v", acts)
	}
	if b, _ := os.ReadFile(h.Path(pciDir, "mlx4_port1")); string(b) != "eth\n" {
		t.Errorf("touched a non-mlx4 device: %q", b)
	}
}

func TestNoRuleNoAction(t *testing.T) {
	h := mlx4Host(t, "mlx4_core", map[int]string{1: "ib"})
	other := config.VPIRule{Selector: config.Selector{Device: config.Glob("mlx4_9")}, Type: config.VPIeth}
	if acts := reconcile.RunDevice(context.Background(), &vpi.Part{Host: h}, rules(other), device(t, h)).Actions; len(acts) != 0 {
		t.Fatalf("%v", acts)
	}
}

// kernelReregisters is vpi.Part plus what mlx4 does after a port type
// write: the RDMA device is unregistered (and comes back later with a new
// uevent). Reregisters is vpi's own, through the embedding.
type kernelReregisters struct {
	*vpi.Part
	h *host.Host
}

func (k kernelReregisters) ApplyDevice(ctx context.Context, run *reconcile.DeviceRun) {
	k.Part.ApplyDevice(ctx, run)
	for _, a := range run.Actions {
		if a.Status == reconcile.Changed {
			os.RemoveAll(k.h.Path(host.ClassInfiniband, run.Device.Name))
		}
	}
}

// A port type change makes the device vanish; vpi says so (Reregisters), so
// the reconciler drops the device without calling it a failure.
func TestPortTypeChangeReregistersTheDevice(t *testing.T) {
	h := mlx4Host(t, "mlx4_core", map[int]string{1: "ib"})
	quiet := slog.New(slog.DiscardHandler)
	r := reconcile.New(reconcile.Options{Host: h, Log: quiet, DeviceParts: []reconcile.DevicePart{kernelReregisters{&vpi.Part{Host: h}, h}}})
	rep := r.Pass(context.Background(), rules(rule(1, config.VPIeth)), reconcile.Scope{Full: true})
	if rep.Failed() {
		t.Fatalf("re-registration reported as failure: %v", rep.Failures())
	}
	if b, _ := os.ReadFile(h.Path(pciDir, "mlx4_port1")); string(b) != "eth" {
		t.Fatalf("mlx4_port1 = %q, the change was not made", b)
	}
	if st := r.Snapshot(); st.Device("mlx4_0") != nil {
		t.Error("the state still shows mlx4_0 after its port type change unregistered it")
	}
	if (&vpi.Part{}).RecreatesDevice(reconcile.Action{Kind: "roce mode"}) {
		t.Error("a change of another kind said to re-register the device")
	}
}

// The VPI part undoes its own change: the port gets its previous type
// back, automatic sensing included.
func TestUndo(t *testing.T) {
	for before, old := range map[string]config.VPIType{"ib": config.VPIib, "auto (ib)": config.VPIauto} {
		h := mlx4Host(t, "mlx4_core", map[int]string{1: before})
		p := &vpi.Part{Host: h}
		acts := reconcile.RunDevice(context.Background(), p, rules(rule(1, config.VPIeth)), device(t, h)).Actions
		o, _ := vpi.PortType.Old(acts[0])
		n, _ := vpi.PortType.New(acts[0])
		if len(acts) != 1 || acts[0].Status != reconcile.Changed || o.Type != old || n.Type != config.VPIeth {
			t.Fatalf("apply: %+v", acts)
		}
		if err := p.Undo(context.Background(), acts[0]); err != nil {
			t.Fatalf("Undo: %v", err)
		}
		if b, _ := os.ReadFile(h.Path(pciDir, "mlx4_port1")); string(b) != string(old) {
			t.Errorf("%s: mlx4_port1 after undo = %q, want %q", before, b, old)
		}
	}
}

// moveAway is vpi.Part plus an mlx4 that unregisters the RDMA device after
// a port type write; back registers it again, as its add event would.
type moveAway struct {
	*vpi.Part
	h *host.Host
}

func (m moveAway) ApplyDevice(ctx context.Context, run *reconcile.DeviceRun) {
	m.Part.ApplyDevice(ctx, run)
	for _, a := range run.Actions {
		if a.Status == reconcile.Changed {
			os.Rename(m.h.Path(host.ClassInfiniband, run.Device.Name), m.h.Path("unregistered-"+run.Device.Name))
		}
	}
}

func (m moveAway) back(t *testing.T, name string) {
	t.Helper()
	if err := os.Rename(m.h.Path("unregistered-"+name), m.h.Path(host.ClassInfiniband, name)); err != nil {
		t.Fatal(err)
	}
}

// The type a port had before rdmad changed it is recorded although the
// change unregisters the device, so removing the rule puts it back once
// the device is registered again.
func TestRemovedRuleRestoresTheTypeFound(t *testing.T) {
	h := mlx4Host(t, "mlx4_core", map[int]string{1: "ib"})
	if err := os.MkdirAll(filepath.Dir(h.Path(reconcile.BootIDFile)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(h.Path(reconcile.BootIDFile), []byte("0d7b1c5e-6c1b-4f7e-9a0e-2f1d1d6c3a01\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.DiscardHandler)
	part := moveAway{&vpi.Part{Host: h}, h}
	r := reconcile.New(reconcile.Options{Host: h, Log: quiet, DeviceParts: []reconcile.DevicePart{part}, Found: reconcile.OpenFound(h, quiet)})
	withRule := rules(rule(1, config.VPIeth))
	withRule.Files = []string{"/etc/rdma/rdmad.toml"}
	r.Pass(context.Background(), withRule, reconcile.Scope{Full: true, Forced: true})
	if b, _ := os.ReadFile(h.Path(pciDir, "mlx4_port1")); string(b) != "eth" {
		t.Fatalf("mlx4_port1 = %q, the change was not made", b)
	}
	part.back(t, "mlx4_0")
	r.Pass(context.Background(), withRule, reconcile.Scope{Full: true})
	without := &config.Policy{Files: []string{"/etc/rdma/rdmad.toml"}}
	r.Pass(context.Background(), without, reconcile.Scope{Full: true})
	if b, _ := os.ReadFile(h.Path(pciDir, "mlx4_port1")); string(b) != "ib" {
		t.Errorf("mlx4_port1 after the rule went = %q, want the ib rdmad found", b)
	}
}
