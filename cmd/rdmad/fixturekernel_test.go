package main_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rdmad/rdmad/daemon/fixturekernel"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/daemon/reconcile"
)

// losslessHost is the demo fixture with the example RoCE and lossless
// drop-ins: its ConnectX-5 netdevs carry their DCB state as mlx5 reports
// it after boot (fixture/kernel.json).
func losslessHost(t *testing.T) (root string, env []string) {
	t.Helper()
	root, env, _ = demoHost(t)
	copyFile(t, filepath.Join(hosttest.RepoRoot(), "docs/examples/60-lossless.toml"), filepath.Join(root, "etc/rdma/rdmad.d/60-lossless.toml"))
	// This boot's id: what rdmad finds before its first change is kept
	// for the boot it was found in.
	hosttest.Write(t, root, reconcile.BootIDFile, "0d4b6c8e-5a1f-4f3e-9c2d-7b8a9e0f1a2b\n")
	return root, env
}

func readState(t *testing.T, root string) *fixturekernel.State {
	t.Helper()
	s, err := fixturekernel.New(host.New(root)).Read()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// otherManager changes the fixture's state as another tool changes a
// host's DCB (dcb, lldpad, mlnx_qos): behind rdmad's back, a new file
// renamed into place.
func otherManager(t *testing.T, root string, fn func(s *fixturekernel.State)) {
	t.Helper()
	s := readState(t, root)
	fn(s)
	b, err := fixturekernel.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	name := filepath.Join(root, fixturekernel.File)
	if err := os.WriteFile(name+".other", b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(name+".other", name); err != nil {
		t.Fatal(err)
	}
}

type netdevQoS struct {
	pfc    []int
	dscp   int // DSCP entries of the APP table
	prioTC [8]uint8
	pause  bool
	delay  uint16
}

func qosOf(t *testing.T, root, netdev string) netdevQoS {
	t.Helper()
	n := readState(t, root).Netdevs[netdev]
	q := netdevQoS{pfc: n.DCB.PFC.Enabled, prioTC: n.DCB.ETS.PrioTC, pause: n.Pause.RX || n.Pause.TX, delay: n.DCB.PFC.Delay}
	for _, a := range n.DCB.App {
		if strings.HasPrefix(string(must(a.MarshalText())), "dscp-prio") {
			q.dscp++
		}
	}
	return q
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

// TestFixtureQoSEndToEnd runs the rdmad binary on a fixture that carries
// its DCB and ethtool state: [[qos]] is applied into that state and
// rdmactl qos show lists it; another manager's change of it is corrected,
// and under [drift] action = "report" reported and left; the carrier drop
// an mlx5 PFC change causes reaches doctor as carrier losses; removing the
// rule puts back what rdmad found.
func TestFixtureQoSEndToEnd(t *testing.T) {
	addr := privateBus(t)
	root, env := losslessHost(t)
	// One carrier loss an hour is a flap here (the default is two).
	hosttest.Write(t, root, "etc/rdma/rdmad.d/70-counters.toml", "[doctor.counters]\nlink_downed = 1\n")
	boot := qosOf(t, root, "ens1f0np0")
	if len(boot.pfc) != 0 || boot.dscp != 0 || !boot.pause || boot.delay != 7 {
		t.Fatalf("the fixture is not mlx5 after boot: %+v", boot)
	}
	p := startRdmad(t, env, "--root", root, "--bus", addr)
	ctl := func(args ...string) (string, error) {
		out, err := exec.Command(rdmactlBin, append([]string{"--bus", addr}, args...)...).CombinedOutput()
		return string(out), err
	}
	applied := netdevQoS{pfc: []int{3}, dscp: 64, prioTC: [8]uint8{0, 0, 0, 1}, pause: false, delay: 7}
	same := func(a, b netdevQoS) bool {
		return slices.Equal(a.pfc, b.pfc) && a.dscp == b.dscp && a.prioTC == b.prioTC && a.pause == b.pause && a.delay == b.delay
	}
	eventually(t, "the lossless profile reaches both netdevs' state", func() bool {
		return same(qosOf(t, root, "ens1f0np0"), applied) && same(qosOf(t, root, "ens1f1np1"), applied)
	})
	eventually(t, "rdmactl qos show lists PFC, trust and ETS as holding", func() bool {
		out, err := ctl("qos", "show", "mlx5_0")
		return err == nil && strings.Contains(out, "mlx5_0/1  ens1f0np0  dscp   3") &&
			strings.Contains(out, "ETS priority classes  [0,0,0,1,0,0,0,0]") && !strings.Contains(out, "differs")
	})

	// Another manager turns PFC off and PCP trust back on: rdmad reads the
	// netdev again at once and corrects both; the PFC changes toggled the
	// link twice more.
	otherManager(t, root, func(s *fixturekernel.State) {
		d := s.Netdevs["ens1f0np0"].DCB
		d.PFC.Enabled, d.App = []int{}, []fixturekernel.App{}
	})
	eventually(t, "the out-of-band change is corrected", func() bool { return same(qosOf(t, root, "ens1f0np0"), applied) })
	eventually(t, "the corrections are logged", func() bool {
		l := p.logs.String()
		return strings.Contains(l, "corrected a setting changed behind rdmad's back") && strings.Contains(l, "setting=qos_pfc found=[] restored=[3]") &&
			strings.Contains(l, "setting=qos_trust found=pcp restored=dscp")
	})
	eventually(t, "doctor counts mlx5's carrier drops as link flaps", func() bool {
		out, _ := ctl("doctor")
		return strings.Contains(out, "(carrier losses of ens1f0np0; more than 1 an hour")
	})
	if out, _ := ctl("doctor"); strings.Contains(out, "carrier losses of ens1f1np1") {
		t.Errorf("ens1f1np1's PFC changed once, and a flap is reported:\n%s", out)
	}

	// Under [drift] action = "report" the same change is reported and left.
	hosttest.Write(t, root, "etc/rdma/rdmad.d/10-drift.toml", "[drift]\naction = \"report\"\n")
	if out, err := ctl("reload"); err != nil {
		t.Fatalf("reload: %v\n%s", err, out)
	}
	otherManager(t, root, func(s *fixturekernel.State) { s.Netdevs["ens1f1np1"].DCB.PFC.Enabled = []int{} })
	eventually(t, "the change is reported", func() bool {
		out, err := ctl("-o", "json", "device", "show", "mlx5_1")
		var dev struct {
			Ports []struct {
				Drift map[string]any `json:"drift"`
			} `json:"ports"`
		}
		return err == nil && json.Unmarshal([]byte(out), &dev) == nil && len(dev.Ports) == 1 && dev.Ports[0].Drift["qos_pfc"] != nil
	})
	time.Sleep(300 * time.Millisecond) // a correction would have come by now
	if q := qosOf(t, root, "ens1f1np1"); len(q.pfc) != 0 {
		t.Errorf("under report, the PFC of ens1f1np1 was corrected to %v", q.pfc)
	}

	// The rule goes: what rdmad found at its first change comes back.
	if err := os.Remove(filepath.Join(root, "etc/rdma/rdmad.d/60-lossless.toml")); err != nil {
		t.Fatal(err)
	}
	if out, err := ctl("reload"); err != nil {
		t.Fatalf("reload: %v\n%s", err, out)
	}
	eventually(t, "removing the rule restores what was found", func() bool {
		a, b := qosOf(t, root, "ens1f0np0"), qosOf(t, root, "ens1f1np1")
		return same(a, boot) && same(b, boot)
	})
	n := readState(t, root).Netdevs["ens1f0np0"].DCB.ETS
	if n.TSA[0] != "vendor" || n.TxBW[0] != 100 {
		t.Errorf("ETS after the rule went: %+v, want mlx5's initial one back", n)
	}
}

// Without its state file, a fixture's DCB and ethtool actions fail, named,
// and reach no kernel.
func TestFixtureWithoutStateFailsNamed(t *testing.T) {
	root, env := losslessHost(t)
	if err := os.Remove(filepath.Join(root, fixturekernel.File)); err != nil {
		t.Fatal(err)
	}
	out, _, code := rdmad(t, env, "--root", root, "--once")
	if code != 1 || !strings.Contains(out, "mlx5_0/1  qos pfc") ||
		!strings.Contains(out, "get IEEE DCB of ens1f0np0: netlink is not used with --root "+root+" (it would act on this machine's kernel), and the fixture has no fixture/kernel.json") {
		t.Errorf("exit %d:\n%s", code, out)
	}
}
