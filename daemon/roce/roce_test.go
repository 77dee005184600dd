package roce_test

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/daemon/reconcile"
	"github.com/rdmad/rdmad/daemon/roce"
)

func tos(v int) *int { return &v }

func apply(t *testing.T, h *host.Host, pol *config.Policy, dev string) []reconcile.Action {
	t.Helper()
	return applyRun(t, h, pol, dev).Actions
}

// applyRun runs the part on one device as a pass does and returns the
// run: actions and records.
func applyRun(t *testing.T, h *host.Host, pol *config.Policy, dev string) *reconcile.DeviceRun {
	t.Helper()
	d, err := h.Device(dev)
	if err != nil {
		t.Fatal(err)
	}
	run := reconcile.NewDeviceRun(pol, &d)
	(&roce.Part{Host: h}).ApplyDevice(context.Background(), run)
	return run
}

func statuses(acts []reconcile.Action) string {
	var s []string
	for _, a := range acts {
		s = append(s, a.Subject.String()+" "+string(a.Kind)+" "+a.Status.String())
	}
	return strings.Join(s, ", ")
}

func TestApplyWritesVerifiesAndIsIdempotent(t *testing.T) {
	root := hosttest.Copy(t, "mlx5")
	k := hosttest.NewKernel(root)
	h := k.Host()
	pol := &config.Policy{RoCE: []config.RoCERule{
		{Selector: config.Selector{Device: config.Glob("mlx5_*")}, Mode: config.RoCEv1, TOS: tos(106), Source: config.Position{File: "rdmad.toml", Line: 3}},
	}}
	acts := apply(t, h, pol, "mlx5_0")
	if got, want := statuses(acts), "mlx5_0/1 roce mode changed, mlx5_0/1 roce tos changed"; got != want {
		t.Fatalf("first apply: %s, want %s", got, want)
	}
	if acts[0].From != "RoCE v2" || acts[0].To != "IB/RoCE v1" || acts[0].Source != "rdmad.toml:3" {
		t.Errorf("mode action = %+v", acts[0])
	}
	if got := hosttest.Read(t, root, host.ConfigfsPortPath("mlx5_0", 1, "default_roce_mode")); got != "IB/RoCE v1" {
		t.Errorf("configfs mode = %q", got)
	}
	if got := hosttest.Read(t, root, host.ConfigfsPortPath("mlx5_0", 1, "default_roce_tos")); got != "106" {
		t.Errorf("configfs tos = %q", got)
	}
	writes := k.WriteCount()
	acts = apply(t, h, pol, "mlx5_0")
	if got, want := statuses(acts), "mlx5_0/1 roce mode unchanged, mlx5_0/1 roce tos unchanged"; got != want {
		t.Errorf("second apply: %s", got)
	}
	if k.WriteCount() != writes {
		t.Errorf("second apply wrote %v", k.Writes[writes:])
	}
}

func TestApplyCreatesConfigfsDirWhenMissing(t *testing.T) {
	root := hosttest.Copy(t, "rxe")
	k := hosttest.NewKernel(root)
	if err := removeAll(root, host.ConfigfsRdmaCM+"/rxe0"); err != nil {
		t.Fatal(err)
	}
	pol := &config.Policy{RoCE: []config.RoCERule{{Selector: config.Selector{Device: config.Glob("rxe0")}, TOS: tos(32)}}}
	acts := apply(t, k.Host(), pol, "rxe0")
	if got, want := statuses(acts), "rxe0 configfs rdma_cm changed, rxe0/1 roce tos changed"; got != want {
		t.Fatalf("%s, want %s", got, want)
	}
	if len(k.Mkdirs) != 1 || k.Mkdirs[0] != "sys/kernel/config/rdma_cm/rxe0" {
		t.Errorf("mkdirs = %v", k.Mkdirs)
	}
}

func TestPortRefusalIsPerPortAndNamed(t *testing.T) {
	root := hosttest.Copy(t, "demo")
	k := hosttest.NewKernel(root)
	// Soft-RoCE supports only RoCE v2 and answers EIO to v1.
	k.Refuse("rdma_cm/rxe0/ports/1/default_roce_mode", "IB/RoCE v1", syscall.EIO)
	pol := &config.Policy{RoCE: []config.RoCERule{{Selector: config.Selector{Device: config.Glob("*")}, Mode: config.RoCEv1, TOS: tos(96)}}}
	acts := apply(t, k.Host(), pol, "rxe0")
	if got, want := statuses(acts), "rxe0/1 roce mode failed, rxe0/1 roce tos changed"; got != want {
		t.Fatalf("%s, want %s", got, want)
	}
	msg := acts[0].Err.Error()
	for _, want := range []string{"rxe0", "port 1", "IB/RoCE v1", "does not support", "input/output error"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not mention %q", msg, want)
		}
	}
	// The other devices are untouched by rxe0's failure.
	if got := statuses(apply(t, k.Host(), pol, "mlx5_1")); got != "mlx5_1/1 roce mode changed, mlx5_1/1 roce tos changed" {
		t.Errorf("mlx5_1: %s", got)
	}
}

func TestWriteThatDoesNotStickFails(t *testing.T) {
	root := hosttest.Copy(t, "mlx5")
	k := hosttest.NewKernel(root)
	k.Ignore("mlx5_0/ports/1/default_roce_tos", "7")
	pol := &config.Policy{RoCE: []config.RoCERule{{Selector: config.Selector{Device: config.Glob("mlx5_0")}, TOS: tos(7)}}}
	acts := apply(t, k.Host(), pol, "mlx5_0")
	if len(acts) != 1 || acts[0].Status != reconcile.Failed || !strings.Contains(acts[0].Err.Error(), `wrote RoCE TOS 7 but the kernel kept 0`) {
		t.Fatalf("acts = %+v", acts)
	}
}

func TestInfiniBandPortNotApplicable(t *testing.T) {
	root := hosttest.Copy(t, "mlx4")
	k := hosttest.NewKernel(root)
	pol := &config.Policy{RoCE: []config.RoCERule{{Selector: config.Selector{Driver: "mlx4_core"}, Mode: config.RoCEv2}}}
	acts := apply(t, k.Host(), pol, "mlx4_0")
	if got, want := statuses(acts), "mlx4_0/1 roce mode not-applicable, mlx4_0/2 roce mode changed"; got != want {
		t.Fatalf("%s, want %s", got, want)
	}
	if got := hosttest.Read(t, root, host.ConfigfsPortPath("mlx4_0", 1, "default_roce_mode")); got != "IB/RoCE v1" {
		t.Errorf("IB port was written: %q", got)
	}
}

// RoCE settings are for RoCE ports only: an Omni-Path port (hfi1) and an
// iWARP one (siw) have configfs rdma_cm files too, as every RDMA port
// does, but a rule that selects every device leaves them as they are and
// records why it does not apply.
func TestOPAAndIWARPPortsNotApplicable(t *testing.T) {
	for _, tc := range []struct{ fixture, dev, transport string }{{"hfi1", "hfi1_0", "opa"}, {"siw", "siw0", "iwarp"}} {
		t.Run(tc.fixture, func(t *testing.T) {
			root := hosttest.Copy(t, tc.fixture)
			k := hosttest.NewKernel(root)
			pol := &config.Policy{RoCE: []config.RoCERule{{Selector: config.Selector{Device: config.Glob("*")}, Mode: config.RoCEv2, TOS: tos(106)}}}
			run := applyRun(t, k.Host(), pol, tc.dev)
			if got, want := statuses(run.Actions), tc.dev+"/1 roce mode not-applicable, "+tc.dev+"/1 roce tos not-applicable"; got != want {
				t.Errorf("%s, want %s", got, want)
			}
			for _, r := range run.Records {
				if r.State != reconcile.Inapplicable || r.Why == nil || !strings.Contains(r.Why.Error(), "port transport is "+tc.transport) {
					t.Errorf("record %s %s: %s (%v), want not applicable on an %s port", r.Subject, r.Setting.Name, r.State, r.Why, tc.transport)
				}
			}
			for file, want := range map[string]string{"default_roce_mode": "IB/RoCE v1", "default_roce_tos": "0"} {
				if got := hosttest.Read(t, root, host.ConfigfsPortPath(tc.dev, 1, file)); got != want {
					t.Errorf("%s was written: %q", file, got)
				}
			}
		})
	}
}

func TestPortSelectorAndPrecedence(t *testing.T) {
	root := hosttest.Copy(t, "mlx4")
	k := hosttest.NewKernel(root)
	pol := &config.Policy{RoCE: []config.RoCERule{
		{Selector: config.Selector{Device: config.Glob("mlx4_*")}, Port: 2, Mode: config.RoCEv2, TOS: tos(1)},
		{Selector: config.Selector{Netdev: "ens2"}, Port: 2, TOS: tos(2)}, // later rule wins for tos only
	}}
	apply(t, k.Host(), pol, "mlx4_0")
	if got := hosttest.Read(t, root, host.ConfigfsPortPath("mlx4_0", 2, "default_roce_tos")); got != "2" {
		t.Errorf("tos = %q, want the later rule's 2", got)
	}
	if got := hosttest.Read(t, root, host.ConfigfsPortPath("mlx4_0", 2, "default_roce_mode")); got != "RoCE v2" {
		t.Errorf("mode = %q", got)
	}
}

func TestMissingConfigfsAndVanishedDevice(t *testing.T) {
	root := hosttest.Copy(t, "mlx5")
	k := hosttest.NewKernel(root)
	h := k.Host()
	pol := &config.Policy{RoCE: []config.RoCERule{{Selector: config.Selector{Device: config.Glob("mlx5_0")}, TOS: tos(3)}}}
	// rdma_cm not loaded, and nothing to load it with: no configfs tree.
	if err := removeAll(root, host.ConfigfsRdmaCM); err != nil {
		t.Fatal(err)
	}
	d, err := h.Device("mlx5_0")
	if err != nil {
		t.Fatal(err)
	}
	run := reconcile.NewDeviceRun(pol, &d)
	(&roce.Part{Host: h}).ApplyDevice(context.Background(), run)
	acts := run.Actions
	if len(acts) != 1 || acts[0].Status != reconcile.Failed || acts[0].Subject != reconcile.DeviceSubject("mlx5_0") ||
		!strings.Contains(acts[0].Err.Error(), "rdma_cm module loaded") {
		t.Fatalf("acts = %+v", acts)
	}
	// The port's declared TOS is refused, for the same reason.
	if len(run.Records) != 1 || run.Records[0].State != reconcile.Refused || !strings.Contains(run.Records[0].WhyText(), "rdma_cm module loaded") {
		t.Fatalf("records = %+v", run.Records)
	}
	// The device went away between read and mkdir: ENODEV, named.
	if err := mkdir(root, host.ConfigfsRdmaCM); err != nil {
		t.Fatal(err)
	}
	if err := removeAll(root, host.ClassInfiniband+"/mlx5_0"); err != nil {
		t.Fatal(err)
	}
	run = reconcile.NewDeviceRun(pol, &d)
	(&roce.Part{Host: h}).ApplyDevice(context.Background(), run)
	if acts := run.Actions; len(acts) != 1 || acts[0].Status != reconcile.Failed || !strings.Contains(acts[0].Err.Error(), "ENODEV") {
		t.Fatalf("acts = %+v", acts)
	}
}

// Without configfs rdma_cm the part loads rdma_cm itself, and only that:
// RoCE settings do not wait for the other listed modules.
func TestLoadsRDMACMWhenConfigfsIsMissing(t *testing.T) {
	root := hosttest.Copy(t, "mlx5")
	k := hosttest.NewKernel(root)
	h := k.Host()
	if err := removeAll(root, host.ConfigfsRdmaCM); err != nil {
		t.Fatal(err)
	}
	hosttest.Write(t, root, host.ProcModules, "mlx5_ib 16384 0 - Live 0x0\nib_core 16384 0 - Live 0x0\n")
	loader := &hosttest.Modprobe{Root: root, OnLoad: func(m string) {
		if m == roce.CMModule { // as the kernel registers the configfs subsystem
			mkdir(root, host.ConfigfsRdmaCM)
		}
	}}
	d, err := h.Device("mlx5_0")
	if err != nil {
		t.Fatal(err)
	}
	pol := &config.Policy{RoCE: []config.RoCERule{{Selector: config.Selector{Device: config.Glob("mlx5_0")}, TOS: tos(3)}}}
	run := reconcile.NewDeviceRun(pol, &d)
	(&roce.Part{Host: h, Loader: loader}).ApplyDevice(context.Background(), run)
	if got, want := statuses(run.Actions), "mlx5_0 configfs rdma_cm changed, mlx5_0/1 roce tos changed"; got != want {
		t.Fatalf("%s, want %s", got, want)
	}
	if calls := loader.Calls(); len(calls) != 1 || len(calls[0]) != 1 || calls[0][0] != "rdma_cm" {
		t.Errorf("modprobe calls = %v, want one for rdma_cm", calls)
	}
	if tos, ok := roce.TOS.Observed(run.Records[0]); !ok || tos != 3 || run.Records[0].State != reconcile.Holds {
		t.Errorf("record after the change = %+v", run.Records[0])
	}
}

// A hanging rdma_cm load is cut off: the pass goes on and says why.
func TestHangingRDMACMLoadIsBounded(t *testing.T) {
	root := hosttest.Copy(t, "mlx5")
	h := hosttest.NewKernel(root).Host()
	if err := removeAll(root, host.ConfigfsRdmaCM); err != nil {
		t.Fatal(err)
	}
	hosttest.Write(t, root, host.ProcModules, "ib_core 16384 0 - Live 0x0\n")
	d, err := h.Device("mlx5_0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond) // stands in for CMLoadTimeout
	defer cancel()
	loader := &hosttest.Modprobe{Block: make(chan struct{})}
	pol := &config.Policy{RoCE: []config.RoCERule{{Selector: config.Selector{Device: config.Glob("mlx5_0")}, TOS: tos(3)}}}
	run := reconcile.NewDeviceRun(pol, &d)
	(&roce.Part{Host: h, Loader: loader}).ApplyDevice(ctx, run)
	acts := run.Actions
	if len(acts) != 1 || acts[0].Status != reconcile.Failed || !strings.Contains(acts[0].Err.Error(), "loading rdma_cm failed") {
		t.Fatalf("acts = %+v", acts)
	}
}

// A Soft-RoCE device has no parent device in sysfs (it sits under
// devices/virtual, as the rxe fixture does); driver = "rdma_rxe" selects
// it all the same, as the man page and the Ansible role say.
func TestDriverSelectorMatchesSoftRoCE(t *testing.T) {
	root := hosttest.Copy(t, "rxe")
	k := hosttest.NewKernel(root)
	pol := &config.Policy{RoCE: []config.RoCERule{{Selector: config.Selector{Driver: "rdma_rxe"}, TOS: tos(32)}}}
	if got, want := statuses(apply(t, k.Host(), pol, "rxe0")), "rxe0/1 roce tos changed"; got != want {
		t.Fatalf("%s, want %s", got, want)
	}
	if got := hosttest.Read(t, root, host.ConfigfsPortPath("rxe0", 1, "default_roce_tos")); got != "32" {
		t.Errorf("configfs tos = %q", got)
	}
}

// Each RoCE port gets one record per setting: the declared value with its
// file:line, the kernel's value parsed where it was read, and whether it
// holds; a publishing pass records the undeclared ports' values too.
func TestRecords(t *testing.T) {
	root := hosttest.Copy(t, "mlx5")
	k := hosttest.NewKernel(root)
	hosttest.Write(t, root, host.ConfigfsPortPath("mlx5_1", 1, "default_roce_tos"), "32\n")
	pol := &config.Policy{RoCE: []config.RoCERule{{Selector: config.Selector{Device: config.Glob("mlx5_0")}, TOS: tos(106), Source: config.Position{File: "a.toml", Line: 2}}}}
	run := applyRun(t, k.Host(), pol, "mlx5_0")
	if len(run.Records) != 1 {
		t.Fatalf("records = %+v (not publishing: only the declared setting)", run.Records)
	}
	r := run.Records[0]
	want, _ := roce.TOS.Declared(r)
	got, _ := roce.TOS.Observed(r)
	if !roce.TOS.Is(r) || r.Subject != reconcile.PortSubject("mlx5_0", 1) || want != 106 || got != 106 || r.State != reconcile.Holds ||
		r.Source.String() != "a.toml:2" || len(r.Watch) != 1 || r.Watch[0] != "sys/kernel/config/rdma_cm/mlx5_0/ports/1" {
		t.Errorf("record = %+v", r)
	}

	d, err := k.Host().Device("mlx5_1")
	if err != nil {
		t.Fatal(err)
	}
	pub := reconcile.NewDeviceRun(pol, &d)
	pub.Publish = true
	(&roce.Part{Host: k.Host()}).ApplyDevice(context.Background(), pub)
	if len(pub.Actions) != 0 || len(pub.Records) != 2 {
		t.Fatalf("publishing an undeclared port: actions %+v records %+v", pub.Actions, pub.Records)
	}
	mode, _ := roce.Mode.Observed(pub.Records[0])
	tosNow, _ := roce.TOS.Observed(pub.Records[1])
	if mode != (roce.ModeValue{Mode: config.RoCEv2}) || tosNow != 32 || pub.Records[0].IsDeclared() || pub.Records[1].Drifted() {
		t.Errorf("undeclared records = %+v", pub.Records)
	}
}

// holdAll is a pass that may not write: an out-of-band change reported.
type holdAll struct{}

func (holdAll) Hold(reconcile.Subject, *reconcile.Setting, reconcile.Value, config.Position) (reconcile.RecordState, error) {
	return reconcile.Differs, errors.New("reported, not corrected")
}
func (holdAll) ReadOnly() bool { return false }

// A pass that holds writes leaves a drifted setting as the kernel has it
// and records it as differing, with the reason.
func TestHeldWriteIsRecordedAsDiffering(t *testing.T) {
	root := hosttest.Copy(t, "mlx5")
	k := hosttest.NewKernel(root)
	pol := &config.Policy{RoCE: []config.RoCERule{{Selector: config.Selector{Device: config.Glob("mlx5_0")}, TOS: tos(106)}}}
	d, err := k.Host().Device("mlx5_0")
	if err != nil {
		t.Fatal(err)
	}
	run := reconcile.NewDeviceRun(pol, &d)
	run.Guard(holdAll{})
	(&roce.Part{Host: k.Host()}).ApplyDevice(context.Background(), run)
	if k.WriteCount() != 0 {
		t.Errorf("wrote %v", k.Writes)
	}
	if len(run.Records) != 1 || run.Records[0].State != reconcile.Differs || run.Records[0].WhyText() != "reported, not corrected" ||
		len(run.Actions) != 1 || run.Actions[0].Status != reconcile.Held {
		t.Errorf("actions %+v records %+v", run.Actions, run.Records)
	}
}
