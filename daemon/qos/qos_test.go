package qos_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/dcb"
	"github.com/rdmad/rdmad/daemon/dcb/dcbtest"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/daemon/qos"
	"github.com/rdmad/rdmad/daemon/reconcile"
)

func policy(t *testing.T, toml string) *config.Policy {
	t.Helper()
	p, err := config.Parse("rdmad.toml", []byte(toml))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

type env struct {
	root string
	h    *host.Host
	k    *dcbtest.Fake
	part *qos.Part
}

func newEnv(t *testing.T, fixture string) *env {
	root := hosttest.Copy(t, fixture)
	h := hosttest.NewKernel(root).Host()
	k := dcbtest.New()
	return &env{root: root, h: h, k: k, part: &qos.Part{Host: h, DCB: k.Kernel()}}
}

func (e *env) apply(t *testing.T, pol *config.Policy, name string) ([]reconcile.Action, *reconcile.DeviceRun) {
	t.Helper()
	d, err := e.h.Device(name)
	if err != nil {
		t.Fatal(err)
	}
	run := reconcile.RunDevice(context.Background(), e.part, pol, &d)
	return run.Actions, run
}

// observed is the kernel's value of the port's PFC and trust as the
// part recorded them.
func observed(t *testing.T, run *reconcile.DeviceRun) (qos.PFCValue, qos.TrustValue) {
	t.Helper()
	var pfc qos.PFCValue
	var trust qos.TrustValue
	for _, r := range run.Records {
		if v, ok := qos.PFC.Observed(r); ok {
			pfc = v
		}
		if v, ok := qos.Trust.Observed(r); ok {
			trust = v
		}
	}
	return pfc, trust
}

func statuses(acts []reconcile.Action) string {
	var s []string
	for _, a := range acts {
		s = append(s, a.Subject.String()+" "+string(a.Kind)+" "+a.Status.String())
	}
	return strings.Join(s, ", ")
}

func dscpTable(n dcbtest.Netdev) map[uint16]uint8 {
	m := map[uint16]uint8{}
	for _, a := range n.Apps {
		if a.Selector == dcb.SelDSCP {
			m[a.Protocol] = a.Priority
		}
	}
	return m
}

const mlx5Rule = `[[qos]]
device = "mlx5_*"
trust = "dscp"
pfc = [3]
dscp_prio = { 26 = 4 }
`

func TestApplyWritesReadsBackAndIsIdempotent(t *testing.T) {
	e := newEnv(t, "mlx5")
	e.k.Add("ens1f0np0")
	pol := policy(t, mlx5Rule)
	acts, d := e.apply(t, pol, "mlx5_0")
	if got, want := statuses(acts), "mlx5_0/1 qos pfc changed, mlx5_0/1 qos trust changed"; got != want {
		t.Fatalf("first apply: %s, want %s", got, want)
	}
	if acts[0].From != "[]" || acts[0].To != "[3]" || acts[0].Source != "rdmad.toml:1" || acts[1].From != "pcp" || acts[1].To != "dscp" {
		t.Errorf("actions %+v", acts)
	}
	n, _ := e.k.Netdev("ens1f0np0")
	if n.PFC.Enabled != 0x08 {
		t.Errorf("kernel PFC %#x", n.PFC.Enabled)
	}
	tab := dscpTable(n)
	if len(tab) != 64 || tab[26] != 4 || tab[46] != 5 || tab[0] != 0 || tab[63] != 7 {
		t.Errorf("kernel DSCP table %v", tab)
	}
	pfc, trust := observed(t, d)
	if trust.Trust != "dscp" || pfc.String() != "[3]" || len(trust.DSCP) != 64 || !containsApp(trust.DSCP, dcb.DSCP(26, 4)) {
		t.Errorf("observed PFC %v, trust %v", pfc, trust)
	}
	for _, r := range d.Records {
		if r.State != reconcile.Holds {
			t.Errorf("record %s: %s (%v)", r.Setting.Name, r.State, r.Why)
		}
	}
	writes := len(e.k.Writes())
	acts, _ = e.apply(t, pol, "mlx5_0")
	if got, want := statuses(acts), "mlx5_0/1 qos pfc unchanged, mlx5_0/1 qos trust unchanged"; got != want {
		t.Errorf("second apply: %s", got)
	}
	if len(e.k.Writes()) != writes {
		t.Errorf("second apply wrote: %q", e.k.Writes()[writes:])
	}
	for _, c := range e.k.Calls() {
		if strings.HasPrefix(c, "cmd ") {
			t.Errorf("unexpected DCB command %q", c)
		}
	}
}

func TestTrustFixesOnlyWrongEntriesAndPCPDeletesEveryDSCPEntry(t *testing.T) {
	e := newEnv(t, "mlx5")
	n := e.k.Add("ens1f0np0")
	full := qos.PlanTrust(nil, config.QoSDesired{Trust: config.TrustDSCP}).Add
	// Someone else's table: DSCP 26 -> 0 and a repeat of 10 -> 1, plus
	// an EtherType entry rdmad must leave alone.
	n.Apps = append([]dcb.App{dcb.DSCP(26, 0), dcb.DSCP(10, 1), {Selector: 1, Priority: 3, Protocol: 0x8915}}, full...)
	for i, a := range n.Apps {
		if a == dcb.DSCP(26, 3) {
			n.Apps = append(n.Apps[:i:i], n.Apps[i+1:]...)
			break
		}
	}
	pol := policy(t, "[[qos]]\ndevice = \"mlx5_0\"\ntrust = \"dscp\"\n")
	acts, _ := e.apply(t, pol, "mlx5_0")
	if got, want := statuses(acts), "mlx5_0/1 qos trust changed"; got != want {
		t.Fatalf("apply: %s", got)
	}
	// One entry per message: a refusal names its entry and leaves the
	// earlier ones in place.
	if w := e.k.Writes(); len(w) != 3 || w[0] != "del-app ens1f0np0 26:0" || w[1] != "del-app ens1f0np0 10:1" || w[2] != "set-app ens1f0np0 26:3" {
		t.Errorf("writes %q", w)
	}
	pol = policy(t, "[[qos]]\ndevice = \"mlx5_0\"\ntrust = \"pcp\"\n")
	acts, d := e.apply(t, pol, "mlx5_0")
	if got, want := statuses(acts), "mlx5_0/1 qos trust changed"; got != want {
		t.Fatalf("pcp: %s", got)
	}
	got, _ := e.k.Netdev("ens1f0np0")
	if len(got.Apps) != 1 || got.Apps[0].Selector != 1 {
		t.Errorf("pcp left %v", got.Apps)
	}
	if _, trust := observed(t, d); trust.Trust != "pcp" {
		t.Errorf("observed trust %v", trust)
	}
}

func TestDriverRefusalsAndDrops(t *testing.T) {
	e := newEnv(t, "mlx5")
	e.k.Add("ens1f0np0").RefusePFC = syscall.EINVAL
	pol := policy(t, mlx5Rule)
	acts, _ := e.apply(t, pol, "mlx5_0")
	if got, want := statuses(acts), "mlx5_0/1 qos pfc failed, mlx5_0/1 qos trust changed"; got != want {
		t.Fatalf("refused PFC: %s", got)
	}
	if msg := acts[0].Err.Error(); !strings.Contains(msg, "driver refused") || !strings.Contains(msg, "invalid argument") {
		t.Errorf("refusal: %v", acts[0].Err)
	}
	e.k.Update("ens1f0np0", func(n *dcbtest.Netdev) { n.RefusePFC, n.DropPFC = 0, true })
	acts, d := e.apply(t, pol, "mlx5_0")
	if acts[0].Status != reconcile.Failed || !strings.Contains(acts[0].Err.Error(), "wrote PFC [3] but the kernel kept []") {
		t.Errorf("dropped PFC: %v", acts[0])
	}
	if pfc, _ := observed(t, d); pfc.String() != "[]" || d.Records[0].State != reconcile.Refused {
		t.Errorf("observed PFC follows the kernel: %v (%s)", pfc, d.Records[0].State)
	}
	e.k.Update("ens1f0np0", func(n *dcbtest.Netdev) { n.DropPFC, n.DropApps, n.Apps = false, true, nil })
	acts, _ = e.apply(t, pol, "mlx5_0")
	if acts[1].Status != reconcile.Failed || !strings.Contains(acts[1].Err.Error(), "wrote QoS trust dscp but the kernel kept pcp") {
		t.Errorf("dropped APP entries: %v", acts[1])
	}
}

func TestNetdevWithoutDCBFailsClearlyAndOthersApply(t *testing.T) {
	e := newEnv(t, "mlx5")
	e.k.AddNoDCB("ens1f0np0")
	e.k.Add("ens1f1np1")
	pol := policy(t, mlx5Rule)
	acts, _ := e.apply(t, pol, "mlx5_0")
	if got, want := statuses(acts), "mlx5_0/1 qos pfc failed, mlx5_0/1 qos trust failed"; got != want {
		t.Fatalf("no DCB: %s", got)
	}
	if msg := acts[0].Err.Error(); !strings.Contains(msg, "ens1f0np0 does not support DCB: PFC, trust and the other DCB settings cannot be set") {
		t.Errorf("message: %s", msg)
	}
	acts, _ = e.apply(t, pol, "mlx5_1")
	if got, want := statuses(acts), "mlx5_1/1 qos pfc changed, mlx5_1/1 qos trust changed"; got != want {
		t.Errorf("other device: %s", got)
	}
}

func TestOwnedElsewhereIsNotWritten(t *testing.T) {
	e := newEnv(t, "mlx5")
	e.k.Add("ens1f0np0").DCBX = dcb.CapLLDManaged | dcb.CapVerIEEE
	pol := policy(t, mlx5Rule)
	acts, _ := e.apply(t, pol, "mlx5_0")
	if got, want := statuses(acts), "mlx5_0/1 qos pfc held, mlx5_0/1 qos trust held"; got != want || !strings.Contains(acts[0].Err.Error(), "firmware") {
		t.Fatalf("LLD managed: %s %v", got, acts)
	}
	if w := e.k.Writes(); len(w) != 0 {
		t.Errorf("wrote %q", w)
	}
	e.k.Update("ens1f0np0", func(n *dcbtest.Netdev) { n.DCBX = dcb.CapHost | dcb.CapVerIEEE })
	// lldpad writes its pid file as a zeroed 32-byte buffer (openlldp
	// lldpad.c: memset, sprintf "%u\n", write sizeof(buf)); a plain
	// "4242\n", as other daemons write, is recognised too.
	hosttest.Write(t, e.root, "run/lldpad.pid", "4242\n"+strings.Repeat("\x00", 27))
	hosttest.Write(t, e.root, "proc/4242/comm", "lldpad\n")
	hosttest.Write(t, e.root, "var/lib/lldpad/lldpad.conf", "lldp :\n{\n  ens1f0np0 :\n  {\n    adminStatus = 3;\n  };\n};\n")
	acts, _ = e.apply(t, pol, "mlx5_0")
	if got, want := statuses(acts), "mlx5_0/1 qos pfc held, mlx5_0/1 qos trust held"; got != want || !strings.Contains(acts[0].Err.Error(), "lldpad") {
		t.Fatalf("lldpad: %s %v", got, acts)
	}
	hosttest.Write(t, e.root, "run/lldpad.pid", "4242\n")
	acts, _ = e.apply(t, pol, "mlx5_0")
	if got, want := statuses(acts), "mlx5_0/1 qos pfc held, mlx5_0/1 qos trust held"; got != want || !strings.Contains(acts[0].Err.Error(), "lldpad") {
		t.Fatalf("lldpad, pid file without NULs: %s %v", got, acts)
	}
	if w := e.k.Writes(); len(w) != 0 {
		t.Errorf("wrote %q on a netdev lldpad manages", w)
	}
	// lldpad not running: rdmad writes.
	hosttest.Write(t, e.root, "proc/4242/comm", "bash\n")
	acts, _ = e.apply(t, pol, "mlx5_0")
	if got, want := statuses(acts), "mlx5_0/1 qos pfc changed, mlx5_0/1 qos trust changed"; got != want {
		t.Errorf("lldpad gone: %s", got)
	}
}

func TestVFsGetInfoAndInfiniBandNothing(t *testing.T) {
	e := newEnv(t, "mlx5")
	e.k.AddNoDCB("ens1f1np1") // a VF's netdev has no dcbnl
	vf := filepath.Join(e.root, "sys/class/infiniband/mlx5_1/device")
	if err := os.MkdirAll(filepath.Join(vf, "physfn", "net", "ens1f0np0"), 0o755); err != nil {
		t.Fatal(err)
	}
	pol := policy(t, mlx5Rule)
	acts, _ := e.apply(t, pol, "mlx5_1")
	if got, want := statuses(acts), "mlx5_1/1 qos pfc not-applicable, mlx5_1/1 qos trust not-applicable"; got != want || !strings.Contains(acts[0].Err.Error(), "QoS is set on the PF ens1f0np0") {
		t.Fatalf("VF: %s %v", got, acts)
	}
	if c := e.k.Calls(); len(c) != 0 {
		t.Errorf("VF netdev was asked: %q", c)
	}

	m := newEnv(t, "mlx4")
	acts, _ = m.apply(t, policy(t, "[[qos]]\ndevice = \"mlx4_0\"\nport = 1\npfc = [3]\n"), "mlx4_0")
	if got, want := statuses(acts), "mlx4_0/1 qos pfc not-applicable"; got != want || !strings.Contains(acts[0].Err.Error(), "infiniband") {
		t.Errorf("IB port: %s %v", got, acts)
	}
}

// A VF passed through to a virtual machine has no physfn link: its PCI ID
// says it is a VF (driver = "mlx5_core" selects it in the guest too), and
// [[qos]] on it is not applicable, not a failure of a netdev without DCB.
// The same netdev on a PF ID still fails: no DCB there is a real problem.
func TestVFInAVirtualMachineIsNotApplicable(t *testing.T) {
	e := newEnv(t, "mlx5")
	e.k.AddNoDCB("ens1f0np0")
	hosttest.Write(t, e.root, "sys/class/infiniband/mlx5_0/device/device", "0x101e\n")
	pol := policy(t, "[[qos]]\ndriver = \"mlx5_core\"\npfc = [3]\n")
	acts, _ := e.apply(t, pol, "mlx5_0")
	if got, want := statuses(acts), "mlx5_0/1 qos pfc not-applicable"; got != want || !strings.Contains(acts[0].Err.Error(), "virtual function") {
		t.Fatalf("a VF's PCI ID: %s %v", got, acts)
	}
	if c := e.k.Calls(); len(c) != 0 {
		t.Errorf("the VF's netdev was asked: %q", c)
	}
	hosttest.Write(t, e.root, "sys/class/infiniband/mlx5_0/device/device", "0x1017\n") // ConnectX-5 PF
	acts, _ = e.apply(t, pol, "mlx5_0")
	if got, want := statuses(acts), "mlx5_0/1 qos pfc failed"; got != want {
		t.Errorf("a PF's PCI ID without DCB: %s", got)
	}
}

// The first [[qos]] example of the shipped rdmad.toml (driver =
// "mlx5_core": trust and PFC) on an SR-IOV host: the PF is configured, its
// VF (which the same selector picks) is not applicable, and nothing fails.
func TestShippedQoSExampleOnAnSRIOVHost(t *testing.T) {
	data, err := os.ReadFile("../../etc/rdma/rdmad.toml")
	if err != nil {
		t.Fatal(err)
	}
	var example []string
	in := false
	for _, line := range strings.Split(string(data), "\n") {
		switch {
		case line == "#[[qos]]":
			in = true
		case in && (line == "#" || !strings.HasPrefix(line, "#")):
			in = false
		}
		if !in && len(example) > 0 {
			break
		}
		if in {
			example = append(example, strings.TrimPrefix(line, "#"))
		}
	}
	if len(example) < 2 || !strings.Contains(strings.Join(example, "\n"), `driver = "mlx5_core"`) {
		t.Fatalf("the shipped [[qos]] example does not select driver = \"mlx5_core\": %q", example)
	}
	pol := policy(t, strings.Join(example, "\n"))
	e := newEnv(t, "mlx5")
	e.k.Add("ens1f0np0")
	e.k.AddNoDCB("ens1f1np1")
	if err := os.MkdirAll(filepath.Join(e.root, "sys/class/infiniband/mlx5_1/device/physfn/net/ens1f0np0"), 0o755); err != nil {
		t.Fatal(err)
	}
	acts, _ := e.apply(t, pol, "mlx5_0")
	if got, want := statuses(acts), "mlx5_0/1 qos pfc changed, mlx5_0/1 qos trust changed"; got != want {
		t.Errorf("PF: %s", got)
	}
	acts, _ = e.apply(t, pol, "mlx5_1")
	if got, want := statuses(acts), "mlx5_1/1 qos pfc not-applicable, mlx5_1/1 qos trust not-applicable"; got != want {
		t.Errorf("VF: %s", got)
	}
}

func TestMLX4TrustRefusedPFCApplied(t *testing.T) {
	e := newEnv(t, "mlx4")
	e.k.Add("ens2")
	acts, _ := e.apply(t, policy(t, "[[qos]]\ndevice = \"mlx4_0\"\ntrust = \"dscp\"\npfc = [3]\n"), "mlx4_0")
	if got, want := statuses(acts), "mlx4_0/1 qos pfc not-applicable, mlx4_0/1 qos trust not-applicable, mlx4_0/2 qos pfc changed, mlx4_0/2 qos trust failed"; got != want {
		t.Fatalf("mlx4: %s", got)
	}
	if msg := acts[3].Err.Error(); !strings.Contains(msg, "mlx4 (ConnectX-3) has no DCB APP table support") || !strings.Contains(msg, "rdmad.toml:1") {
		t.Errorf("message: %s", msg)
	}
	if w := e.k.Writes(); len(w) != 1 || w[0] != "set-pfc ens2 0x08" {
		t.Errorf("writes %q", w)
	}
}

func TestUndoPutsBackPFCAndTheDSCPTable(t *testing.T) {
	e := newEnv(t, "mlx5")
	n := e.k.Add("ens1f0np0")
	n.PFC.Enabled = 0x10
	n.Apps = []dcb.App{dcb.DSCP(46, 5), {Selector: 1, Priority: 3, Protocol: 0x8915}}
	before, _ := e.k.Netdev("ens1f0np0")
	acts, _ := e.apply(t, policy(t, mlx5Rule), "mlx5_0")
	if got, want := statuses(acts), "mlx5_0/1 qos pfc changed, mlx5_0/1 qos trust changed"; got != want {
		t.Fatalf("apply: %s", got)
	}
	for i := len(acts) - 1; i >= 0; i-- {
		if err := e.part.Undo(context.Background(), acts[i]); err != nil {
			t.Fatalf("undo %s: %v", acts[i].Kind, err)
		}
	}
	after, _ := e.k.Netdev("ens1f0np0")
	if after.PFC.Enabled != before.PFC.Enabled {
		t.Errorf("PFC after undo %#x, want %#x", after.PFC.Enabled, before.PFC.Enabled)
	}
	if len(after.Apps) != 2 || !containsApp(after.Apps, dcb.DSCP(46, 5)) || !containsApp(after.Apps, before.Apps[1]) {
		t.Errorf("APP table after undo %v, want %v", after.Apps, before.Apps)
	}
	// An action without its old value is refused, not guessed.
	if err := e.part.Undo(context.Background(), reconcile.Action{Subject: acts[0].Subject, Kind: qos.PFC.Kind(), Setting: qos.PFC.Setting(), Status: reconcile.Changed}); err == nil {
		t.Error("undo without Old succeeded")
	}
}

func containsApp(apps []dcb.App, a dcb.App) bool {
	for _, x := range apps {
		if x == a {
			return true
		}
	}
	return false
}

// mlx4_en: one PCI function, one netdev per port; dev_port names the port.
func TestPortNetdevByDevPort(t *testing.T) {
	e := newEnv(t, "mlx4")
	net := filepath.Join(e.root, "sys/class/infiniband/mlx4_0/device/net")
	for name, devPort := range map[string]string{"ens2": "1", "ens2d1": "0"} {
		if err := os.MkdirAll(filepath.Join(net, name), 0o755); err != nil {
			t.Fatal(err)
		}
		hosttest.Write(t, e.root, "sys/class/infiniband/mlx4_0/device/net/"+name+"/dev_port", devPort+"\n")
	}
	e.k.Add("ens2")
	e.k.Add("ens2d1")
	acts, _ := e.apply(t, policy(t, "[[qos]]\ndevice = \"mlx4_0\"\nport = 2\npfc = [3]\n"), "mlx4_0")
	if got, want := statuses(acts), "mlx4_0/2 qos pfc changed"; got != want {
		t.Fatalf("apply: %s", got)
	}
	if w := e.k.Writes(); len(w) != 1 || w[0] != "set-pfc ens2 0x08" {
		t.Errorf("writes %q (port 2 is dev_port 1: ens2)", w)
	}
}
