package metrics

import (
	"bytes"
	"errors"
	"os"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/qos"
	"github.com/rdmad/rdmad/daemon/reconcile"
	"github.com/rdmad/rdmad/daemon/roce"
	"github.com/rdmad/rdmad/daemon/vpi"
	"github.com/rdmad/rdmad/dbusapi"
)

func tos(n int) *int { return &n }

func rocePort(mode string, tosv int) reconcile.PortState {
	return reconcile.PortState{
		Port:      host.Port{Number: 1, State: "ACTIVE", LinkLayer: "Ethernet", RoCEMode: mode, RoCETOS: tosv, RoCEKnown: true},
		Transport: host.TransportRoCE,
		Desired:   config.RoCEDesired{Mode: config.RoCEv1, TOS: tos(106)},
	}
}

// qosPort declares pfc = [3] and trust dscp with dscp_prio 26 = 4 on a
// port whose netdev shows exactly that, then applies change.
func qosPort(change func(p *reconcile.PortState)) func(p *reconcile.PortState) {
	return func(p *reconcile.PortState) {
		p.Desired = config.RoCEDesired{}
		p.QoS = config.QoSDesired{Trust: config.TrustDSCP, PFC: []uint8{3}, HasPFC: true, DSCPPrio: map[uint8]uint8{26: 4}}
		tab := p.QoS.DSCPTable()
		p.QoSKnown, p.QoSTrust, p.QoSPFC, p.QoSDSCP = true, "dscp", []uint8{3}, map[uint8]uint8{}
		for d, prio := range tab {
			p.QoSDSCP[uint8(d)] = prio
		}
		if change != nil {
			change(p)
		}
	}
}

func failedAction(s reconcile.Subject, k reconcile.Kind) reconcile.Action {
	return reconcile.Action{Subject: s, Kind: k, Status: reconcile.Failed, Err: errors.New("refused")}
}

func TestPortDrift(t *testing.T) {
	port1 := reconcile.PortSubject("dev0", 1)
	tests := []struct {
		name   string
		device func(ds *reconcile.DeviceState)
		port   func(p *reconcile.PortState)
		want   []Drift
	}{
		{"declared values hold", nil, nil,
			[]Drift{{SettingRoCEMode, false}, {SettingRoCETOS, false}}},
		{"kernel mode differs", nil, func(p *reconcile.PortState) { p.RoCEMode = "RoCE v2" },
			[]Drift{{SettingRoCEMode, true}, {SettingRoCETOS, false}}},
		{"kernel tos differs", nil, func(p *reconcile.PortState) { p.RoCETOS = 0 },
			[]Drift{{SettingRoCEMode, false}, {SettingRoCETOS, true}}},
		// The value reads as declared, but the pass failed on it (e.g.
		// the read-back failed): not verified, so drift.
		{"failed mode action", nil, func(p *reconcile.PortState) { p.Failures = []reconcile.Action{failedAction(port1, roce.Mode)} },
			[]Drift{{SettingRoCEMode, true}, {SettingRoCETOS, false}}},
		{"values unknown", nil, func(p *reconcile.PortState) { p.RoCEKnown, p.RoCEMode, p.RoCETOS = false, "", -1 },
			[]Drift{{SettingRoCEMode, true}, {SettingRoCETOS, true}}},
		{"no rdma_cm directory", func(ds *reconcile.DeviceState) {
			ds.Failures = []reconcile.Action{failedAction(reconcile.DeviceSubject("dev0"), roce.Configfs)}
		}, nil, []Drift{{SettingRoCEMode, true}, {SettingRoCETOS, true}}},
		{"device did not read", func(ds *reconcile.DeviceState) { ds.ReadError = errors.New("EIO") }, nil,
			[]Drift{{SettingRoCEMode, true}, {SettingRoCETOS, true}}},
		{"tos only", nil, func(p *reconcile.PortState) { p.Desired.Mode = "" },
			[]Drift{{SettingRoCETOS, false}}},
		{"nothing declared", nil, func(p *reconcile.PortState) { p.Desired = config.RoCEDesired{} }, nil},
		{"RoCE rule on an InfiniBand port", nil, func(p *reconcile.PortState) { p.Transport, p.LinkLayer = host.TransportInfiniBand, "InfiniBand" }, nil},
		{"vpi verified", func(ds *reconcile.DeviceState) {
			ds.Driver = vpi.Driver
			ds.Actions = []reconcile.Action{{Subject: port1, Kind: vpi.PortType, To: "eth", Status: reconcile.Unchanged}}
		}, func(p *reconcile.PortState) { p.Desired, p.VPIType = config.RoCEDesired{}, config.VPIeth },
			[]Drift{{SettingVPIType, false}}},
		{"vpi changed", func(ds *reconcile.DeviceState) {
			ds.Driver = vpi.Driver
			ds.Actions = []reconcile.Action{{Subject: port1, Kind: vpi.PortType, To: "eth", Status: reconcile.Changed}}
		}, func(p *reconcile.PortState) { p.Desired, p.VPIType = config.RoCEDesired{}, config.VPIeth },
			[]Drift{{SettingVPIType, false}}},
		{"vpi refused", func(ds *reconcile.DeviceState) {
			ds.Driver = vpi.Driver
			ds.Actions = []reconcile.Action{failedAction(port1, vpi.PortType)}
		}, func(p *reconcile.PortState) {
			p.Desired, p.VPIType = config.RoCEDesired{}, config.VPIeth
			p.Failures = []reconcile.Action{failedAction(port1, vpi.PortType)}
		}, []Drift{{SettingVPIType, true}}},
		{"vpi never looked at", func(ds *reconcile.DeviceState) { ds.Driver = vpi.Driver },
			func(p *reconcile.PortState) { p.Desired, p.VPIType = config.RoCEDesired{}, config.VPIeth },
			[]Drift{{SettingVPIType, true}}},
		{"vpi on another port only", func(ds *reconcile.DeviceState) {
			ds.Driver = vpi.Driver
			ds.Actions = []reconcile.Action{{Subject: reconcile.PortSubject("dev0", 2), Kind: vpi.PortType, Status: reconcile.Unchanged}}
		}, func(p *reconcile.PortState) { p.Desired, p.VPIType = config.RoCEDesired{}, config.VPIeth },
			[]Drift{{SettingVPIType, true}}},
		{"qos holds", nil, qosPort(nil), []Drift{{SettingQoSPFC, false}, {SettingQoSTrust, false}}},
		{"qos pfc differs", nil, qosPort(func(p *reconcile.PortState) { p.QoSPFC = []uint8{4} }),
			[]Drift{{SettingQoSPFC, true}, {SettingQoSTrust, false}}},
		{"qos dscp entry differs", nil, qosPort(func(p *reconcile.PortState) {
			p.QoSDSCP = map[uint8]uint8{}
			for d := uint8(0); d < 64; d++ {
				p.QoSDSCP[d] = d >> 3
			}
		}), []Drift{{SettingQoSPFC, false}, {SettingQoSTrust, true}}},
		{"qos trust pcp in the kernel", nil, qosPort(func(p *reconcile.PortState) { p.QoSTrust, p.QoSDSCP = "pcp", map[uint8]uint8{} }),
			[]Drift{{SettingQoSPFC, false}, {SettingQoSTrust, true}}},
		{"qos netdev without DCB", nil, qosPort(func(p *reconcile.PortState) {
			p.QoSKnown = false
			p.Failures = []reconcile.Action{failedAction(port1, qos.PFC), failedAction(port1, qos.Trust)}
		}), []Drift{{SettingQoSPFC, true}, {SettingQoSTrust, true}}},
		{"qos on a VF", func(ds *reconcile.DeviceState) {
			ds.Actions = []reconcile.Action{{Subject: port1, Kind: qos.VF, Status: reconcile.NotApplicable}}
		}, qosPort(func(p *reconcile.PortState) { p.QoSKnown = false }), nil},
		{"vpi on a device that is not mlx4", nil,
			func(p *reconcile.PortState) { p.Desired, p.VPIType = config.RoCEDesired{}, config.VPIeth }, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ds := reconcile.DeviceState{Device: host.Device{Name: "dev0", Driver: "mlx5_core"}}
			p := rocePort("IB/RoCE v1", 106)
			if tc.device != nil {
				tc.device(&ds)
			}
			if tc.port != nil {
				tc.port(&p)
			}
			if got := PortDrift(&ds, &p); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("PortDrift = %v, want %v", got, tc.want)
			}
		})
	}
}

func mustValue(t testing.TB, fams map[string]*dto.MetricFamily, want float64, name string, labels ...string) {
	t.Helper()
	got, ok := Sample(fams, name, labels...)
	if !ok {
		t.Errorf("no sample %s%v", name, labels)
		return
	}
	if got != want {
		t.Errorf("%s%v = %v, want %v", name, labels, got, want)
	}
}

// Device names come from the host: quotes, backslashes, newlines and bytes
// that are not UTF-8 must neither break the file nor be lost.
func TestRenderEscapesLabelValues(t *testing.T) {
	names := []string{"plain0", `quo"te`, `back\slash`, "new\nline", "bad\xffbyte", "ünï"}
	sum := reconcile.Summary{LastReconcile: time.Unix(1700000000, 5e8)}
	devices := map[string]*deviceMetrics{}
	for _, n := range names {
		ds := reconcile.DeviceState{Device: host.Device{Name: n}, Ports: []reconcile.PortState{rocePort("IB/RoCE v1", 106)}}
		ds.Ports[0].State = n // a port state read from the host too
		sum.Devices = append(sum.Devices, n)
		devices[n] = buildDevice(&ds)
	}
	var b bytes.Buffer
	render(&b, &snapshot{sum: sum, devices: devices, now: time.Unix(1700000100, 0)})
	fams := ParseText(t, b.Bytes())
	for _, n := range names {
		// The label value is the name as D-Bus publishes it.
		mustValue(t, fams, 0, "rdmad_port_drift", "device="+dbusapi.Escape(n), "port=1", "setting=roce_mode")
		mustValue(t, fams, 1, "rdmad_ports", "transport=roce", "state="+dbusapi.Escape(n))
	}
	mustValue(t, fams, 1700000000.5, "rdmad_last_reconcile_timestamp_seconds")
	mustValue(t, fams, 1700000100, "rdmad_heartbeat_timestamp_seconds")
}

func TestRenderHostFacts(t *testing.T) {
	ds0 := reconcile.DeviceState{Device: host.Device{Name: "mlx5_0"}, Ports: []reconcile.PortState{rocePort("RoCE v2", 106)}}
	ib := reconcile.DeviceState{Device: host.Device{Name: "mlx4_0"}, Ports: []reconcile.PortState{
		{Port: host.Port{Number: 1, State: "ACTIVE"}, Transport: host.TransportInfiniBand},
		{Port: host.Port{Number: 2, State: "DOWN"}, Transport: host.TransportInfiniBand},
		{Port: host.Port{Number: 3}, Transport: host.TransportInfiniBand},
	}}
	sum := reconcile.Summary{
		Devices: []string{"mlx4_0", "mlx5_0", "new0"}, // new0: listed, not rendered yet
		Failures: []reconcile.Action{
			failedAction(reconcile.PortSubject("mlx5_0", 1), roce.Mode),
			failedAction(reconcile.HostSubject(), "modules"),
			failedAction(reconcile.LinkSubject("rxe0"), "soft link"),
			failedAction(reconcile.LinkSubject("rxe1"), "soft link"),
		},
	}
	var b bytes.Buffer
	render(&b, &snapshot{sum: sum, configError: true, now: time.Now(),
		devices:  map[string]*deviceMetrics{"mlx5_0": buildDevice(&ds0), "mlx4_0": buildDevice(&ib), "gone0": buildDevice(&ds0)},
		findings: renderFindings(sampleFindings)})
	fams := ParseText(t, b.Bytes())
	Promtool(t, b.Bytes())

	want := []string{"rdmad_build_info", "rdmad_heartbeat_timestamp_seconds", "rdmad_last_reconcile_timestamp_seconds",
		"rdmad_config_error", "rdmad_devices", "rdmad_ports", "rdmad_failures", "rdmad_port_drift",
		"rdmad_port_roce_tos", "rdmad_port_roce_mode_info", "rdmad_doctor_findings", "rdmad_doctor_finding"}
	if len(fams) != len(want) {
		t.Errorf("families = %d, want %d", len(fams), len(want))
	}
	for _, n := range want {
		if fams[n] == nil {
			t.Errorf("family %s missing", n)
		}
	}
	mustValue(t, fams, 1, "rdmad_config_error")
	mustValue(t, fams, 3, "rdmad_devices")
	mustValue(t, fams, 0, "rdmad_last_reconcile_timestamp_seconds") // no pass yet
	mustValue(t, fams, 1, "rdmad_build_info", "version=dev", "revision=", "goversion="+runtime.Version())
	mustValue(t, fams, 1, "rdmad_ports", "transport=roce", "state=ACTIVE")
	mustValue(t, fams, 1, "rdmad_ports", "transport=infiniband", "state=ACTIVE")
	mustValue(t, fams, 1, "rdmad_ports", "transport=infiniband", "state=DOWN")
	mustValue(t, fams, 1, "rdmad_ports", "transport=infiniband", "state=unknown")
	mustValue(t, fams, 1, "rdmad_failures", "subject_kind=host")
	mustValue(t, fams, 0, "rdmad_failures", "subject_kind=device")
	mustValue(t, fams, 1, "rdmad_failures", "subject_kind=port")
	mustValue(t, fams, 2, "rdmad_failures", "subject_kind=link")
	mustValue(t, fams, 1, "rdmad_port_drift", "device=mlx5_0", "port=1", "setting=roce_mode")
	mustValue(t, fams, 0, "rdmad_port_drift", "device=mlx5_0", "port=1", "setting=roce_tos")
	if n := len(fams["rdmad_port_drift"].Metric); n != 2 {
		t.Errorf("%d drift samples, want 2 (none for gone0, which the summary no longer lists)", n)
	}
	// The kernel's RoCE values of the RoCE port; none for InfiniBand ports.
	mustValue(t, fams, 106, "rdmad_port_roce_tos", "device=mlx5_0", "port=1")
	mustValue(t, fams, 1, "rdmad_port_roce_mode_info", "device=mlx5_0", "port=1", "mode=RoCE v2")
	if n := len(fams["rdmad_port_roce_tos"].Metric) + len(fams["rdmad_port_roce_mode_info"].Metric); n != 2 {
		t.Errorf("%d RoCE value samples, want 2 (mlx5_0/1 only)", n)
	}
}

// sampleFindings: two of each severity, a duplicate warn, and subjects whose
// names need escaping.
var sampleFindings = []dbusapi.Finding{
	{ID: "ports-active", Subject: dbusapi.Subject{Kind: "port", Device: "mlx5_0", Port: 1}, Severity: dbusapi.SeverityOK},
	{ID: "memlock-login", Subject: dbusapi.Subject{Kind: "host"}, Severity: dbusapi.SeverityOK},
	{ID: "port-down", Subject: dbusapi.Subject{Kind: "port", Device: "mlx5_1", Port: 1}, Severity: dbusapi.SeverityWarn},
	{ID: "coexist-mlx4-conf", Subject: dbusapi.Subject{Kind: "host"}, Severity: dbusapi.SeverityWarn},
	{ID: "coexist-mlx4-conf", Subject: dbusapi.Subject{Kind: "host"}, Severity: dbusapi.SeverityWarn},
	{ID: "roce-mode", Subject: dbusapi.Subject{Kind: "port", Device: "q\"uo\\te\n\xff", Port: 2}, Severity: dbusapi.SeverityFail},
	{ID: "port-no-sm", Subject: dbusapi.Subject{Kind: "port", Device: "mlx4_0", Port: 1}, Severity: dbusapi.SeverityIgnored,
		IgnoredSeverity: dbusapi.SeverityFail, IgnoredBy: "/etc/rdma/rdmad.toml:3"},
}

// Doctor's findings: counts of every severity (a duplicate counted, as
// rdmactl doctor lists it), one series per distinct warn or fail finding,
// subjects as rdmactl names them, escaped as D-Bus publishes them.
func TestRenderFindings(t *testing.T) {
	var b bytes.Buffer
	render(&b, &snapshot{now: time.Now(), findings: renderFindings(sampleFindings)})
	fams := ParseText(t, b.Bytes())
	Promtool(t, b.Bytes())
	mustValue(t, fams, 2, "rdmad_doctor_findings", "severity=ok")
	mustValue(t, fams, 3, "rdmad_doctor_findings", "severity=warn")
	mustValue(t, fams, 1, "rdmad_doctor_findings", "severity=fail")
	mustValue(t, fams, 1, "rdmad_doctor_finding", "id=port-down", "subject=mlx5_1/1", "severity=warn")
	mustValue(t, fams, 1, "rdmad_doctor_finding", "id=coexist-mlx4-conf", "subject=host", "severity=warn")
	mustValue(t, fams, 1, "rdmad_doctor_finding", "id=roce-mode", "subject="+dbusapi.Escape("q\"uo\\te\n\xff/2"), "severity=fail")
	// An ignored finding: its own series, counted under no severity.
	mustValue(t, fams, 1, "rdmad_doctor_finding", "id=port-no-sm", "subject=mlx4_0/1", "severity=ignored")
	if n := len(fams["rdmad_doctor_finding"].Metric); n != 4 {
		t.Errorf("%d rdmad_doctor_finding series, want 4 (no ok finding, the duplicate once, the ignored one)", n)
	}
	if n := len(fams["rdmad_doctor_findings"].Metric); n != 3 || bytes.Contains(b.Bytes(), []byte(`rdmad_doctor_findings{severity="ignored"}`)) {
		t.Errorf("rdmad_doctor_findings has %d series, want ok, warn and fail only:\n%s", n, b.Bytes())
	}

	// Before doctor ran: the families, no samples; with no finding at all,
	// zero counts.
	b.Reset()
	render(&b, &snapshot{now: time.Now()})
	if fams := ParseText(t, b.Bytes()); fams["rdmad_doctor_findings"] != nil || !bytes.Contains(b.Bytes(), []byte("# TYPE rdmad_doctor_findings gauge\n")) {
		t.Errorf("before doctor ran: want the family without samples:\n%s", b.Bytes())
	}
	b.Reset()
	render(&b, &snapshot{now: time.Now(), findings: renderFindings(nil)})
	fams = ParseText(t, b.Bytes())
	for _, sev := range []string{"ok", "warn", "fail"} {
		mustValue(t, fams, 0, "rdmad_doctor_findings", "severity="+sev)
	}
}

// The kernel's RoCE values are published for RoCE ports whose values were
// read, whatever the policy declares; not for a port whose values are
// unknown, a device that did not read, or another transport.
func TestRenderRoCEValues(t *testing.T) {
	declared := rocePort("IB/RoCE v1", 106)
	undeclared := rocePort("RoCE v2", 0)
	undeclared.Number, undeclared.Desired = 2, config.RoCEDesired{}
	unknown := rocePort("", -1)
	unknown.Number, unknown.RoCEKnown = 3, false
	iw := reconcile.PortState{Port: host.Port{Number: 1, RoCEMode: "RoCE v2", RoCETOS: 5, RoCEKnown: true}, Transport: host.TransportIWARP}
	ds := reconcile.DeviceState{Device: host.Device{Name: "mlx5_0"}, Ports: []reconcile.PortState{declared, undeclared, unknown}}
	bad := reconcile.DeviceState{Device: host.Device{Name: "mlx5_1"}, Ports: []reconcile.PortState{rocePort("RoCE v2", 7)}, ReadError: errors.New("EIO")}
	other := reconcile.DeviceState{Device: host.Device{Name: "iw0"}, Ports: []reconcile.PortState{iw}}
	var b bytes.Buffer
	render(&b, &snapshot{sum: reconcile.Summary{Devices: []string{"iw0", "mlx5_0", "mlx5_1"}}, now: time.Now(),
		devices: map[string]*deviceMetrics{"mlx5_0": buildDevice(&ds), "mlx5_1": buildDevice(&bad), "iw0": buildDevice(&other)}})
	fams := ParseText(t, b.Bytes())
	Promtool(t, b.Bytes())
	mustValue(t, fams, 106, "rdmad_port_roce_tos", "device=mlx5_0", "port=1")
	mustValue(t, fams, 0, "rdmad_port_roce_tos", "device=mlx5_0", "port=2")
	mustValue(t, fams, 1, "rdmad_port_roce_mode_info", "device=mlx5_0", "port=1", "mode=IB/RoCE v1")
	mustValue(t, fams, 1, "rdmad_port_roce_mode_info", "device=mlx5_0", "port=2", "mode=RoCE v2")
	if n := len(fams["rdmad_port_roce_tos"].Metric); n != 2 {
		t.Errorf("%d rdmad_port_roce_tos samples, want 2 (not the unknown port, the unread device, the iWARP port)", n)
	}
	if n := len(fams["rdmad_port_roce_mode_info"].Metric); n != 2 {
		t.Errorf("%d rdmad_port_roce_mode_info samples, want 2", n)
	}
}

// The example file in docs/metrics.md is what rdmad writes: it parses, and
// its families and HELP texts are those of a real render.
func TestDocumentedExampleMatchesRender(t *testing.T) {
	doc, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(doc), "\n## Example\n")
	_, block, ok2 := strings.Cut(after, "\n```\n")
	block, _, ok3 := strings.Cut(block, "```\n")
	if !ok || !ok2 || !ok3 {
		t.Fatal("docs/metrics.md has no example file under ## Example")
	}
	documented := ParseText(t, []byte(block))

	ds := reconcile.DeviceState{Device: host.Device{Name: "mlx5_0"}, Ports: []reconcile.PortState{rocePort("RoCE v2", 106)}}
	var b bytes.Buffer
	render(&b, &snapshot{sum: reconcile.Summary{Devices: []string{"mlx5_0"}}, now: time.Now(),
		devices: map[string]*deviceMetrics{"mlx5_0": buildDevice(&ds)}, findings: renderFindings(sampleFindings)})
	real := ParseText(t, b.Bytes())
	Promtool(t, []byte(block))
	if len(documented) != len(real) {
		t.Errorf("docs/metrics.md example has %d families, rdmad writes %d", len(documented), len(real))
	}
	for name, f := range real {
		d := documented[name]
		if d == nil {
			t.Errorf("docs/metrics.md example lacks %s", name)
			continue
		}
		if d.GetHelp() != f.GetHelp() {
			t.Errorf("%s HELP in docs/metrics.md:\n%q\nrdmad writes:\n%q", name, d.GetHelp(), f.GetHelp())
		}
		if !strings.Contains(string(doc), "`"+name+"`") {
			t.Errorf("docs/metrics.md does not describe %s in its table", name)
		}
	}
}
