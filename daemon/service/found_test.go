package service_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/rdmad/rdmad/daemon/compose"
	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/dcb"
	"github.com/rdmad/rdmad/daemon/dcb/dcbtest"
	"github.com/rdmad/rdmad/daemon/doctor"
	"github.com/rdmad/rdmad/daemon/ethtool"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/daemon/links/linkstest"
	"github.com/rdmad/rdmad/daemon/memlock"
	"github.com/rdmad/rdmad/daemon/netns/netnstest"
	"github.com/rdmad/rdmad/daemon/reconcile"
	"github.com/rdmad/rdmad/daemon/service"
)

// fleetHost is one host of a fleet: its kernel (the fixture tree, a DCB
// kernel, RDMA netlink for links and the netns mode) outlives the rdmad
// that runs on it, as across a restart.
type fleetHost struct {
	root string
	dcb  *dcbtest.Fake
	ns   *netnstest.Kernel
}

func newFleetHost(t *testing.T) *fleetHost {
	f := &fleetHost{root: hosttest.Copy(t, "mlx5"), dcb: dcbtest.New(), ns: netnstest.New(config.NetnsShared)}
	f.dcb.Add("ens1f0np0")
	f.dcb.Add("ens1f1np1")
	hosttest.Write(t, f.root, reconcile.BootIDFile, "4b0c2a49-3d1e-4c5f-9a77-d1e1b2c3d4e5\n")
	hosttest.Write(t, f.root, mainFile, "[modules]\nenable = false\n")
	h := hosttest.NewKernel(f.root).Host()
	if err := linkstest.AddNetdev(h, "eth1"); err != nil {
		t.Fatal(err)
	}
	return f
}

// rdmad starts the daemon's service on the host and runs its first pass.
func (f *fleetHost) rdmad(t *testing.T) *service.Service {
	t.Helper()
	h := hosttest.NewKernel(f.root).Host()
	kernel := compose.Kernel{Modules: &hosttest.Modprobe{}, Links: &linkstest.Netlink{Host: h}, Netns: f.ns, DCB: f.dcb.Kernel()}
	svc, err := service.New(service.Options{Host: h, Parts: compose.Parts(kernel), Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	svc.ReconcileNow(context.Background())
	return svc
}

// What the host holds of every setting the fleet's drop-in declares.
type holds struct {
	mode, tos string
	pfc       uint8
	apps      int
	link      bool
	netns     config.NetnsMode
	limits    bool
}

func (f *fleetHost) holds(t *testing.T) holds {
	t.Helper()
	h := host.New(f.root)
	n, _ := f.dcb.Netdev("ens1f0np0")
	m, _ := f.ns.Mode()
	_, err := os.Stat(filepath.Join(f.root, memlock.LimitsFile))
	return holds{
		mode: hosttest.Read(t, f.root, host.ConfigfsPortPath("mlx5_0", 1, "default_roce_mode")),
		tos:  hosttest.Read(t, f.root, host.ConfigfsPortPath("mlx5_0", 1, "default_roce_tos")),
		pfc:  n.PFC.Enabled, apps: len(n.Apps), link: h.Exists(host.ClassInfiniband + "/rxe0"), netns: m, limits: err == nil,
	}
}

// The fleet's drop-in: one of each kind rdmad puts back.
const fleetDropIn = "etc/rdma/rdmad.d/50-fleet.toml"
const fleetPolicy = `[memlock]
group = "rdma"

[netns]
mode = "exclusive"

[[roce]]
device = "mlx5_0"
mode = "v1"
tos = 106

[[qos]]
device = "mlx5_0"
port = 1
trust = "dscp"
pfc = [3]

[[link]]
name = "rxe0"
type = "rxe"
netdev = "eth1"
`

// A fleet rolls back: the drop-in that declared RoCE mode and TOS, PFC and
// trust, a soft link, the netns mode and memlock goes. rdmad puts every
// value back as it found it before its first change this boot, so the
// host looks as a boot without the drop-in would leave it; also when the
// drop-in goes while rdmad is stopped.
func TestFleetRollbackRestoresWhatWasFound(t *testing.T) {
	for _, restart := range []bool{false, true} {
		name := "reload"
		if restart {
			name = "restart"
		}
		t.Run(name, func(t *testing.T) {
			f := newFleetHost(t)
			before := f.rdmad(t)
			found := f.holds(t)
			hosttest.Write(t, f.root, fleetDropIn, fleetPolicy)
			if err := before.Reload(); err != nil {
				t.Fatal(err)
			}
			before.ReconcileNow(context.Background())
			applied := f.holds(t)
			if applied == found || applied.tos != "106" || applied.pfc != 0x08 || !applied.link || applied.netns != config.NetnsExclusive || !applied.limits {
				t.Fatalf("the drop-in was not applied: %+v (found %+v)", applied, found)
			}
			if err := os.Remove(filepath.Join(f.root, fleetDropIn)); err != nil {
				t.Fatal(err)
			}
			svc := before
			if restart {
				svc = f.rdmad(t)
			} else if err := svc.Reload(); err != nil {
				t.Fatal(err)
			}
			svc.ReconcileNow(context.Background())
			if got := f.holds(t); got != found {
				t.Errorf("after the rollback the host holds %+v, want what rdmad found %+v", got, found)
			}
			for _, fs := range compose.Diagnose(svc) {
				if fs.ID == "undo-partial" {
					t.Errorf("undo-partial: %s", fs.Finding)
				}
			}
			if left := reconcile.OpenFound(host.New(f.root), slog.New(slog.DiscardHandler)).Entries(); len(left) != 0 {
				t.Errorf("found.json keeps %d entries: %+v", len(left), left)
			}
		})
	}
}

// The netns mode cannot switch back while other network namespaces exist
// (EBUSY): the rest is put back, and doctor warns undo-partial naming the
// mode found; rdmad does not try again.
func TestRollbackThatCannotBeUndoneIsReported(t *testing.T) {
	f := newFleetHost(t)
	svc := f.rdmad(t)
	hosttest.Write(t, f.root, fleetDropIn, fleetPolicy)
	if err := svc.Reload(); err != nil {
		t.Fatal(err)
	}
	svc.ReconcileNow(context.Background())
	f.ns.Refuse(syscall.EBUSY)
	if err := os.Remove(filepath.Join(f.root, fleetDropIn)); err != nil {
		t.Fatal(err)
	}
	if err := svc.Reload(); err != nil {
		t.Fatal(err)
	}
	svc.ReconcileNow(context.Background())
	if got := f.holds(t); got.tos != "0" || got.link || got.netns != config.NetnsExclusive {
		t.Errorf("host holds %+v", got)
	}
	var partial []doctor.Finding
	for _, fs := range compose.Diagnose(svc) {
		if fs.ID == "undo-partial" {
			partial = append(partial, fs)
		}
	}
	if len(partial) != 1 || partial[0].Severity != doctor.SeverityWarn || !strings.Contains(partial[0].Finding, "netns_mode was not put back to shared") ||
		!strings.Contains(partial[0].Finding, "device or resource busy") {
		t.Errorf("undo-partial findings: %+v", partial)
	}
	f.ns.Refuse(nil)
	svc.ReconcileNow(context.Background())
	if m, _ := f.ns.Mode(); m != config.NetnsExclusive {
		t.Errorf("retried: netns %s", m)
	}
}

// rdmactl ... unset (Withdraw) takes a declaration made over D-Bus, and
// with it the value: what the host held before rdmad first changed it
// goes back, for RoCE mode and TOS, PFC and trust, and the netns mode,
// whether the declaration was runtime or persisted in rdmad's drop-in.
func TestUnsetPutsBackWhatWasFound(t *testing.T) {
	for _, persist := range []bool{false, true} {
		t.Run(map[bool]string{false: "runtime", true: "persisted"}[persist], func(t *testing.T) {
			f := newFleetHost(t)
			svc := f.rdmad(t)
			found := f.holds(t)
			ctx := context.Background()
			if err := svc.SetRoCE(ctx, service.RoCEChange{Device: "mlx5_0", Port: 1, Mode: config.RoCEv1, TOS: 106, Persist: persist}); err != nil {
				t.Fatal(err)
			}
			if err := svc.SetQoS(ctx, service.QoSChange{Device: "mlx5_0", Port: 1, Trust: config.TrustDSCP, PFC: []uint8{3}, HasPFC: true, Persist: persist}); err != nil {
				t.Fatal(err)
			}
			if err := svc.SetNetnsMode(ctx, config.NetnsExclusive, persist); err != nil {
				t.Fatal(err)
			}
			if got := f.holds(t); got.tos != "106" || got.pfc != 0x08 || got.apps == 0 || got.netns != config.NetnsExclusive {
				t.Fatalf("the calls were not applied: %+v", got)
			}
			for _, w := range []service.Withdrawal{
				{Kind: service.WithdrawRoCE, Name: "mlx5_0", Port: 1, Persist: persist},
				{Kind: service.WithdrawQoS, Name: "mlx5_0", Port: 1, Persist: persist},
				{Kind: service.WithdrawNetns, Persist: persist},
			} {
				if err := svc.Withdraw(ctx, w); err != nil {
					t.Fatalf("withdraw %s: %v", w.Kind, err)
				}
			}
			if got := f.holds(t); got != found {
				t.Errorf("after unset the host holds %+v, want what rdmad found %+v", got, found)
			}
		})
	}
}

// The lossless settings of [[qos]] go back as found when their rule goes,
// each through the part's undo; what mlx5 cannot give back (the
// buffers' ownership stays with the driver until it reloads) is doctor's
// undo-partial, and the rest is put back all the same.
func TestLosslessRollbackRestoresWhatWasFound(t *testing.T) {
	svc, k, e, root := losslessSvc(t)
	type lossless struct {
		pfc   dcb.PFC
		ets   dcb.ETS
		pause ethtool.Pause
	}
	read := func() lossless {
		n, _ := k.Netdev("ens1f0np0")
		p, _ := e.Netdev("ens1f0np0")
		return lossless{pfc: n.PFC, ets: *n.ETS, pause: p.Pause}
	}
	found := read()
	hosttest.Write(t, root, fleetDropIn, `[[qos]]
device = "mlx5_0"
port = 1
pfc = [3]
cable_length = 20
pause = false
prio_tc = [0,0,0,1,0,0,0,0]
tc_bandwidth = [50,50,0,0,0,0,0,0]
`)
	if err := svc.Reload(); err != nil {
		t.Fatal(err)
	}
	svc.ReconcileNow(context.Background())
	if got := read(); got.pfc.Enabled != 0x08 || got.pfc.Delay != 20 || got.pause.RX || got.ets.PrioTC[3] != 1 || got.ets.TxBW[0] != 50 {
		t.Fatalf("the rule was not applied: %+v (found %+v)", got, found)
	}
	if err := os.Remove(filepath.Join(root, fleetDropIn)); err != nil {
		t.Fatal(err)
	}
	if err := svc.Reload(); err != nil {
		t.Fatal(err)
	}
	svc.ReconcileNow(context.Background())
	if got := read(); got != found {
		t.Errorf("after the rollback ens1f0np0 holds %+v, want what rdmad found %+v", got, found)
	}
	for _, fs := range compose.Diagnose(svc) {
		if fs.ID == "undo-partial" {
			t.Errorf("undo-partial: %s", fs.Finding)
		}
	}

	// mlx5's buffers: the sizes go back, the ownership does not.
	hosttest.Write(t, root, fleetDropIn, "[[qos]]\ndevice = \"mlx5_0\"\nport = 1\nbuffer_size = [\"128K\", 262144, 0, 0, 0, 0, 0, 0]\n")
	if err := svc.Reload(); err != nil {
		t.Fatal(err)
	}
	svc.ReconcileNow(context.Background())
	sizes := func() [8]uint32 { n, _ := k.Netdev("ens1f0np0"); return n.Buffer.Size }
	foundSizes := [8]uint32{262016}
	if got := sizes(); got == foundSizes {
		t.Fatalf("buffer_size was not applied: %v", got)
	}
	if err := os.Remove(filepath.Join(root, fleetDropIn)); err != nil {
		t.Fatal(err)
	}
	if err := svc.Reload(); err != nil {
		t.Fatal(err)
	}
	svc.ReconcileNow(context.Background())
	if got := sizes(); got != foundSizes {
		t.Errorf("buffer sizes after the rollback %v, want %v", got, foundSizes)
	}
	var partial []string
	for _, fs := range compose.Diagnose(svc) {
		if fs.ID == "undo-partial" {
			partial = append(partial, fs.Finding)
		}
	}
	if len(partial) != 1 || !strings.Contains(partial[0], "qos_buffer_size") || !strings.Contains(partial[0], "buffer ownership") {
		t.Errorf("undo-partial findings %q, want one for the buffers' ownership", partial)
	}
}

// A found.json without rdmad's header (an edit dropped its first line) is
// not rdmad's: doctor warns undo-partial naming the file and what to do,
// until the file is rdmad's again or gone and a pass has saved a new one.
func TestFoundWithoutHeaderIsAFinding(t *testing.T) {
	f := newFleetHost(t)
	hosttest.Write(t, f.root, reconcile.FoundFile, `{"boot_id": "4b0c2a49-3d1e-4c5f-9a77-d1e1b2c3d4e5", "found": []}`+"\n")
	svc := f.rdmad(t)
	undo := func() []doctor.Finding {
		var out []doctor.Finding
		for _, fs := range compose.Diagnose(svc) {
			if fs.ID == "undo-partial" {
				out = append(out, fs)
			}
		}
		return out
	}
	name := filepath.Join(f.root, reconcile.FoundFile)
	got := undo()
	if len(got) != 1 || got[0].Severity != doctor.SeverityWarn || got[0].Subject != reconcile.HostSubject() ||
		!strings.Contains(got[0].Finding, name) || !strings.Contains(got[0].Finding, "no header") ||
		!strings.Contains(got[0].Fix, "header") || !strings.Contains(got[0].Fix, "move") {
		t.Fatalf("undo-partial findings: %+v", got)
	}
	if err := os.Remove(name); err != nil {
		t.Fatal(err)
	}
	svc.ReconcileNow(context.Background())
	if got := undo(); len(got) != 0 {
		t.Errorf("after the file went: %+v", got)
	}
	if b, err := os.ReadFile(name); err != nil || !strings.HasPrefix(string(b), reconcile.FoundHeader) {
		t.Errorf("no new found.json: %v", err)
	}
}

// A found.json entry is put back only when its value is one a
// configuration could declare for its setting, and a file's only when its
// lines are what its part writes: a root-owned found.json edited to hold
// TOS 999, -1 or 4294967302, an empty RoCE mode, a limits.d file giving
// everyone unlimited memlock or a modprobe.d "install" command writes
// none of them when the declaration goes; each is logged and is doctor's
// undo-partial, and the entries that pass are put back.
func TestFoundValuesAreCheckedBeforeTheyArePutBack(t *testing.T) {
	for _, tos := range []string{"999", "-1", "4294967302"} {
		t.Run("tos "+tos, func(t *testing.T) {
			f := newFleetHost(t)
			svc := f.rdmad(t)
			found := f.holds(t)
			hosttest.Write(t, f.root, fleetDropIn, fleetPolicy)
			if err := svc.Reload(); err != nil {
				t.Fatal(err)
			}
			svc.ReconcileNow(context.Background())
			hostile := map[string]string{
				"roce_tos":       tos,
				"roce_mode":      `{"Mode": ""}`,
				"memlock_limits": fileValue(memlock.Header + "* hard memlock unlimited\n"),
				"netns_modprobe": fileValue("# Managed by rdmad from [netns] in rdmad.toml; changes here are overwritten.\ninstall ib_core /bin/sh -c 'touch /tmp/owned'\noptions ib_core netns_mode=1\n"),
			}
			// Edited while rdmad is stopped; the drop-in goes too.
			editFound(t, f.root, hostile)
			if err := os.Remove(filepath.Join(f.root, fleetDropIn)); err != nil {
				t.Fatal(err)
			}
			svc = f.rdmad(t)
			got := f.holds(t)
			if got.tos != "106" || got.mode != "IB/RoCE v1" {
				t.Errorf("TOS %s and mode %q after the rollback, want them left at 106 and IB/RoCE v1", got.tos, got.mode)
			}
			if got.pfc != found.pfc || got.link || got.netns != found.netns {
				t.Errorf("the entries that pass were not put back: %+v, want %+v", got, found)
			}
			for _, rel := range []string{memlock.LimitsFile, "etc/modprobe.d/rdmad-netns.conf"} {
				b, err := os.ReadFile(filepath.Join(f.root, rel))
				if err == nil && (strings.Contains(string(b), "* hard") || strings.Contains(string(b), "install")) {
					t.Errorf("%s written from found.json:\n%s", rel, b)
				}
			}
			partial := map[string]string{}
			for _, fs := range compose.Diagnose(svc) {
				if fs.ID == "undo-partial" {
					for setting := range hostile {
						if strings.Contains(fs.Finding, " "+setting+" ") {
							partial[setting] = fs.Finding
						}
					}
				}
			}
			for setting := range hostile {
				if !strings.Contains(partial[setting], "no configuration could declare") {
					t.Errorf("no undo-partial for found.json's %s: %q", setting, partial[setting])
				}
			}
		})
	}
}

// fileValue is a file's content as found.json holds a file setting's
// value (host.FileSnapshot).
func fileValue(content string) string {
	b, err := json.Marshal(host.FileSnapshot{Exists: true, Data: []byte(content)})
	if err != nil {
		panic(err)
	}
	return string(b)
}

// editFound replaces the values of found.json's entries of the settings
// named, keeping rdmad's header (the file stays root's, 0600).
func editFound(t *testing.T, root string, values map[string]string) {
	t.Helper()
	name := filepath.Join(root, reconcile.FoundFile)
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	var ff struct {
		BootID     string            `json:"boot_id"`
		Found      []json.RawMessage `json:"found"`
		Unrestored []json.RawMessage `json:"unrestored,omitempty"`
	}
	if err := json.Unmarshal(b[len(reconcile.FoundHeader):], &ff); err != nil {
		t.Fatal(err)
	}
	edited := map[string]bool{}
	for i, raw := range ff.Found {
		var e map[string]json.RawMessage
		if err := json.Unmarshal(raw, &e); err != nil {
			t.Fatal(err)
		}
		var setting string
		_ = json.Unmarshal(e["setting"], &setting)
		if v, ok := values[setting]; ok {
			e["value"] = json.RawMessage(v)
			edited[setting] = true
		}
		if ff.Found[i], err = json.Marshal(e); err != nil {
			t.Fatal(err)
		}
	}
	for s := range values {
		if !edited[s] {
			t.Fatalf("found.json has no entry of %s to edit", s)
		}
	}
	out, err := json.Marshal(ff)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, append([]byte(reconcile.FoundHeader), out...), 0o600); err != nil {
		t.Fatal(err)
	}
}
