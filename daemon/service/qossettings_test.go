package service_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"syscall"
	"testing"

	"github.com/rdmad/rdmad/daemon/compose"
	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/dcb/dcbtest"
	"github.com/rdmad/rdmad/daemon/ethtool/ethtooltest"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/daemon/reconcile"
	"github.com/rdmad/rdmad/daemon/service"
)

// losslessSvc is the mlx5 fixture with mlx5-like DCB and ethtool kernels
// under both netdevs, and rdmad's service on it.
func losslessSvc(t *testing.T) (*service.Service, *dcbtest.Fake, *ethtooltest.Fake, string) {
	t.Helper()
	root := hosttest.Copy(t, "mlx5")
	hosttest.Write(t, root, mainFile, "[modules]\nenable = false\n")
	hosttest.Write(t, root, reconcile.BootIDFile, "4b0c2a49-3d1e-4c5f-9a77-d1e1b2c3d4e5\n")
	k, e := dcbtest.New(), ethtooltest.New()
	for _, n := range []string{"ens1f0np0", "ens1f1np1"} {
		dcbtest.MLX5(k.Add(n))
		ethtooltest.MLX5(e.Add(n))
	}
	h := hosttest.NewKernel(root).Host()
	kernel := compose.Kernel{Modules: &hosttest.Modprobe{}, DCB: k.Kernel(), Ethtool: e.Kernel()}
	svc, err := service.New(service.Options{Host: h, Parts: compose.Parts(kernel), Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	svc.ReconcileNow(context.Background())
	return svc, k, e, root
}

func settings(t *testing.T, m map[string]any) config.QoSRule {
	t.Helper()
	r, err := config.DecodeQoSSettings(m)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestSetQoSSettingsAppliesAndPersists(t *testing.T) {
	svc, k, e, root := losslessSvc(t)
	err := svc.SetQoSSettings(context.Background(), service.QoSSettingsChange{Device: "mlx5_0", Port: 1, Persist: true,
		Settings: settings(t, map[string]any{"pfc": []any{int64(3)}, "pause": false, "cable_length": int64(10)})})
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := k.Netdev("ens1f0np0"); n.PFC.Enabled != 0x08 || n.PFC.Delay != 10 {
		t.Errorf("DCB %+v", n.PFC)
	}
	if p, _ := e.Netdev("ens1f0np0"); !p.Pause.Off() {
		t.Errorf("pause %+v", p.Pause)
	}
	drop := hosttest.Read(t, root, config.DropInDir+"/"+config.PersistedName)
	if !strings.Contains(drop, "[[qos]]\ndevice = \"mlx5_0\"\nport = 1\npfc = [3]\ncable_length = 10\npause = false") {
		t.Errorf("drop-in:\n%s", drop)
	}
}

// TestSetQoSSettingsRefusedIsPutBack: one setting the netdev refuses
// fails the call, withdraws the declaration and puts back what the call
// had already changed.
func TestSetQoSSettingsRefusedIsPutBack(t *testing.T) {
	svc, k, e, _ := losslessSvc(t)
	e.Update("ens1f0np0", func(n *ethtooltest.Netdev) { n.RefusePause = syscall.EIO })
	err := svc.SetQoSSettings(context.Background(), service.QoSSettingsChange{Device: "mlx5_0", Port: 1,
		Settings: settings(t, map[string]any{"cable_length": int64(20), "pause": false})})
	var ae *service.ApplyError
	if !errors.As(err, &ae) || !strings.Contains(err.Error(), "ens1f0np0") {
		t.Fatalf("refused pause: %v", err)
	}
	if n, _ := k.Netdev("ens1f0np0"); n.PFC.Delay != 7 {
		t.Errorf("cable length %d after the refused call, want 7 put back", n.PFC.Delay)
	}
	// Nothing to set, and a port that is not Ethernet, are argument errors.
	var arg *service.ArgError
	if err := svc.SetQoSSettings(context.Background(), service.QoSSettingsChange{Device: "mlx5_0"}); !errors.As(err, &arg) {
		t.Errorf("empty settings: %v", err)
	}
	if err := svc.SetQoSSettings(context.Background(), service.QoSSettingsChange{Device: "nope", Settings: settings(t, map[string]any{"pause": false})}); err == nil {
		t.Error("a missing device accepted")
	}
}

// TestCheckSetQoSSettings: the check the bus runs before authorization
// refuses what the call would, and changes nothing.
func TestCheckSetQoSSettings(t *testing.T) {
	svc, k, _, _ := losslessSvc(t)
	var arg *service.ArgError
	if err := svc.CheckSetQoSSettings(service.QoSSettingsChange{Device: "mlx5_0"}); !errors.As(err, &arg) || arg.Arg != "settings" {
		t.Errorf("empty settings: %v", err)
	}
	var nf *service.NotFoundError
	if err := svc.CheckSetQoSSettings(service.QoSSettingsChange{Device: "nope", Settings: settings(t, map[string]any{"pause": false})}); !errors.As(err, &nf) {
		t.Errorf("a missing device: %v", err)
	}
	if err := svc.CheckSetQoSSettings(service.QoSSettingsChange{Device: "mlx5_0", Port: 9, Settings: settings(t, map[string]any{"pause": false})}); !errors.As(err, &nf) {
		t.Errorf("a missing port: %v", err)
	}
	if err := svc.CheckSetQoSSettings(service.QoSSettingsChange{Device: "mlx5_0", Port: 1, Settings: settings(t, map[string]any{"cable_length": int64(20)})}); err != nil {
		t.Errorf("a good request: %v", err)
	}
	if n, _ := k.Netdev("ens1f0np0"); n.PFC.Delay == 20 {
		t.Error("the check changed the cable length")
	}
}

// TestWithdrawQoSSettings: withdrawing a port's QoS declaration takes
// the settings SetQoSSettings declared with it, so the files decide again.
func TestWithdrawQoSSettings(t *testing.T) {
	svc, _, _, _ := losslessSvc(t)
	if err := svc.SetQoSSettings(context.Background(), service.QoSSettingsChange{Device: "mlx5_0", Port: 1,
		Settings: settings(t, map[string]any{"cable_length": int64(20), "pause": false})}); err != nil {
		t.Fatal(err)
	}
	o := svc.RuntimeOverlay()
	if len(o.QoS) != 1 {
		t.Fatalf("runtime overlay %+v", o.QoS)
	}
	if _, ok := config.QoSCableLength.In(o.QoS[0].LosslessRule); !ok {
		t.Fatalf("runtime overlay %+v", o.QoS)
	}
	if err := svc.Withdraw(context.Background(), service.Withdrawal{Kind: service.WithdrawQoS, Name: "mlx5_0", Port: 1}); err != nil {
		t.Fatal(err)
	}
	if o = svc.RuntimeOverlay(); len(o.QoS) != 0 {
		t.Errorf("runtime overlay after the withdrawal %+v", o.QoS)
	}
}

// TestSetQoSSettingsChecksTheRule: settings that break a rule's own
// checks (DSCP entries with trust pcp) are refused as the files'
// would be, naming the key.
func TestSetQoSSettingsChecksTheRule(t *testing.T) {
	svc, _, _, _ := losslessSvc(t)
	rule := settings(t, map[string]any{"pause": false})
	rule.Trust, rule.DSCPPrio = config.TrustPCP, map[uint8]uint8{26: 3}
	var arg *service.ArgError
	err := svc.CheckSetQoSSettings(service.QoSSettingsChange{Device: "mlx5_0", Port: 1, Settings: rule})
	if !errors.As(err, &arg) || arg.Arg != "settings" || !strings.Contains(err.Error(), "dscp_prio: applies with trust = \"dscp\" only") {
		t.Errorf("dscp_prio with trust pcp: %v", err)
	}
}
