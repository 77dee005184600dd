package service_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rdmad/rdmad/daemon/compose"
	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/dcb"
	"github.com/rdmad/rdmad/daemon/dcb/dcbtest"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/daemon/qos"
	"github.com/rdmad/rdmad/daemon/reconcile"
	"github.com/rdmad/rdmad/daemon/service"
)

// qosEnv is the mlx5 fixture host with a fake DCB kernel holding both
// netdevs, and rdmad's service on it.
func qosEnv(t *testing.T, cfg string, setup func(k *dcbtest.Fake)) (*service.Service, *dcbtest.Fake, string) {
	t.Helper()
	return qosEnvKernel(t, cfg, setup, nil)
}

// qosEnvKernel is qosEnv with the DCB kernel the service talks to made by
// kernelOf from the fake (nil: the fake's own).
func qosEnvKernel(t *testing.T, cfg string, setup func(k *dcbtest.Fake), kernelOf func(*dcbtest.Fake) dcb.Kernel) (*service.Service, *dcbtest.Fake, string) {
	t.Helper()
	root := hosttest.Copy(t, "mlx5")
	hosttest.Write(t, root, mainFile, "[modules]\nenable = false\n"+cfg)
	k := dcbtest.New()
	k.Add("ens1f0np0")
	k.Add("ens1f1np1")
	if setup != nil {
		setup(k)
	}
	h := hosttest.NewKernel(root).Host()
	kernel := compose.Kernel{Modules: &hosttest.Modprobe{}, DCB: k.Kernel()}
	if kernelOf != nil {
		kernel.DCB = kernelOf(k)
	}
	svc, err := service.New(service.Options{Host: h, Parts: compose.Parts(kernel), Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	svc.ReconcileNow(context.Background())
	return svc, k, root
}

func TestSetQoSPersistedRoundTrip(t *testing.T) {
	svc, k, root := qosEnv(t, "", nil)
	err := svc.SetQoS(context.Background(), service.QoSChange{Device: "mlx5_0", Port: 1, Trust: config.TrustDSCP, PFC: []uint8{4, 3}, HasPFC: true, Persist: true})
	if err != nil {
		t.Fatal(err)
	}
	n, _ := k.Netdev("ens1f0np0")
	if n.PFC.Enabled != 0x18 || len(n.Apps) != 64 {
		t.Errorf("kernel: PFC %#x, %d APP entries", n.PFC.Enabled, len(n.Apps))
	}
	drop := hosttest.Read(t, root, config.DropInDir+"/"+config.PersistedName)
	if !strings.Contains(drop, "[[qos]]\ndevice = \"mlx5_0\"\nport = 1\ntrust = \"dscp\"\npfc = [3, 4]") {
		t.Errorf("drop-in:\n%s", drop)
	}
	// The persisted declaration is in force after a restart: a new
	// service on the same files sets a PFC changed behind its back again.
	k.Update("ens1f0np0", func(n *dcbtest.Netdev) { n.PFC.Enabled = 0 })
	h := hosttest.NewKernel(root).Host()
	svc2, err := service.New(service.Options{Host: h, Parts: compose.Parts(compose.Kernel{Modules: &hosttest.Modprobe{}, DCB: k.Kernel()}),
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	rep := svc2.ReconcileNow(context.Background())
	if a, ok := rep.Find(reconcile.PortSubject("mlx5_0", 1), qos.PFC.Kind()); !ok || a.Status != reconcile.Changed || !strings.Contains(a.Source, config.PersistedName) {
		t.Errorf("after restart: %+v", a)
	}
	snap := svc2.Reconciler().Snapshot()
	ds := snap.Device("mlx5_0")
	if ds == nil || !holdsFrom(ds.Ports[0], qos.PFC.Setting(), config.PersistedName) || !holdsFrom(ds.Ports[0], qos.Trust.Setting(), config.PersistedName) {
		t.Errorf("state after restart: %+v", ds)
	}
	// Runtime only: kept in the overlay, not in the drop-in.
	if err := svc.SetQoS(context.Background(), service.QoSChange{Device: "mlx5_1", Trust: config.TrustPCP}); err != nil {
		t.Fatal(err)
	}
	if ov := svc.RuntimeOverlay(); len(ov.QoS) != 1 || ov.QoS[0].Trust != config.TrustPCP {
		t.Errorf("overlay %+v", ov.QoS)
	}
}

func TestSetQoSRefusalRollsBack(t *testing.T) {
	// The driver refuses the DSCP entries: the PFC the same call set is
	// put back, and the declaration withdrawn.
	svc, k, root := qosEnv(t, "", func(k *dcbtest.Fake) {
		k.Update("ens1f0np0", func(n *dcbtest.Netdev) { n.PFC.Enabled = 0x01; n.RefuseApps = syscall.EINVAL })
	})
	err := svc.SetQoS(context.Background(), service.QoSChange{Device: "mlx5_0", Trust: config.TrustDSCP, PFC: []uint8{3}, HasPFC: true, Persist: true})
	var ae *service.ApplyError
	if !errors.As(err, &ae) {
		t.Fatalf("SetQoS = %v, want an ApplyError", err)
	}
	if len(ae.Failed) != 1 || ae.Failed[0].Kind != qos.Trust.Kind() || !errors.Is(ae.Failed[0].Err, syscall.EINVAL) {
		t.Errorf("failed %+v", ae.Failed)
	}
	if len(ae.Restored) != 1 || ae.Restored[0].Kind != qos.PFC.Kind() {
		t.Errorf("restored %+v", ae.Restored)
	}
	// Only what the call changed is put back, and that without error.
	if ae.UndoErr != nil {
		t.Errorf("undo error %v", ae.UndoErr)
	}
	if n, _ := k.Netdev("ens1f0np0"); n.PFC.Enabled != 0x01 {
		t.Errorf("PFC after rollback %#x, want 0x01", n.PFC.Enabled)
	}
	if drop, _ := os.ReadFile(filepath.Join(root, config.DropInDir, config.PersistedName)); strings.Contains(string(drop), "qos") {
		t.Errorf("refused declaration persisted:\n%s", drop)
	}
}

func TestSetQoSNoDCBAndOwnerFailTheCall(t *testing.T) {
	svc, _, _ := qosEnv(t, "", func(k *dcbtest.Fake) {
		k.AddNoDCB("ens1f0np0")
		k.Update("ens1f1np1", func(n *dcbtest.Netdev) { n.DCBX = 0x0a }) // LLD managed
	})
	err := svc.SetQoS(context.Background(), service.QoSChange{Device: "mlx5_0", PFC: []uint8{3}, HasPFC: true})
	if err == nil || !strings.Contains(err.Error(), "ens1f0np0 does not support DCB") {
		t.Errorf("no DCB: %v", err)
	}
	err = svc.SetQoS(context.Background(), service.QoSChange{Device: "mlx5_1", PFC: []uint8{3}, HasPFC: true})
	if err == nil || !strings.Contains(err.Error(), "managed by the adapter's firmware") {
		t.Errorf("owner: %v", err)
	}
	if ov := svc.RuntimeOverlay(); !ov.Empty() {
		t.Errorf("overlay after refusals: %+v", ov)
	}
	for _, c := range []service.QoSChange{
		{Device: "mlx5_0", PFC: []uint8{8}, HasPFC: true},
		{Device: "mlx5_0", PFC: []uint8{3, 3}, HasPFC: true},
		{Device: "mlx5_0", Trust: "ip"},
		{Device: "mlx5_0"},
	} {
		var arg *service.ArgError
		if err := svc.SetQoS(context.Background(), c); !errors.As(err, &arg) {
			t.Errorf("%+v: %v, want an ArgError", c, err)
		}
	}
}

// Every persisted call rewrites rdmad's drop-in from what it holds: a
// persisted call of another kind, or on another port, keeps the [[qos]]
// rules already there (they were dropped, and lost at the next boot).
func TestPersistedCallsKeepEachOthersQoS(t *testing.T) {
	svc, _, root := qosEnv(t, "", nil)
	ctx := context.Background()
	calls := []func() error{
		func() error {
			return svc.SetQoS(ctx, service.QoSChange{Device: "mlx5_0", Port: 1, PFC: []uint8{3}, HasPFC: true, Persist: true})
		},
		func() error {
			return svc.SetQoS(ctx, service.QoSChange{Device: "mlx5_1", Port: 1, Trust: config.TrustPCP, Persist: true})
		},
		func() error {
			return svc.SetRoCE(ctx, service.RoCEChange{Device: "mlx5_0", Port: 1, TOS: 106, Persist: true})
		},
	}
	for i, call := range calls {
		if err := call(); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	drop := hosttest.Read(t, root, config.DropInDir+"/"+config.PersistedName)
	for _, want := range []string{"device = \"mlx5_0\"\nport = 1\npfc = [3]", "device = \"mlx5_1\"\nport = 1\ntrust = \"pcp\"", "tos = 106"} {
		if !strings.Contains(drop, want) {
			t.Errorf("drop-in lacks %q:\n%s", want, drop)
		}
	}
}

// A port that does not exist is NoSuchPort, as for SetRoCE, not a
// malformed argument.
func TestSetQoSMissingPortIsNotFound(t *testing.T) {
	svc, _, _ := qosEnv(t, "", nil)
	err := svc.SetQoS(context.Background(), service.QoSChange{Device: "mlx5_0", Port: 9, Trust: config.TrustDSCP})
	var nf *service.NotFoundError
	if !errors.As(err, &nf) || nf.What != service.MissingPort {
		t.Fatalf("SetQoS on port 9 = %#v, want a NotFoundError for the port", err)
	}
}

// The mlx4_en options file is host-wide but no other driver's business: a
// file rdmad may not replace (no header of its own) fails the mlx4 rule,
// not a call on an mlx5 port.
func TestSetQoSOnMLX5IgnoresABrokenMLX4File(t *testing.T) {
	root := hosttest.Copy(t, "demo")
	hosttest.Write(t, root, mainFile, "[modules]\nenable = false\n[[qos]]\ndevice = \"mlx4_0\"\npfc = [3]\n")
	hosttest.Write(t, root, "etc/modprobe.d/rdmad-mlx4-pfc.conf", "options mlx4_en pfctx=0x01 # the admin's\n")
	k := dcbtest.New()
	for _, n := range []string{"ens1f0np0", "ens1f1np1", "ens2"} {
		k.Add(n)
	}
	h := hosttest.NewKernel(root).Host()
	svc, err := service.New(service.Options{Host: h, Parts: compose.Parts(compose.Kernel{Modules: &hosttest.Modprobe{}, DCB: k.Kernel()}),
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	rep := svc.ReconcileNow(context.Background())
	if a, ok := rep.Find(reconcile.HostSubject(), qos.MLX4Options.Kind()); !ok || a.Status != reconcile.Failed {
		t.Fatalf("the admin's mlx4 file: %+v (want a failed action)", a)
	}
	if err := svc.SetQoS(context.Background(), service.QoSChange{Device: "mlx5_0", Port: 1, Trust: config.TrustDSCP}); err != nil {
		t.Errorf("SetQoS on mlx5_0 refused for the mlx4 file: %v", err)
	}
}

// SetQoS with PFC on an mlx4 port is the host-wide mlx4_en options file
// too: a file rdmad may not replace fails the call, naming the file, and
// withdraws the declaration; a file rdmad owns takes it.
func TestSetQoSOnMLX4ReportsTheOptionsFile(t *testing.T) {
	for _, foreign := range []bool{true, false} {
		root := hosttest.Copy(t, "demo")
		hosttest.Write(t, root, mainFile, "[modules]\nenable = false\n")
		if foreign {
			hosttest.Write(t, root, qos.MLX4File, "options mlx4_en pfctx=0x01 # the admin's\n")
		}
		k := dcbtest.New()
		for _, n := range []string{"ens1f0np0", "ens1f1np1", "ens2"} {
			k.Add(n)
		}
		h := hosttest.NewKernel(root).Host()
		svc, err := service.New(service.Options{Host: h, Parts: compose.Parts(compose.Kernel{Modules: &hosttest.Modprobe{}, DCB: k.Kernel()}),
			Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		svc.ReconcileNow(context.Background())
		err = svc.SetQoS(context.Background(), service.QoSChange{Device: "mlx4_0", Port: 2, PFC: []uint8{3}, HasPFC: true})
		var ae *service.ApplyError
		switch {
		case foreign && (!errors.As(err, &ae) || !strings.Contains(err.Error(), qos.MLX4File)):
			t.Errorf("SetQoS pfc [3] on mlx4_0/2 with the admin's %s: %v, want a failure naming it", qos.MLX4File, err)
		case foreign && len(svc.RuntimeOverlay().QoS) != 0:
			t.Errorf("the refused declaration stayed: %+v", svc.RuntimeOverlay().QoS)
		case !foreign && err != nil:
			t.Errorf("SetQoS pfc [3] on mlx4_0/2: %v", err)
		case !foreign && !strings.Contains(hosttest.Read(t, root, qos.MLX4File), "pfctx=0x08 pfcrx=0x08"):
			t.Errorf("%s after SetQoS: %q", qos.MLX4File, hosttest.Read(t, root, qos.MLX4File))
		}
	}
}

// A driver reload resets the PF's DCB and re-registers its netdev: the
// netdev event's pass puts PFC and trust back, with the TOS.
func TestNetdevEventReappliesQoSWithTheTOS(t *testing.T) {
	root := hosttest.Copy(t, "mlx5")
	hosttest.Write(t, root, mainFile, "[modules]\nenable = false\n[[roce]]\ndevice = \"mlx5_0\"\ntos = 106\n[[qos]]\ndevice = \"mlx5_0\"\ntrust = \"dscp\"\npfc = [3]\n")
	k := dcbtest.New()
	k.Add("ens1f0np0")
	svc, err := service.New(service.Options{Host: hosttest.NewKernel(root).Host(), Parts: compose.Parts(compose.Kernel{Modules: &hosttest.Modprobe{}, DCB: k.Kernel()}),
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan struct{})
	go func() { _ = svc.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	svc.Start()
	if err := svc.Idle(ctx); err != nil {
		t.Fatal(err)
	}
	if n, _ := k.Netdev("ens1f0np0"); n.PFC.Enabled != 0x08 || len(n.Apps) != 64 {
		t.Fatalf("first pass: PFC %#x, %d entries", n.PFC.Enabled, len(n.Apps))
	}
	// The driver reloads: DCB back to defaults, TOS too.
	k.Update("ens1f0np0", func(n *dcbtest.Netdev) { n.PFC.Enabled, n.Apps = 0, nil })
	hosttest.Write(t, root, host.ConfigfsPortPath("mlx5_0", 1, "default_roce_tos"), "0")
	svc.RequestNetdev("ens1f0np0")
	if err := svc.Idle(ctx); err != nil {
		t.Fatal(err)
	}
	if n, _ := k.Netdev("ens1f0np0"); n.PFC.Enabled != 0x08 || len(n.Apps) != 64 {
		t.Errorf("after the netdev event: PFC %#x, %d entries", n.PFC.Enabled, len(n.Apps))
	}
	if got := hosttest.Read(t, root, host.ConfigfsPortPath("mlx5_0", 1, "default_roce_tos")); got != "106" {
		t.Errorf("tos %s", got)
	}
}

// holdsFrom reports whether a port's record of setting s holds, declared
// in file.
func holdsFrom(p reconcile.PortState, s *reconcile.Setting, file string) bool {
	for _, r := range p.Records {
		if r.Setting == s {
			return r.State == reconcile.Holds && strings.HasSuffix(r.Source.File, file)
		}
	}
	return false
}
