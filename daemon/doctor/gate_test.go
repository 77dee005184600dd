package doctor_test

import (
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rdmad/rdmad/daemon/bus"
	"github.com/rdmad/rdmad/daemon/compose"
	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/doctor"
	"github.com/rdmad/rdmad/daemon/health"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/daemon/reconcile"
	"github.com/rdmad/rdmad/dbusapi"
)

// What the site declares: expectations, ignored findings, and what a
// health gate judges beyond the configuration.

// failing lists the fail findings as "id subject".
func failing(fs []doctor.Finding) []string {
	var out []string
	for _, f := range fs {
		if f.Severity == doctor.SeverityFail {
			out = append(out, f.ID+" "+f.Subject.String())
		}
	}
	return out
}

// A healthy ConnectX-5 host whose second port is uncabled: a warning, not
// a failure, without an expectation; nothing at all with state = "down";
// a failure with state = "up".
func TestUncabledSecondPort(t *testing.T) {
	root := hosttest.Copy(t, "mlx5")
	setPort(t, root, "mlx5_1", 1, map[string]string{"state": "1: DOWN", "phys_state": "3: Disabled"})
	hosttest.Write(t, root, "sys/class/net/ens1f1np1/carrier", "0\n")
	fs := diagnose(t, root)
	mustFix(t, fs, "port-no-carrier", "mlx5_1/1", doctor.SeverityWarn, "no carrier", "ethtool ens1f1np1")

	down := parsePolicy(t, "[[expect]]\ndevice = \"mlx5_1\"\nport = 1\nstate = \"down\"\n")
	fs = diagnose(t, root, withPolicy(down))
	f := mustFix(t, fs, "port-expected-down", "mlx5_1/1", doctor.SeverityOK, `unused by design, [[expect]] state = "down" at /etc/rdma/rdmad.toml:1`, "")
	for _, g := range fs {
		if g.Subject.String() == "mlx5_1/1" && g.ID != f.ID {
			t.Errorf("a port expected down has another finding: %s %s %q", g.Severity, g.ID, g.Finding)
		}
	}

	up := parsePolicy(t, "[[expect]]\ndriver = \"mlx5_core\"\nstate = \"up\"\n")
	fs = diagnose(t, root, withPolicy(up))
	mustFix(t, fs, "port-no-carrier", "mlx5_1/1", doctor.SeverityFail, "[[expect]] at /etc/rdma/rdmad.toml:1 says up", "ethtool")
	mustFix(t, fs, "port-active", "mlx5_0/1", doctor.SeverityOK, "as expected (up, [[expect]] at /etc/rdma/rdmad.toml:1)", "")
}

// A port trained below the declared rate or width fails naming both.
func TestExpectedRateAndWidth(t *testing.T) {
	root := hosttest.Copy(t, "mlx5")
	pol := parsePolicy(t, "[[expect]]\ndriver = \"mlx5_core\"\nstate = \"up\"\nrate = 100\nwidth = \"4X\"\n\n[[expect]]\ndevice = \"mlx5_1\"\nrate = 200\n")
	setPort(t, root, "mlx5_0", 1, map[string]string{"rate": "50 Gb/sec (2X HDR)"})
	fs := diagnose(t, root, withPolicy(pol))
	mustFix(t, fs, "port-rate-low", "mlx5_0/1", doctor.SeverityFail, "runs at 50 Gb/s (50 Gb/sec (2X HDR)), below the 100 Gb/s [[expect]] at /etc/rdma/rdmad.toml:1 declares", "ibstat mlx5_0 1")
	mustFix(t, fs, "port-width-low", "mlx5_0/1", doctor.SeverityFail, "trained at 2X", "mlxlink -d mlx5_0 -p 1")
	mustFix(t, fs, "port-rate-low", "mlx5_1/1", doctor.SeverityFail, "below the 200 Gb/s [[expect]] at /etc/rdma/rdmad.toml:7", "")
	if f := find(fs, "port-active", "mlx5_0/1"); f != nil {
		t.Errorf("a port below its expectation is also active: %+v", f)
	}
	setPort(t, root, "mlx5_0", 1, map[string]string{"rate": "200 Gb/sec (4X HDR)"})
	mustFix(t, diagnose(t, root, withPolicy(pol)), "port-active", "mlx5_0/1", doctor.SeverityOK, "as expected (up, at least 100 Gb/s, at least 4X", "")
}

// The PCIe link: below what the device can do is a warning; below what
// [[expect]] pcie declares a failure; virtual functions are not judged.
func TestPCIeLink(t *testing.T) {
	root := hosttest.Copy(t, "mlx5")
	fs := diagnose(t, root)
	mustFix(t, fs, "pcie-link", "mlx5_0", doctor.SeverityOK, "mlx5_0 (0000:3b:00.0): PCIe link 8.0 GT/s x16, the most the device can do", "")
	pci := "sys/devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0/"
	hosttest.Write(t, root, pci+"current_link_width", "8\n")
	fs = diagnose(t, root)
	mustFix(t, fs, "pcie-link-degraded", "mlx5_0", doctor.SeverityWarn, "PCIe link 8.0 GT/s x8, below the 8.0 GT/s x16 the device can do", "lspci -vv -s 0000:3b:00.0")
	for _, f := range failing(fs) {
		if strings.HasPrefix(f, "pcie") {
			t.Errorf("a degraded link without an expectation fails: %v", f)
		}
	}
	// Declared: x8 is what this site's slots give; x4 would not do.
	pol := parsePolicy(t, "[[expect]]\npci = \"0000:3b:00.*\"\npcie = \"8.0 GT/s x8\"\n")
	mustFix(t, diagnose(t, root, withPolicy(pol)), "pcie-link", "mlx5_0", doctor.SeverityOK, "as expected (at least 8.0 GT/s x8", "")
	hosttest.Write(t, root, pci+"current_link_speed", "2.5 GT/s PCIe\n")
	mustFix(t, diagnose(t, root, withPolicy(pol)), "pcie-link-degraded", "mlx5_0", doctor.SeverityFail, "PCIe link 2.5 GT/s x8, below the 8.0 GT/s x8 [[expect]] at /etc/rdma/rdmad.toml:1 declares", "")
	// A virtual function's link is its physical function's.
	hosttest.Write(t, root, pci+"physfn/uevent", "")
	if f := find(diagnose(t, root), "pcie-link-degraded", "mlx5_0"); f != nil {
		t.Errorf("a VF's link judged: %+v", f)
	}
}

// A rule that names one device that is not here fails expect-missing; a
// glob or driver rule without count, and a rule that only declares a port
// unused, match nothing by design: ok expect-unmatched, so one fleet-wide
// policy raises no standing finding.
func TestExpectRulesThatMatchNothing(t *testing.T) {
	root := hosttest.Copy(t, "mlx5")
	pol := parsePolicy(t, `[[expect]]
device = "mlx5_9"
state = "up"

[[expect]]
driver = "mlx4_core"
state = "up"

[[expect]]
device = "mlx5_0"
port = 2
state = "down"

[[expect]]
device = "mlx5_*"
rate = 25

[[expect]]
device = "mlx5_0"
port = 2
rate = 25
`)
	fs := diagnose(t, root, withPolicy(pol))
	var got []string
	for _, f := range fs {
		if strings.HasPrefix(f.ID, "expect-") {
			got = append(got, string(f.Severity)+" "+f.ID+" "+f.Subject.String()+": "+f.Finding)
		}
	}
	want := []string{
		`fail expect-missing mlx5_9: the [[expect]] rule at /etc/rdma/rdmad.toml:1 (device="mlx5_9") expects the device it names (up), which is not here; rdmad has not seen it since it started`,
		`ok expect-unmatched host: the [[expect]] rule at /etc/rdma/rdmad.toml:5 (driver="mlx4_core") matches nothing on this host; it requires no device: a glob or driver rule without count`,
		`ok expect-unmatched host: the [[expect]] rule at /etc/rdma/rdmad.toml:9 (device="mlx5_0" port 2) matches nothing on this host; it requires no device: it only declares a port unused`,
		`fail expect-missing mlx5_0: the [[expect]] rule at /etc/rdma/rdmad.toml:18 (device="mlx5_0" port 2) expects port 2 (at least 25 Gb/s), which mlx5_0 does not have`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("expect findings:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	mustFix(t, fs, "expect-missing", "mlx5_9", doctor.SeverityFail, "", "journalctl -k")
	pol = parsePolicy(t, "[[expect]]\ndriver = \"mlx5_core\"\nstate = \"up\"\n\n[[expect]]\ndriver = \"mlx5_core\"\ncount = 2\n")
	mustFix(t, diagnose(t, root, withPolicy(pol)), "expect-rules-matched", "host", doctor.SeverityOK, "every device the [[expect]] rules (2) require is here", "")
}

// A host that lost an adapter fails the gate: the rule that names it by
// PCI address, and a count no longer met, each fail expect-missing, a
// hardware finding (not in the policy scope), naming what rdmad saw go:
// its name, PCI address and driver.
func TestLostAdapterFailsExpectMissing(t *testing.T) {
	root := hosttest.Copy(t, "mlx5")
	pol := parsePolicy(t, `[[expect]]
pci = "0000:3b:00.1"
state = "up"

[[expect]]
driver = "mlx5_core"
port = 1
count = 2
`)
	h := host.New(root)
	p := compose.Parts(compose.Kernel{Modules: &hosttest.Modprobe{Root: root}, Netns: noNetlink{}})(h, true, func() {})
	r := reconcile.New(reconcile.Options{Host: h, Log: slog.New(slog.DiscardHandler), Early: p.Early, HostParts: p.Host, DeviceParts: p.Device, Detail: host.DetailFull})
	r.Pass(context.Background(), pol, reconcile.Scope{Full: true})
	st := r.Snapshot()
	fs := diagnose(t, root, withPolicy(pol), func(in *doctor.Input) { in.State, in.Checks = &st, r.Checkers() })
	if f := missing(fs); len(f) != 0 {
		t.Fatalf("both adapters here: %v", f)
	}

	if err := os.Remove(filepath.Join(root, host.ClassInfiniband, "mlx5_1")); err != nil {
		t.Fatal(err)
	}
	r.Pass(context.Background(), pol, reconcile.Scope{Full: true})
	st = r.Snapshot()
	fs = diagnose(t, root, withPolicy(pol), func(in *doctor.Input) { in.State, in.Checks = &st, r.Checkers() })
	gone := st.Departed[0].Gone.UTC().Format(time.RFC3339)
	f := mustFix(t, fs, "expect-missing", "mlx5_1", doctor.SeverityFail,
		`the [[expect]] rule at /etc/rdma/rdmad.toml:1 (pci="0000:3b:00.1") expects the device it names (up), which is not here; rdmad saw mlx5_1 (PCI 0000:3b:00.1, driver mlx5_core) go at `+gone,
		"lspci -vv -s 0000:3b:00.1")
	if f.Scope != doctor.ScopeHost {
		t.Errorf("expect-missing is in scope %s; the Kubernetes rollout gate (--scope policy) must not stop at a dead NIC", f.Scope)
	}
	mustFix(t, fs, "expect-missing", "mlx5_1", doctor.SeverityFail, "", "change the rule at /etc/rdma/rdmad.toml:1")
	got := missing(fs)
	want := []string{
		`mlx5_1: the [[expect]] rule at /etc/rdma/rdmad.toml:1 (pci="0000:3b:00.1") expects the device it names (up), which is not here; rdmad saw mlx5_1 (PCI 0000:3b:00.1, driver mlx5_core) go at ` + gone,
		`mlx5_1: the [[expect]] rule at /etc/rdma/rdmad.toml:5 (driver="mlx5_core" port 1) expects at least 2 ports, 1 here; rdmad saw mlx5_1 (PCI 0000:3b:00.1, driver mlx5_core) go at ` + gone,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("expect-missing:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// Ignored, it stays visible but fails nothing.
	pol.Doctor.Ignore = []config.IgnoreRule{{Pattern: "expect-missing:mlx5_1", Source: config.Position{File: "/etc/rdma/rdmad.toml", Line: 20}}}
	fs = diagnose(t, root, withPolicy(pol), func(in *doctor.Input) { in.State, in.Checks = &st, r.Checkers() })
	mustFix(t, fs, "expect-missing", "mlx5_1", doctor.SeverityIgnored, "", "")
}

// missing lists the expect-missing findings that fail as "subject: finding".
func missing(fs []doctor.Finding) []string {
	var out []string
	for _, f := range fs {
		if f.ID == "expect-missing" && f.Severity == doctor.SeverityFail {
			out = append(out, f.Subject.String()+": "+f.Finding)
		}
	}
	return out
}

// An InfiniBand port with link but no subnet manager is a warning for two
// minutes after the running rdmad first saw its link up (or started), then
// a failure.
func TestNoSubnetManagerGrace(t *testing.T) {
	root := readyIB(t)
	setPort(t, root, "mlx4_0", 1, map[string]string{"state": "2: INIT", "sm_lid": "0x0", "lid": "0x0"})
	start := time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC)
	view := func(now, since time.Time) func(*doctor.Input) {
		return func(in *doctor.Input) {
			in.Health = &health.View{Now: now, Start: start, Ports: map[health.PortKey]health.PortView{
				{Device: "mlx4_0", Port: 1}: {LinkUpSince: since}}}
		}
	}
	fs := diagnose(t, root, view(start.Add(90*time.Second), start.Add(10*time.Second)))
	mustFix(t, fs, "port-no-sm", "mlx4_0/1", doctor.SeverityWarn, "link up for 1m20s: this fails once it has been up for 2m0s", "opensm")
	fs = diagnose(t, root, view(start.Add(131*time.Second), start.Add(10*time.Second)))
	mustFix(t, fs, "port-no-sm", "mlx4_0/1", doctor.SeverityFail, "no subnet manager", "opensm")
	// Up before rdmad started: the grace counts from rdmad's start.
	fs = diagnose(t, root, view(start.Add(time.Minute), start.Add(-time.Hour)))
	mustFix(t, fs, "port-no-sm", "mlx4_0/1", doctor.SeverityWarn, "link up for 1m0s", "")
	fs = diagnose(t, root, view(start.Add(3*time.Minute), start.Add(-time.Hour)))
	mustFix(t, fs, "port-no-sm", "mlx4_0/1", doctor.SeverityFail, "", "")
	// Not seen up yet by the monitor: it just came up.
	fs = diagnose(t, root, view(start.Add(time.Hour), time.Time{}))
	mustFix(t, fs, "port-no-sm", "mlx4_0/1", doctor.SeverityWarn, "link up for 0s", "")
}

// [doctor] ignore: a matching warn or fail finding is listed as ignored,
// with the severity it had and the file:line of the entry; ok findings
// and others are untouched.
func TestIgnoredFindings(t *testing.T) {
	root := readyIB(t)
	setPort(t, root, "mlx4_0", 1, map[string]string{"state": "2: INIT", "sm_lid": "0x0", "lid": "0x0"})
	setPort(t, root, "mlx4_0", 2, map[string]string{"state": "2: INIT", "sm_lid": "0x0", "lid": "0x0"})
	pol := policyOf(t, root)
	extra := parsePolicy(t, "[doctor]\nignore = [\n  \"port-no-sm:mlx4_0/1\",\n  \"nfs-*\",\n  \"config-*\",\n]\n")
	pol.Doctor = extra.Doctor
	fs := diagnose(t, root, withPolicy(pol))
	f := must(t, fs, "port-no-sm", "mlx4_0/1")
	if f.Severity != doctor.SeverityIgnored || f.IgnoredSeverity != doctor.SeverityFail || f.IgnoredBy != "/etc/rdma/rdmad.toml:2" {
		t.Errorf("port-no-sm mlx4_0/1: %+v", f)
	}
	if f := must(t, fs, "port-no-sm", "mlx4_0/2"); f.Severity != doctor.SeverityFail || f.IgnoredBy != "" {
		t.Errorf("mlx4_0/2 is not ignored: %+v", f)
	}
	if f := must(t, fs, "config-loaded", "host"); f.Severity != doctor.SeverityOK {
		t.Errorf("an ok finding became %s", f.Severity)
	}
	if n := dbusapi.CountFailed(bus.Findings(fs)); n != 1 {
		t.Errorf("%d failing, want 1 (the ignored one does not count)", n)
	}
}

// Every finding says whether it is about the configuration and its
// declared settings (policy) or the host.
func TestFindingScopes(t *testing.T) {
	fs := diagnose(t, readyIB(t))
	for _, f := range fs {
		if f.Scope != doctor.ScopePolicy && f.Scope != doctor.ScopeHost {
			t.Errorf("%s has scope %q", f.ID, f.Scope)
		}
	}
	for id, want := range map[string]doctor.Scope{"config-loaded": "policy", "netns-mode": "policy", "port-active": "host", "verbs-ready": "host", "memlock-login": "policy"} {
		for _, f := range fs {
			if f.ID == id && f.Scope != want {
				t.Errorf("%s: scope %s, want %s", id, f.Scope, want)
			}
		}
	}
}

// counterView is a history as the running daemon keeps it, from a real
// monitor sampling the fixture: a baseline, then the counters as edit
// leaves them an interval later.
func counterView(t *testing.T, root string, edit func(), carrierLosses ...string) *health.View {
	t.Helper()
	h := host.New(root)
	now := time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC)
	m := health.New(health.Options{Host: h, Now: func() time.Time { return now },
		Devices: func([]string) []host.Device { d, _ := h.Devices(); return d }})
	m.Changed(true, nil, nil)
	m.Update()
	now = now.Add(10 * time.Minute)
	edit()
	m.SampleAll()
	for _, n := range carrierLosses {
		m.CarrierLost(n)
	}
	v := m.View()
	return &v
}

func TestErrorCounters(t *testing.T) {
	root := readyIB(t)
	port1 := "sys/class/infiniband/mlx4_0/ports/1/counters/"
	v := counterView(t, root, func() {
		hosttest.Write(t, root, port1+"symbol_error", "57\n")
		hosttest.Write(t, root, port1+"port_xmit_discards", "60\n") // 17 before: +43, under 100
		hosttest.Write(t, root, port1+"local_link_integrity_errors", "15\n")
	})
	fs := diagnose(t, root, func(in *doctor.Input) { in.Health = v })
	mustFix(t, fs, "counter-increase", "mlx4_0/1", doctor.SeverityFail,
		"mlx4_0/1: error counters rose since rdmad first read them at 2026-03-01T08:00:00Z: symbol_error +57 (more than 10 an hour, the default); local_link_integrity_errors +15 (more than 10 an hour, the default)",
		"reseat or replace the cable")
	mustFix(t, fs, "counter-saturated", "mlx4_0/1", doctor.SeverityWarn, "local_link_integrity_errors at 15", "perfquery -R -C mlx4_0 -P 1")
	mustFix(t, fs, "counters", "mlx4_0/2", doctor.SeverityOK, "mlx4_0/2: 12 error counters steady since rdmad first read them at 2026-03-01T08:00:00Z", "")
	if f := must(t, fs, "counters", "mlx4_0/2"); strings.Contains(f.Finding, "not available") {
		t.Errorf("absent driver statistics listed: %q", f.Finding)
	}

	// Thresholds are the site's to set.
	pol := policyOf(t, root)
	pol.Doctor = parsePolicy(t, "[doctor.counters]\nsymbol_error = 100\nlocal_link_integrity_errors = 20\n").Doctor
	fs = diagnose(t, root, withPolicy(pol), func(in *doctor.Input) { in.Health = v })
	if f := find(fs, "counter-increase", "mlx4_0/1"); f != nil {
		t.Errorf("under the declared thresholds: %+v", f)
	}
	// No history (doctor outside the daemon): counters are not judged.
	fs = diagnose(t, root)
	for _, f := range fs {
		if strings.HasPrefix(f.ID, "counter") {
			t.Errorf("judged without history: %+v", f)
		}
	}
}

// Not available is not zero: a port whose counters answer N/A gets no
// counter finding but the one that says so.
func TestCountersNotAvailable(t *testing.T) {
	root := hosttest.Copy(t, "rxe-ready")
	v := counterView(t, root, func() {})
	mustFix(t, diagnose(t, root, func(in *doctor.Input) { in.Health = v }), "counters", "rxe0/1", doctor.SeverityOK, "no error counter available (symbol_error (absent)", "")
}

// Flaps: link_downed rising, and on an Ethernet port the carrier losses
// rtnetlink reported, the larger count.
func TestFlaps(t *testing.T) {
	root := hosttest.Copy(t, "mlx5")
	v := counterView(t, root, func() {}, "ens1f0np0", "ens1f0np0", "ens1f0np0")
	fs := diagnose(t, root, func(in *doctor.Input) { in.Health = v })
	mustFix(t, fs, "port-flapping", "mlx5_0/1", doctor.SeverityFail, "lost its link 3 times since rdmad first read them at 2026-03-01T08:00:00Z (carrier losses of ens1f0np0; more than 2 an hour, the default)", "cable")
	if f := find(fs, "port-flapping", "mlx5_1/1"); f != nil {
		t.Errorf("mlx5_1 flaps: %+v", f)
	}
	root = readyIB(t)
	v = counterView(t, root, func() {
		hosttest.Write(t, root, "sys/class/infiniband/mlx4_0/ports/2/counters/link_downed", "5\n")
	})
	mustFix(t, diagnose(t, root, func(in *doctor.Input) { in.Health = v }), "port-flapping", "mlx4_0/2", doctor.SeverityFail, "4 times", "")
}

// addrs is a fixed AddrReader.
type addrs map[string][]string

func (a addrs) Addrs(netdev string) ([]net.IP, error) {
	var out []net.IP
	for _, s := range a[netdev] {
		out = append(out, net.ParseIP(s))
	}
	if out == nil {
		return nil, syscall.ENODEV
	}
	return out, nil
}

func TestRoCENetdevs(t *testing.T) {
	root := hosttest.Copy(t, "mlx5")
	port := "sys/class/infiniband/mlx5_0/ports/1/"
	// A RoCE v2 GID for 192.168.1.5 at index 1 (a v1 one of it at 0).
	hosttest.Write(t, root, port+"gids/1", "0000:0000:0000:0000:0000:ffff:c0a8:0105\n")
	in := func(in *doctor.Input) {
		in.Addrs = addrs{"ens1f0np0": {"192.168.1.5"}, "ens1f1np1": {"192.168.2.5", "2001:db8::5"}}
	}
	fs := diagnose(t, root, in)
	mustFix(t, fs, "roce-mtu", "mlx5_0/1", doctor.SeverityOK, "ens1f0np0 has MTU 9000: RoCE MTU 4096", "")
	mustFix(t, fs, "roce-gids", "mlx5_0/1", doctor.SeverityOK, "a RoCE v2 GID for each of the 1 addresses of ens1f0np0", "")
	mustFix(t, fs, "roce-gid-missing", "mlx5_1/1", doctor.SeverityWarn, "no RoCE v2 GID for 192.168.2.5, 2001:db8::5 of ens1f1np1", "ip addr del/add")

	// iboe_get_mtu: 4192 is the least MTU for RoCE MTU 4096; 1500 gives 1024.
	hosttest.Write(t, root, "sys/class/net/ens1f0np0/mtu", "4192\n")
	mustFix(t, diagnose(t, root), "roce-mtu", "mlx5_0/1", doctor.SeverityOK, "RoCE MTU 4096", "")
	hosttest.Write(t, root, "sys/class/net/ens1f0np0/mtu", "1500\n")
	mustFix(t, diagnose(t, root), "roce-mtu-small", "mlx5_0/1", doctor.SeverityWarn, "MTU 1500, so RoCE carries at most 1024 bytes a packet (4096 needs a netdev MTU of at least 4192)", "ip link set dev ens1f0np0 mtu 9000")
	// rxe takes 80 bytes of headers.
	rxe := hosttest.Copy(t, "rxe-ready")
	hosttest.Write(t, rxe, "sys/class/net/veth0/mtu", "4175\n")
	mustFix(t, diagnose(t, rxe), "roce-mtu-small", "rxe0/1", doctor.SeverityWarn, "at most 2048 bytes", "")
	hosttest.Write(t, rxe, "sys/class/net/veth0/mtu", "4176\n")
	mustFix(t, diagnose(t, rxe), "roce-mtu", "rxe0/1", doctor.SeverityOK, "", "")
}

// A declared TOS comes with what it reaches: RDMA-CM only.
func TestTOSScopeNote(t *testing.T) {
	root := hosttest.Copy(t, "mlx5")
	pol := parsePolicy(t, "[[roce]]\ndriver = \"mlx5_core\"\ntos = 106\n")
	mustFix(t, diagnose(t, root, withPolicy(pol)), "roce-tos-scope", "host", doctor.SeverityOK,
		"the declared TOS 106 on mlx5_0/1 mlx5_1/1 is default_roce_tos: it applies to RDMA-CM connections only; verbs programs that set up their own queue pairs, UCX and NCCL set their own traffic class (UCX_IB_TRAFFIC_CLASS=106 NCCL_IB_TC=106", "")
	if f := find(diagnose(t, root), "roce-tos-scope", "host"); f != nil {
		t.Errorf("no TOS declared, yet: %+v", f)
	}
}

// The services that run RDMA jobs: slurmd, pbs_mom and [memlock]
// check_units, with LimitMEMLOCK as systemd resolves it.
func TestJobServiceMemlock(t *testing.T) {
	root := hosttest.Copy(t, "rxe-ready") // [memlock] services = true: DefaultLimitMEMLOCK=infinity
	hosttest.Write(t, root, "usr/lib/systemd/system/slurmd.service", "[Service]\nExecStart=/usr/sbin/slurmd -D\nLimitMEMLOCK=infinity\n")
	fs := diagnose(t, root)
	mustFix(t, fs, "memlock-job-service", "host", doctor.SeverityOK, "slurmd and the jobs it starts get memlock unlimited (LimitMEMLOCK=infinity at /usr/lib/systemd/system/slurmd.service:3)", "")
	// A drop-in for every service (service.d) lowers it.
	hosttest.Write(t, root, "etc/systemd/system/service.d/90-memlock.conf", "[Service]\nLimitMEMLOCK=64M\n")
	mustFix(t, diagnose(t, root), "memlock-job-service-low", "host", doctor.SeverityFail,
		"slurmd and the jobs it starts get memlock 64 MiB (LimitMEMLOCK=64M at /etc/systemd/system/service.d/90-memlock.conf:2), below the declared unlimited",
		"systemctl edit slurmd.service, add [Service] LimitMEMLOCK=infinity, then systemctl restart slurmd")
	// Without [memlock]: the built-in default is a warning, and a unit
	// listed in check_units that is not installed says so.
	bare := hosttest.Copy(t, "mlx5")
	hosttest.Write(t, bare, "usr/lib/systemd/system/pbs_mom.service", "[Service]\nExecStart=/opt/pbs/sbin/pbs_mom\n")
	pol := parsePolicy(t, "[memlock]\ncheck_units = [\"gpu-agent\"]\n")
	fs = diagnose(t, bare, withPolicy(pol))
	mustFix(t, fs, "memlock-job-service-low", "host", doctor.SeverityWarn, "pbs_mom and the jobs it starts get memlock 8 MiB", "LimitMEMLOCK=infinity")
	mustFix(t, fs, "memlock-job-service-missing", "host", doctor.SeverityWarn, "gpu-agent.service, listed in [memlock] check_units at /etc/rdma/rdmad.toml:2, is not installed", "")
	if pol.Memlock != nil {
		t.Error("check_units made rdmad manage memlock")
	}
}

// No healthy fixture host has a fail finding, with the daemon's history
// (counters steady since the baseline) as without it.
func TestHealthyHostsPassTheGate(t *testing.T) {
	for _, name := range []string{"rxe-ready", "ib-ready", "demo"} {
		root := hosttest.Copy(t, name)
		if name == "ib-ready" {
			root = readyIB(t)
		}
		v := counterView(t, root, func() {})
		for _, fs := range [][]doctor.Finding{diagnose(t, root), diagnose(t, root, func(in *doctor.Input) { in.Health = v })} {
			if f := failing(fs); len(f) > 0 {
				t.Errorf("%s fails: %v\n%s", name, f, dump(fs))
			}
		}
	}
}
