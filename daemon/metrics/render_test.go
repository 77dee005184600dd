package metrics

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/dcb"
	"github.com/rdmad/rdmad/daemon/doctor"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/qos"
	"github.com/rdmad/rdmad/daemon/reconcile"
	"github.com/rdmad/rdmad/daemon/roce"
	"github.com/rdmad/rdmad/dbusapi"
)

// roceSettings are the RoCE part's settings, roceFams their per-device
// families.
var (
	roceSettings = []*reconcile.Setting{roce.Mode.Setting(), roce.TOS.Setting()}
	roceFams     = devFamilies(roceSettings)
)

// judged is a record of a declared setting whose part compared declared
// with observed (nil: not read).
func judged(s *reconcile.Setting, port int, declared, observed reconcile.Value, same bool) reconcile.Record {
	r := reconcile.Record{Subject: reconcile.PortSubject("dev0", port), Setting: s, Declared: declared, Observed: observed, State: reconcile.Holds}
	switch {
	case observed == nil:
		r.State, r.Why = reconcile.Unknown, errors.New("unreadable")
	case !same:
		r.State = reconcile.Differs
	}
	return r
}

// rocePort is a RoCE port with mode v1 and TOS 106 declared, and the
// kernel's mode and TOS ("" and -1: not read).
func rocePort(mode string, tosv int) reconcile.PortState {
	var m, t reconcile.Value
	if mode != "" {
		v := roce.ModeValue{Other: mode}
		if mode == "IB/RoCE v1" {
			v = roce.ModeValue{Mode: config.RoCEv1}
		} else if mode == "RoCE v2" {
			v = roce.ModeValue{Mode: config.RoCEv2}
		}
		m = v
	}
	if tosv >= 0 {
		t = roce.TOSValue(tosv)
	}
	return reconcile.PortState{
		Port:      host.Port{Number: 1, State: "ACTIVE", LinkLayer: "Ethernet"},
		Transport: host.TransportRoCE,
		Records: []reconcile.Record{
			judged(roce.Mode.Setting(), 1, roce.ModeValue{Mode: config.RoCEv1}, m, mode == "IB/RoCE v1"),
			judged(roce.TOS.Setting(), 1, roce.TOSValue(106), t, tosv == 106),
		},
	}
}

// undeclared makes every record of p an undeclared one, as a publishing
// pass records a port no rule selects.
func undeclared(p reconcile.PortState) reconcile.PortState {
	for i := range p.Records {
		p.Records[i].Declared, p.Records[i].State, p.Records[i].Why = nil, reconcile.Undeclared, nil
	}
	return p
}

func failedAction(s reconcile.Subject, k reconcile.Kind) reconcile.Action {
	return reconcile.Action{Subject: s, Kind: k, Status: reconcile.Failed, Err: errors.New("refused")}
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
		devices[n] = buildDevice(&ds, roceFams)
	}
	var b bytes.Buffer
	render(&b, &snapshot{families: roceFams, settings: roceSettings, sum: sum, devices: devices, now: time.Unix(1700000100, 0)})
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
	ds0 := reconcile.DeviceState{Device: host.Device{Name: "mlx5_0", Driver: "mlx5_core"}, Ports: []reconcile.PortState{rocePort("RoCE v2", 106)}}
	ib := reconcile.DeviceState{Device: host.Device{Name: "mlx4_0"}, Ports: []reconcile.PortState{
		{Port: host.Port{Number: 1, State: "ACTIVE"}, Transport: host.TransportInfiniBand},
		{Port: host.Port{Number: 2, State: "DOWN"}, Transport: host.TransportInfiniBand},
		{Port: host.Port{Number: 3}, Transport: host.TransportInfiniBand},
	}}
	sum := reconcile.Summary{
		Devices: []string{"mlx4_0", "mlx5_0", "new0"}, // new0: listed, not rendered yet
		Failures: []reconcile.Action{
			failedAction(reconcile.PortSubject("mlx5_0", 1), roce.Mode.Kind()),
			failedAction(reconcile.HostSubject(), "modules"),
			failedAction(reconcile.LinkSubject("rxe0"), "soft link"),
			failedAction(reconcile.LinkSubject("rxe1"), "soft link"),
		},
	}
	var b bytes.Buffer
	render(&b, &snapshot{families: roceFams, settings: roceSettings, sum: sum, configError: true, now: time.Now(),
		devices:  map[string]*deviceMetrics{"mlx5_0": buildDevice(&ds0, roceFams), "mlx4_0": buildDevice(&ib, roceFams), "gone0": buildDevice(&ds0, roceFams)},
		findings: renderFindings(sampleFindings)})
	fams := ParseText(t, b.Bytes())
	Promtool(t, b.Bytes())

	want := []string{"rdmad_build_info", "rdmad_heartbeat_timestamp_seconds", "rdmad_last_reconcile_timestamp_seconds",
		"rdmad_config_error", "rdmad_policy_in_force", "rdmad_last_good_save_failed", "rdmad_devices", "rdmad_devices_by_driver", "rdmad_ports", "rdmad_failures", "rdmad_port_drift",
		"rdmad_port_roce_mode_info", "rdmad_port_roce_tos", "rdmad_drift_corrected_total", "rdmad_drift_fought", "rdmad_last_verify_timestamp_seconds",
		"rdmad_doctor_findings", "rdmad_doctor_finding", "rdmad_expect_missing"}
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
	// By driver, the devices rendered (not new0 yet, not gone0 any more);
	// mlx4_0 names none.
	mustValue(t, fams, 1, "rdmad_devices_by_driver", "driver=mlx5_core")
	mustValue(t, fams, 1, "rdmad_devices_by_driver", "driver=")
	if n := len(fams["rdmad_devices_by_driver"].Metric); n != 2 {
		t.Errorf("%d rdmad_devices_by_driver series, want 2", n)
	}
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
var sampleFindings = []doctor.Finding{
	{ID: "ports-active", Subject: reconcile.PortSubject("mlx5_0", 1), Severity: doctor.SeverityOK},
	{ID: "memlock-login", Subject: reconcile.HostSubject(), Severity: doctor.SeverityOK},
	{ID: "port-down", Subject: reconcile.PortSubject("mlx5_1", 1), Severity: doctor.SeverityWarn},
	{ID: "coexist-mlx4-conf", Subject: reconcile.HostSubject(), Severity: doctor.SeverityWarn},
	{ID: "coexist-mlx4-conf", Subject: reconcile.HostSubject(), Severity: doctor.SeverityWarn},
	{ID: "roce-mode", Subject: reconcile.PortSubject("q\"uo\\te\n\xff", 2), Severity: doctor.SeverityFail},
	{ID: "port-no-sm", Subject: reconcile.PortSubject("mlx4_0", 1), Severity: doctor.SeverityIgnored,
		IgnoredSeverity: doctor.SeverityFail, IgnoredBy: "/etc/rdma/rdmad.toml:3"},
	{ID: doctor.IDExpectMissing, Subject: reconcile.DeviceSubject("mlx5_1"), Severity: doctor.SeverityFail},
	{ID: doctor.IDExpectMissing, Subject: reconcile.HostSubject(), Severity: doctor.SeverityFail},
	{ID: doctor.IDExpectMissing, Subject: reconcile.DeviceSubject("mlx5_3"), Severity: doctor.SeverityIgnored,
		IgnoredSeverity: doctor.SeverityFail, IgnoredBy: "/etc/rdma/rdmad.toml:4"},
}

// Doctor's findings: counts of every severity (a duplicate counted, as
// rdmactl doctor lists it), one series per distinct warn or fail finding,
// subjects as rdmactl names them, escaped as D-Bus publishes them.
func TestRenderFindings(t *testing.T) {
	var b bytes.Buffer
	render(&b, &snapshot{families: roceFams, settings: roceSettings, now: time.Now(), findings: renderFindings(sampleFindings)})
	fams := ParseText(t, b.Bytes())
	Promtool(t, b.Bytes())
	mustValue(t, fams, 2, "rdmad_doctor_findings", "severity=ok")
	mustValue(t, fams, 3, "rdmad_doctor_findings", "severity=warn")
	mustValue(t, fams, 3, "rdmad_doctor_findings", "severity=fail")
	mustValue(t, fams, 1, "rdmad_doctor_finding", "id=port-down", "subject=mlx5_1/1", "severity=warn")
	// Two rules short of their devices; the ignored one is not counted.
	mustValue(t, fams, 2, "rdmad_expect_missing")
	mustValue(t, fams, 1, "rdmad_doctor_finding", "id=coexist-mlx4-conf", "subject=host", "severity=warn")
	mustValue(t, fams, 1, "rdmad_doctor_finding", "id=roce-mode", "subject="+dbusapi.Escape("q\"uo\\te\n\xff/2"), "severity=fail")
	// An ignored finding: its own series, counted under no severity.
	mustValue(t, fams, 1, "rdmad_doctor_finding", "id=port-no-sm", "subject=mlx4_0/1", "severity=ignored")
	if n := len(fams["rdmad_doctor_finding"].Metric); n != 7 {
		t.Errorf("%d rdmad_doctor_finding series, want 7 (no ok finding, the duplicate once, the ignored ones)", n)
	}
	if n := len(fams["rdmad_doctor_findings"].Metric); n != 3 || bytes.Contains(b.Bytes(), []byte(`rdmad_doctor_findings{severity="ignored"}`)) {
		t.Errorf("rdmad_doctor_findings has %d series, want ok, warn and fail only:\n%s", n, b.Bytes())
	}

	// Before doctor ran: the families, no samples; with no finding at all,
	// zero counts.
	b.Reset()
	render(&b, &snapshot{families: roceFams, settings: roceSettings, now: time.Now()})
	if fams := ParseText(t, b.Bytes()); fams["rdmad_doctor_findings"] != nil || !bytes.Contains(b.Bytes(), []byte("# TYPE rdmad_doctor_findings gauge\n")) {
		t.Errorf("before doctor ran: want the family without samples:\n%s", b.Bytes())
	}
	b.Reset()
	render(&b, &snapshot{families: roceFams, settings: roceSettings, now: time.Now(), findings: renderFindings(nil)})
	fams = ParseText(t, b.Bytes())
	for _, sev := range []string{"ok", "warn", "fail"} {
		mustValue(t, fams, 0, "rdmad_doctor_findings", "severity="+sev)
	}
	mustValue(t, fams, 0, "rdmad_expect_missing")
}

// The kernel's RoCE values are published for RoCE ports whose values were
// read, whatever the policy declares; not for a port whose values are
// unknown, a device that did not read, or another transport.
func TestRenderRoCEValues(t *testing.T) {
	declared := rocePort("IB/RoCE v1", 106)
	other2 := undeclared(rocePort("RoCE v2", 0))
	other2.Number = 2
	unknown := rocePort("", -1)
	unknown.Number = 3
	iw := reconcile.PortState{Port: host.Port{Number: 1}, Transport: host.TransportIWARP}
	ds := reconcile.DeviceState{Device: host.Device{Name: "mlx5_0"}, Ports: []reconcile.PortState{declared, other2, unknown}}
	bad := reconcile.DeviceState{Device: host.Device{Name: "mlx5_1"}, Ports: []reconcile.PortState{rocePort("RoCE v2", 7)}, ReadError: errors.New("EIO")}
	other := reconcile.DeviceState{Device: host.Device{Name: "iw0"}, Ports: []reconcile.PortState{iw}}
	var b bytes.Buffer
	render(&b, &snapshot{families: roceFams, settings: roceSettings, sum: reconcile.Summary{Devices: []string{"iw0", "mlx5_0", "mlx5_1"}}, now: time.Now(),
		devices: map[string]*deviceMetrics{"mlx5_0": buildDevice(&ds, roceFams), "mlx5_1": buildDevice(&bad, roceFams), "iw0": buildDevice(&other, roceFams)}})
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

	// As the daemon writes it: on the bus, with the QoS part's settings
	// and the values of a netdev no rule declares them for.
	port := rocePort("RoCE v2", 106)
	port.Records = append(port.Records,
		qos.PFC.Observe(reconcile.PortSubject("mlx5_0", 1), qos.PFCValue{Netdev: "ens1f0np0"}, nil),
		qos.Trust.Observe(reconcile.PortSubject("mlx5_0", 1), qos.TrustValue{Netdev: "ens1f0np0", Trust: config.TrustPCP}, nil))
	ds := reconcile.DeviceState{Device: host.Device{Name: "mlx5_0"}, Ports: []reconcile.PortState{port}}
	var b bytes.Buffer
	hostRecs := []reconcile.Record{{Subject: reconcile.LinkSubject("rxe0"), Setting: roce.TOS.Setting(), Declared: roce.TOSValue(1), State: reconcile.Holds}}
	render(&b, &snapshot{families: qosFams, settings: qosSettings, sum: reconcile.Summary{Devices: []string{"mlx5_0"}, HostRecords: hostRecs}, now: time.Now(),
		devices: map[string]*deviceMetrics{"mlx5_0": buildDevice(&ds, qosFams)}, findings: renderFindings(sampleFindings), bus: busOn,
		refused: []CallCount{{Method: "SetRoCE", Reason: "denied", Calls: 3}}})
	real := ParseText(t, b.Bytes())
	Promtool(t, []byte(block))
	if len(documented) != len(real) {
		t.Errorf("docs/metrics.md example has %d families with samples, rdmad writes %d", len(documented), len(real))
	}
	for name := range real {
		if documented[name] == nil {
			t.Errorf("docs/metrics.md example has no sample of %s", name)
		}
	}
	// Every family, samples or not: its HELP, and a row of the table.
	help := regexp.MustCompile(`(?m)^# HELP (\S+) (.*)$`)
	docHelp := map[string]string{}
	for _, m := range help.FindAllStringSubmatch(block, -1) {
		docHelp[m[1]] = m[2]
	}
	realHelp := help.FindAllStringSubmatch(b.String(), -1)
	if len(docHelp) != len(realHelp) {
		t.Errorf("docs/metrics.md example has %d families, rdmad writes %d", len(docHelp), len(realHelp))
	}
	for _, m := range realHelp {
		name := m[1]
		if d, ok := docHelp[name]; !ok {
			t.Errorf("docs/metrics.md example lacks %s", name)
		} else if d != m[2] {
			t.Errorf("%s HELP in docs/metrics.md:\n%q\nrdmad writes:\n%q", name, d, m[2])
		}
		if !strings.Contains(string(doc), "| `"+name+"` |") {
			t.Errorf("docs/metrics.md does not describe %s in its table", name)
		}
	}
}

// rdmad_host_drift: one sample per declared host-level setting that
// applies (files, links, the netns mode), from the host parts' records;
// records about ports (the mlx4_en options judged per port) are the
// ports' drift, not the host's.
func TestRenderHostDrift(t *testing.T) {
	file := reconcile.NewSetting[num](reconcile.Setting{Name: "test_file", Kind: "test file", Key: "test.file", Title: "test file"})
	link := reconcile.NewSetting[num](reconcile.Setting{Name: "test_link", Kind: "test link", Key: "test.link", Title: "test link"})
	recs := []reconcile.Record{
		{Subject: reconcile.HostSubject(), Setting: file.Setting(), Declared: num(1), State: reconcile.Holds},
		{Subject: reconcile.LinkSubject("rxe0"), Setting: link.Setting(), Declared: num(1), State: reconcile.Refused},
		{Subject: reconcile.LinkSubject("rxe1"), Setting: link.Setting(), Declared: num(1), State: reconcile.Inapplicable},
		{Subject: reconcile.PortSubject("mlx4_0", 2), Setting: file.Setting(), Declared: num(1), State: reconcile.Refused},
		{Subject: reconcile.HostSubject(), Setting: link.Setting(), State: reconcile.Undeclared},
	}
	var b bytes.Buffer
	render(&b, &snapshot{families: roceFams, settings: roceSettings, sum: reconcile.Summary{HostRecords: recs}, now: time.Now()})
	fams := ParseText(t, b.Bytes())
	Promtool(t, b.Bytes())
	mustValue(t, fams, 0, "rdmad_host_drift", "subject=host", "setting=test_file")
	mustValue(t, fams, 1, "rdmad_host_drift", "subject=link rxe0", "setting=test_link")
	if n := len(fams["rdmad_host_drift"].Metric); n != 2 {
		t.Errorf("%d rdmad_host_drift samples, want 2", n)
	}
}

type num int

func (n num) String() string { return fmt.Sprint(int(n)) }

// qosSettings are roceSettings and the QoS part's PFC and trust, whose
// gauges publish the values on the port's netdev.
var (
	qosSettings = append([]*reconcile.Setting{qos.PFC.Setting(), qos.Trust.Setting()}, roceSettings...)
	qosFams     = devFamilies(qosSettings)
)

// The lossless values of every RoCE port whose netdev's DCB was read:
// the PFC mask as the sample, the trust as a label, each with whether it
// is the declared value (policy); none for a value that could not be read,
// or for a device that did not read. The netdev is escaped as a device
// name is (as D-Bus publishes it, then for the text format).
func TestRenderQoSValues(t *testing.T) {
	pfc := func(port int, netdev string, mask uint8, state reconcile.RecordState) reconcile.Record {
		v := qos.PFCValue{Netdev: netdev, PFC: dcb.PFC{Enabled: mask}}
		return reconcile.Record{Subject: reconcile.PortSubject("mlx5_0", port), Setting: qos.PFC.Setting(), Observed: v, State: state}
	}
	trust := func(port int, netdev string, tr config.QoSTrust, state reconcile.RecordState) reconcile.Record {
		v := qos.TrustValue{Netdev: netdev, Trust: tr}
		return reconcile.Record{Subject: reconcile.PortSubject("mlx5_0", port), Setting: qos.Trust.Setting(), Observed: v, State: state}
	}
	port := func(n int, recs ...reconcile.Record) reconcile.PortState {
		return reconcile.PortState{Port: host.Port{Number: n, State: "ACTIVE"}, Transport: host.TransportRoCE, Records: recs}
	}
	unread := pfc(3, "eth3", 0, reconcile.Unknown)
	unread.Observed = nil
	ds := reconcile.DeviceState{Device: host.Device{Name: "mlx5_0"}, Ports: []reconcile.PortState{
		port(1, pfc(1, "ens1f0np0", 1<<3, reconcile.Holds), trust(1, "ens1f0np0", config.TrustDSCP, reconcile.Holds)),
		port(2, pfc(2, "we\"ird\n", 0, reconcile.Undeclared), trust(2, "we\"ird\n", config.TrustPCP, reconcile.Differs)),
		port(3, unread),
	}}
	bad := reconcile.DeviceState{Device: host.Device{Name: "mlx5_1"}, ReadError: errors.New("EIO"),
		Ports: []reconcile.PortState{port(1, pfc(1, "ens2", 8, reconcile.Holds))}}
	var b bytes.Buffer
	render(&b, &snapshot{families: qosFams, settings: qosSettings, sum: reconcile.Summary{Devices: []string{"mlx5_0", "mlx5_1"}}, now: time.Now(),
		devices: map[string]*deviceMetrics{"mlx5_0": buildDevice(&ds, qosFams), "mlx5_1": buildDevice(&bad, qosFams)}})
	fams := ParseText(t, b.Bytes())
	Promtool(t, b.Bytes())
	mustValue(t, fams, 8, "rdmad_qos_pfc_mask", "device=mlx5_0", "port=1", "netdev=ens1f0np0", "policy=holds")
	mustValue(t, fams, 1, "rdmad_qos_trust_info", "device=mlx5_0", "port=1", "netdev=ens1f0np0", "trust=dscp", "policy=holds")
	mustValue(t, fams, 0, "rdmad_qos_pfc_mask", "device=mlx5_0", "port=2", "netdev="+dbusapi.Escape("we\"ird\n"), "policy=undeclared")
	mustValue(t, fams, 1, "rdmad_qos_trust_info", "device=mlx5_0", "port=2", "netdev="+dbusapi.Escape("we\"ird\n"), "trust=pcp", "policy=differs")
	if n := len(fams["rdmad_qos_pfc_mask"].Metric); n != 2 {
		t.Errorf("%d rdmad_qos_pfc_mask samples, want 2 (not the unread port 3, not the device that did not read)", n)
	}
	if n := len(fams["rdmad_qos_trust_info"].Metric); n != 2 {
		t.Errorf("%d rdmad_qos_trust_info samples, want 2", n)
	}
}

// rdmad_dbus_connected: no sample until the daemon says whether it is on
// the bus (--bus none never does), then 1 or 0.
func TestRenderDBusConnected(t *testing.T) {
	for _, c := range []struct {
		bus  int32
		want string
	}{{busUnknown, ""}, {busOn, "rdmad_dbus_connected 1\n"}, {busOff, "rdmad_dbus_connected 0\n"}} {
		var b bytes.Buffer
		render(&b, &snapshot{families: roceFams, settings: roceSettings, now: time.Now(), bus: c.bus})
		ParseText(t, b.Bytes())
		if !bytes.Contains(b.Bytes(), []byte("# TYPE rdmad_dbus_connected gauge\n")) {
			t.Errorf("bus %d: no rdmad_dbus_connected family", c.bus)
		}
		got := ""
		for _, l := range strings.SplitAfter(b.String(), "\n") {
			if strings.HasPrefix(l, "rdmad_dbus_connected ") {
				got = l
			}
		}
		if got != c.want {
			t.Errorf("bus %d: sample %q, want %q", c.bus, got, c.want)
		}
	}
}

// rdmad_refused_calls_total: a counter with one series per method and
// reason the bus refused, and the family without samples before the first.
func TestRenderRefusedCalls(t *testing.T) {
	var b bytes.Buffer
	render(&b, &snapshot{families: roceFams, settings: roceSettings, now: time.Now()})
	if !strings.Contains(b.String(), "\n# TYPE rdmad_refused_calls_total counter\n# HELP") {
		t.Fatalf("before any refusal, the family is not written alone:\n%s", b.String())
	}
	b.Reset()
	render(&b, &snapshot{families: roceFams, settings: roceSettings, now: time.Now(),
		refused: []CallCount{{Method: "Plan", Reason: "busy", Calls: 3}, {Method: "SetRoCE", Reason: "denied", Calls: 5000}}})
	fams := ParseText(t, b.Bytes())
	Promtool(t, b.Bytes())
	if f := fams["rdmad_refused_calls_total"]; f.GetType().String() != "COUNTER" {
		t.Errorf("rdmad_refused_calls_total is a %s", f.GetType())
	}
	mustValue(t, fams, 5000, "rdmad_refused_calls_total", "method=SetRoCE", "reason=denied")
	mustValue(t, fams, 3, "rdmad_refused_calls_total", "method=Plan", "reason=busy")
}

// rdmad_drift_fought: a series per setting, the subjects fought now.
func TestRenderFought(t *testing.T) {
	var b bytes.Buffer
	render(&b, &snapshot{families: roceFams, settings: roceSettings, now: time.Now(),
		sum: reconcile.Summary{Fought: map[string]int{roce.TOS.Setting().Name: 2}}})
	fams := ParseText(t, b.Bytes())
	mustValue(t, fams, 2, "rdmad_drift_fought", "setting=roce_tos")
	mustValue(t, fams, 0, "rdmad_drift_fought", "setting=roce_mode")
}
