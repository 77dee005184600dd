package qos_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/dcb"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/daemon/qos"
	"github.com/rdmad/rdmad/daemon/reconcile"
)

func mlx4Pass(t *testing.T, root string, pol *config.Policy, extra ...host.Device) (reconcile.Result, *host.Host) {
	t.Helper()
	h := hosttest.NewKernel(root).Host()
	d, err := h.Device("mlx4_0")
	if err != nil {
		t.Fatal(err)
	}
	devs := []*host.Device{&d}
	for i := range extra {
		devs = append(devs, &extra[i])
	}
	return (&qos.MLX4Part{Host: h}).ApplyHost(context.Background(), &reconcile.HostRun{Policy: pol, Devices: devs}), h
}

func TestMLX4OptionsFile(t *testing.T) {
	root := hosttest.Copy(t, "mlx4")
	res, _ := mlx4Pass(t, root, policy(t, "[[qos]]\ndevice = \"mlx4_*\"\npfc = [3]\n"))
	if len(res.Actions) != 1 || res.Actions[0].Status != reconcile.Changed {
		t.Fatalf("actions %v", res.Actions)
	}
	got := hosttest.Read(t, root, qos.MLX4File)
	if !strings.Contains(got, "\noptions mlx4_en pfctx=0x08 pfcrx=0x08") || !strings.Contains(got, "declared at rdmad.toml:1") {
		t.Errorf("file:\n%s", got)
	}
	res, _ = mlx4Pass(t, root, policy(t, "[[qos]]\ndevice = \"mlx4_*\"\npfc = [3]\n"))
	if res.Actions[0].Status != reconcile.Unchanged {
		t.Errorf("second pass: %v", res.Actions)
	}
	// Absent pfc leaves the file alone.
	res, _ = mlx4Pass(t, root, policy(t, "[[qos]]\ndevice = \"mlx4_*\"\ntrust = \"pcp\"\n"))
	if len(res.Actions) != 0 {
		t.Errorf("absent pfc acted: %v", res.Actions)
	}
	// pfc = [] removes it.
	res, _ = mlx4Pass(t, root, policy(t, "[[qos]]\ndevice = \"mlx4_*\"\npfc = []\n"))
	if res.Actions[0].Status != reconcile.Changed || res.Actions[0].To != "absent" {
		t.Errorf("pfc = []: %v", res.Actions)
	}
	if _, err := os.Stat(filepath.Join(root, qos.MLX4File)); !os.IsNotExist(err) {
		t.Errorf("file still there: %v", err)
	}
}

func TestMLX4OptionsConflictNamesBothRules(t *testing.T) {
	root := hosttest.Copy(t, "mlx4")
	h := hosttest.NewKernel(root).Host()
	d, _ := h.Device("mlx4_0")
	other := d
	other.Name = "mlx4_1"
	other.Ports = append([]host.Port(nil), d.Ports...)
	pol := policy(t, "[[qos]]\ndevice = \"mlx4_0\"\npfc = [3]\n\n[[qos]]\ndevice = \"mlx4_1\"\npfc = [4]\n")
	res, _ := mlx4Pass(t, root, pol, other)
	if len(res.Actions) != 1 || res.Actions[0].Status != reconcile.Failed {
		t.Fatalf("actions %v", res.Actions)
	}
	msg := res.Actions[0].Err.Error()
	for _, w := range []string{"host-wide", "mlx4_0/2 asks pfc = [3] (rdmad.toml:1)", "mlx4_1/2 asks pfc = [4] (rdmad.toml:5)"} {
		if !strings.Contains(msg, w) {
			t.Errorf("%q lacks %q", msg, w)
		}
	}
	if _, err := os.Stat(filepath.Join(root, qos.MLX4File)); !os.IsNotExist(err) {
		t.Errorf("file written despite the conflict: %v", err)
	}
}

func TestPlanTrustDefaultTable(t *testing.T) {
	plan := qos.PlanTrust(nil, config.QoSDesired{Trust: config.TrustDSCP, DSCPPrio: map[uint8]uint8{26: 3, 48: 6}})
	if len(plan.Add) != 64 || len(plan.Del) != 0 {
		t.Fatalf("plan %+v", plan)
	}
	for _, a := range plan.Add {
		want := uint8(a.Protocol >> 3)
		if a.Protocol == 48 {
			want = 6
		}
		if a.Priority != want {
			t.Errorf("DSCP %d -> %d, want %d", a.Protocol, a.Priority, want)
		}
	}
	if again := qos.PlanTrust(plan.Add, config.QoSDesired{Trust: config.TrustDSCP, DSCPPrio: map[uint8]uint8{26: 3, 48: 6}}); !again.Empty() {
		t.Errorf("plan after writing: %+v", again)
	}
}

func TestMLX4UndoRestoresTheFile(t *testing.T) {
	root := hosttest.Copy(t, "mlx4")
	pol3 := policy(t, "[[qos]]\ndevice = \"mlx4_*\"\npfc = [3]\n")
	res, h := mlx4Pass(t, root, pol3)
	first := hosttest.Read(t, root, qos.MLX4File)
	res, _ = mlx4Pass(t, root, policy(t, "[[qos]]\ndevice = \"mlx4_*\"\npfc = [4]\n"))
	if res.Actions[0].Status != reconcile.Changed {
		t.Fatalf("%v", res.Actions)
	}
	if err := (&qos.MLX4Part{Host: h}).Undo(context.Background(), res.Actions[0]); err != nil {
		t.Fatal(err)
	}
	if got := hosttest.Read(t, root, qos.MLX4File); got != first {
		t.Errorf("after undo:\n%s\nwant\n%s", got, first)
	}
}

// A declaring file's name is host input: a newline in it must not put a
// line of its own into a file modprobe reads.
func TestMLX4OptionsFileQuotesHostileSources(t *testing.T) {
	got := string(qos.RenderMLX4(0x08, []string{"rdmad.d/a\noptions mlx4_core log_num_mgm_entry_size=-1\n.toml:1"}))
	for _, line := range strings.Split(got, "\n") {
		if strings.HasPrefix(line, "options") && line != "options mlx4_en pfctx=0x08 pfcrx=0x08" {
			t.Errorf("a source name became a modprobe line: %q\n%s", line, got)
		}
	}
}

// What found.json holds of the lossless settings is put back only when it
// is a value of the setting: the mlx4_en options file as rdmad writes it,
// a netdev's name, values within what the [[qos]] keys and the kernel's
// structs take.
func TestFoundLosslessValuesAreChecked(t *testing.T) {
	file := func(data []byte) host.FileSnapshot { return host.FileSnapshot{Exists: true, Data: data} }
	for _, tc := range []struct {
		name  string
		valid func(reconcile.Value) error
		value reconcile.Value
		ok    bool
	}{
		{"mlx4 file", qos.MLX4Options.Setting().Valid, file(qos.RenderMLX4(0x08, []string{"/etc/rdma/rdmad.toml:4"})), true},
		{"mlx4 install", qos.MLX4Options.Setting().Valid, file(append(qos.RenderMLX4(0x08, nil), "install mlx4_en /bin/true\n"...)), false},
		{"mlx4 masks differ", qos.MLX4Options.Setting().Valid, file([]byte(strings.Replace(string(qos.RenderMLX4(0x08, nil)), "pfcrx=0x08", "pfcrx=0x09", 1))), false},
		{"pfc", qos.PFC.Setting().Valid, qos.PFCValue{Netdev: "ens1f0np0", PFC: dcb.PFC{Cap: 8, Enabled: 0x08}}, true},
		{"pfc netdev path", qos.PFC.Setting().Valid, qos.PFCValue{Netdev: "../../x", PFC: dcb.PFC{Cap: 8}}, false},
		{"trust dscp 64", qos.Trust.Setting().Valid, qos.TrustValue{Netdev: "eth0", Trust: config.TrustDSCP, DSCP: []dcb.App{dcb.DSCP(64, 3)}}, false},
		{"storm 5 ms", qos.StormTimeout.Setting().Valid, qos.StormTimeoutValue{Netdev: "eth0", MS: 5}, false},
		{"storm auto", qos.StormTimeout.Setting().Valid, qos.StormTimeoutValue{Netdev: "eth0", MS: 0xffff}, true},
		{"cnp priority 8", qos.CNPPriority.Setting().Valid, qos.CNPValue{Netdev: "eth0", Value: 8}, false},
		{"prio_tc 9", qos.PrioTC.Setting().Valid, qos.PrioTCValue{Netdev: "eth0", Map: [8]uint8{9}}, false},
		{"vendor ets", qos.Bandwidth.Setting().Valid, qos.BandwidthValue{Netdev: "eth0", BW: config.ETSBandwidth{TSA: [8]config.TSA{"vendor", "ets", "ets", "ets", "ets", "ets", "ets", "ets"}}, Cap: 8}, true},
		{"dcbx bits", qos.DCBX.Setting().Valid, qos.DCBXValue{Netdev: "eth0", Caps: 0x80}, false},
	} {
		if err := tc.valid(tc.value); (err == nil) != tc.ok {
			t.Errorf("%s: %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}
