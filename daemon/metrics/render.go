// Package metrics writes rdmad's view of the host for Prometheus through
// node_exporter's textfile collector: a file in the Prometheus text
// exposition format, replaced atomically after passes. rdmad opens no
// network port for it; node_exporter serves the file. docs/metrics.md
// describes every metric.
package metrics

import (
	"bytes"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/doctor"
	"github.com/rdmad/rdmad/daemon/reconcile"
	"github.com/rdmad/rdmad/daemon/version"
	"github.com/rdmad/rdmad/dbusapi"
)

// Header opens every file rdmad writes. A file at the configured path
// that does not start with ownerMark belongs to someone else: rdmad
// neither replaces nor removes it.
const Header = ownerMark + " (see docs/metrics.md); written by rdmad, do not edit.\n"

// ownerMark is the part of Header that stays the same across versions.
const ownerMark = "# rdmad textfile metrics"

// labelEscaper escapes a label value as the text exposition format wants.
var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

// labelValue makes a string read from the host a label value: first what
// D-Bus publishes (valid UTF-8, control characters and bad bytes as \xNN),
// then the text format's escaping.
func labelValue(s string) string { return labelEscaper.Replace(dbusapi.Escape(s)) }

// Per-device families: each device renders its samples of each family
// into its own buffer after a pass over it, and render writes every
// family's buffers together (a family's samples must be contiguous). The
// families are rdmad_port_drift and one gauge per setting that has one
// (reconcile.Setting.Gauge: rdmad_port_roce_tos...), in the parts' order.
type devFamily struct {
	name, help string
	setting    *reconcile.Setting // nil: rdmad_port_drift
}

const driftHelp = "1 when a declared port setting does not hold at the last read (the kernel value differs, or could not be read or written), 0 when it does."

// devFamilies are the per-device families of the settings.
func devFamilies(settings []*reconcile.Setting) []devFamily {
	out := []devFamily{{name: "rdmad_port_drift", help: driftHelp}}
	for _, s := range settings {
		if s.Gauge != nil {
			out = append(out, devFamily{name: s.Gauge.Name, help: s.Gauge.Help, setting: s})
		}
	}
	return out
}

// deviceMetrics is what one device contributes to the file, rendered after
// each pass over it so that a pass over one device does not render the
// others again.
type deviceMetrics struct {
	fam    [][]byte  // samples per family, as devFamilies orders them
	ports  []portKey // one per port
	driver string    // the rdmad_devices_by_driver label, escaped
}

// portKey is the rdmad_ports labels of one port, escaped.
type portKey struct{ transport, state string }

func buildDevice(ds *reconcile.DeviceState, fams []devFamily) *deviceMetrics {
	dm := &deviceMetrics{ports: make([]portKey, 0, len(ds.Ports)), fam: make([][]byte, len(fams)), driver: labelValue(ds.Driver)}
	b := make([]bytes.Buffer, len(fams))
	gauge := map[*reconcile.Setting]int{}
	for f, fam := range fams {
		if fam.setting != nil {
			gauge[fam.setting] = f
		}
	}
	dev := labelValue(ds.Name)
	b[0].Grow(len(ds.Ports) * 3 * (len(`rdmad_port_drift{device="",port="",setting="roce_mode"} 0`) + len(dev) + 3))
	for i := range ds.Ports {
		p := &ds.Ports[i]
		state := p.State
		if state == "" {
			state = "unknown"
		}
		dm.ports = append(dm.ports, portKey{labelValue(string(p.Transport)), labelValue(state)})
		port := strconv.Itoa(p.Number)
		for _, d := range ds.PortDrift(p) {
			w := &b[0]
			w.WriteString(`rdmad_port_drift{device="`)
			w.WriteString(dev)
			w.WriteString(`",port="`)
			w.WriteString(port)
			w.WriteString(`",setting="`)
			w.WriteString(labelValue(d.Setting))
			if d.Drifted {
				w.WriteString("\"} 1\n")
			} else {
				w.WriteString("\"} 0\n")
			}
		}
		// The kernel's values, only where it holds them (a device that
		// did not read shows none).
		if ds.ReadError != nil {
			continue
		}
		for _, r := range p.Records {
			f, ok := gauge[r.Setting]
			if !ok || r.Observed == nil {
				continue
			}
			g := r.Setting.Gauge
			var value string
			w := &b[f]
			switch {
			case g.Sample != nil:
				s := g.Sample(r.Observed)
				gaugeStart(w, g.Name, dev, port)
				for i := 0; i+1 < len(s.Labels); i += 2 {
					gaugeLabel(w, s.Labels[i], labelValue(s.Labels[i+1]))
				}
				value = strconv.FormatUint(s.Value, 10)
			case g.Label != "":
				gaugeStart(w, g.Name, dev, port)
				gaugeLabel(w, g.Label, labelValue(r.Observed.String()))
				value = "1"
			default:
				v, ok := number(r.Observed)
				if !ok {
					continue
				}
				gaugeStart(w, g.Name, dev, port)
				value = v
			}
			if g.Policy {
				gaugeLabel(w, "policy", r.State.String())
			}
			w.WriteString("} ")
			w.WriteString(value)
			w.WriteByte('\n')
		}
	}
	for f := range b {
		dm.fam[f] = b[f].Bytes()
	}
	return dm
}

// gaugeStart writes a per-port gauge's name and its device and port
// labels, gaugeLabel one more label (value already escaped): the sample
// is closed by the caller.
func gaugeStart(w *bytes.Buffer, name, dev, port string) {
	w.WriteString(name)
	w.WriteString(`{device="`)
	w.WriteString(dev)
	w.WriteString(`",port="`)
	w.WriteString(port)
	w.WriteByte('"')
}

func gaugeLabel(w *bytes.Buffer, name, value string) {
	w.WriteByte(',')
	w.WriteString(name)
	w.WriteString(`="`)
	w.WriteString(value)
	w.WriteByte('"')
}

// number is a value's sample: its Wire, when that is a number.
func number(v reconcile.Value) (string, bool) {
	w, ok := v.(reconcile.Wired)
	if !ok {
		return "", false
	}
	switch n := w.Wire(false).(type) {
	case int32:
		return strconv.FormatInt(int64(n), 10), true
	case int:
		return strconv.Itoa(n), true
	case uint32:
		return strconv.FormatUint(uint64(n), 10), true
	case int64:
		return strconv.FormatInt(n, 10), true
	case uint64:
		return strconv.FormatUint(n, 10), true
	}
	return "", false
}

// hostDrift renders rdmad_host_drift: one sample per declared setting of
// a host-level subject (rdmad's files, links, the netns mode) that
// applies, 1 when it does not hold.
func hostDrift(b *bytes.Buffer, recs []reconcile.Record) {
	family(b, "rdmad_host_drift", "1 when a declared host-level setting (a file rdmad writes, a soft link, the RDMA netns mode) does not hold at the last read, 0 when it does.")
	var lines []string
	for _, r := range recs {
		if r.Subject.Kind == reconcile.SubjectPort || r.Subject.Kind == reconcile.SubjectDevice || !r.Applies() {
			continue
		}
		v := "0"
		if r.Drifted() {
			v = "1"
		}
		lines = append(lines, `rdmad_host_drift{subject="`+labelValue(r.Subject.String())+`",setting="`+labelValue(r.Setting.Name)+`"} `+v+"\n")
	}
	sort.Strings(lines)
	for _, l := range lines {
		b.WriteString(l)
	}
}

// snapshot is what one write renders: the host-level facts plus the
// rendered devices.
type snapshot struct {
	sum         reconcile.Summary
	families    []devFamily
	settings    []*reconcile.Setting // every setting: rdmad_drift_corrected_total has a series for each
	devices     map[string]*deviceMetrics
	configError bool
	bus         int32 // busUnknown, busOff, busOn
	inForce     config.InForce
	now         time.Time
	// findings is doctor's last run rendered (renderFindings), nil before
	// the first: the families are then written without samples.
	findings []byte
	// refused are the D-Bus calls refused, by method and reason.
	refused []CallCount
}

// subjectKinds are the rdmad_failures series, always all present so that
// an alert on one of them has a series to compare.
var subjectKinds = []struct {
	kind  reconcile.SubjectKind
	label string
}{
	{reconcile.SubjectHost, "host"},
	{reconcile.SubjectDevice, "device"},
	{reconcile.SubjectPort, "port"},
	{reconcile.SubjectLink, "link"},
}

// render writes the whole file to b. Devices are in the Summary's (sorted)
// order; one the Summary lists but devices lacks is left out until the
// write after its pass.
func render(b *bytes.Buffer, s *snapshot) {
	b.WriteString(Header)
	family(b, "rdmad_build_info", "rdmad's version, the commit it was built from and its Go version; always 1.")
	b.WriteString(`rdmad_build_info{version="` + labelValue(version.Version) + `",revision="` + labelValue(version.Revision) +
		`",goversion="` + labelValue(runtime.Version()) + "\"} 1\n")

	family(b, "rdmad_heartbeat_timestamp_seconds", "When rdmad wrote this file, Unix time; rewritten at least once a minute while rdmad runs.")
	sample(b, "rdmad_heartbeat_timestamp_seconds", seconds(s.now))

	family(b, "rdmad_last_reconcile_timestamp_seconds", "When rdmad's last reconcile pass ended, Unix time.")
	sample(b, "rdmad_last_reconcile_timestamp_seconds", seconds(s.sum.LastReconcile))

	family(b, "rdmad_config_error", "1 when the last configuration reload failed (rdmad_policy_in_force says what applies instead), else 0.")
	sample(b, "rdmad_config_error", boolValue(s.configError))

	family(b, "rdmad_policy_in_force", "1 for the policy rdmad applies: the configuration files, the last good configuration (they do not load), or nothing (they do not load and no last good one can be used); 0 for the others.")
	for _, o := range config.Origins {
		b.WriteString(`rdmad_policy_in_force{origin="` + string(o) + `"} ` + boolValue(s.inForce.Origin == o) + "\n")
	}

	family(b, "rdmad_last_good_save_failed", "1 when rdmad could not save the configuration in force as the last good one (a full disk, a file it did not write at the path); it tries again after every pass. Else 0.")
	sample(b, "rdmad_last_good_save_failed", boolValue(s.inForce.SaveError != nil))

	family(b, "rdmad_dbus_connected", "1 while rdmad is connected to D-Bus and serves its objects there, 0 while it has lost the bus (it keeps applying its policy and reconnects; rdmactl and Cockpit cannot reach it meanwhile). No sample when rdmad runs without a bus (--bus none).")
	if s.bus != busUnknown {
		sample(b, "rdmad_dbus_connected", boolValue(s.bus == busOn))
	}

	family(b, "rdmad_devices", "RDMA devices present.")
	sample(b, "rdmad_devices", strconv.Itoa(len(s.sum.Devices)))

	counts := map[portKey]int{}
	drivers := map[string]int{}
	for _, n := range s.sum.Devices {
		if dm := s.devices[n]; dm != nil {
			for _, k := range dm.ports {
				counts[k]++
			}
			drivers[dm.driver]++
		}
	}
	family(b, "rdmad_devices_by_driver", "RDMA devices present by kernel driver (mlx5_core, rdma_rxe...; \"\" when the device names none).")
	for _, d := range sortedKeys(drivers) {
		b.WriteString(`rdmad_devices_by_driver{driver="` + d + `"} ` + strconv.Itoa(drivers[d]) + "\n")
	}

	keys := make([]portKey, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].transport != keys[j].transport {
			return keys[i].transport < keys[j].transport
		}
		return keys[i].state < keys[j].state
	})
	family(b, "rdmad_ports", "RDMA ports by transport and port state (ACTIVE, DOWN, INIT, ARMED...).")
	for _, k := range keys {
		b.WriteString(`rdmad_ports{transport="` + k.transport + `",state="` + k.state + `"} ` + strconv.Itoa(counts[k]) + "\n")
	}

	var failures [4]int
	for _, a := range s.sum.Failures {
		if int(a.Subject.Kind) < len(failures) {
			failures[a.Subject.Kind]++
		}
	}
	family(b, "rdmad_failures", "Failed actions still standing after the last pass over their subject, by subject kind.")
	for _, k := range subjectKinds {
		b.WriteString(`rdmad_failures{subject_kind="` + k.label + `"} ` + strconv.Itoa(failures[k.kind]) + "\n")
	}

	for f, fam := range s.families {
		family(b, fam.name, fam.help)
		for _, n := range s.sum.Devices {
			if dm := s.devices[n]; dm != nil && f < len(dm.fam) {
				b.Write(dm.fam[f])
			}
		}
	}
	hostDrift(b, s.sum.HostRecords)

	b.WriteString("# HELP rdmad_drift_corrected_total Changes made behind rdmad's back to a declared setting that rdmad put back ([drift] action = \"correct\"), by setting, since rdmad started.\n# TYPE rdmad_drift_corrected_total counter\n")
	for _, st := range s.settings {
		b.WriteString(`rdmad_drift_corrected_total{setting="` + labelValue(st.Name) + `"} ` + strconv.FormatUint(s.sum.Corrected[st.Name], 10) + "\n")
	}
	family(b, "rdmad_drift_fought", foughtHelp)
	for _, st := range s.settings {
		b.WriteString(`rdmad_drift_fought{setting="` + labelValue(st.Name) + `"} ` + strconv.Itoa(s.sum.Fought[st.Name]) + "\n")
	}
	b.WriteString("# HELP rdmad_refused_calls_total " + refusedHelp + "\n# TYPE rdmad_refused_calls_total counter\n")
	for _, c := range s.refused {
		b.WriteString(`rdmad_refused_calls_total{method="` + labelValue(c.Method) + `",reason="` + labelValue(c.Reason) + `"} ` + strconv.FormatUint(c.Calls, 10) + "\n")
	}
	family(b, "rdmad_last_verify_timestamp_seconds", "When rdmad last read every declared setting back (the [drift] verify_interval read-back, or a full pass), Unix time; 0 before the first.")
	sample(b, "rdmad_last_verify_timestamp_seconds", seconds(s.sum.LastVerify))

	if s.findings != nil {
		b.Write(s.findings)
	} else {
		renderFindingFamilies(b, nil, nil, 0)
	}
}

// sortedKeys lists a count's keys in order.
func sortedKeys(m map[string]int) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// foughtHelp says what rdmad_drift_fought counts.
const foughtHelp = "How many subjects have the setting fought now: rdmad put it back twice or more, each time within [drift] fight_window of the one before (doctor's setting-fought); back to 0 once a window passes without a correction."

// refusedHelp says what rdmad_refused_calls_total counts. Only the first
// few refused calls of each caller within 10 s are logged one by one: the
// counter is where all of them are.
const refusedHelp = "D-Bus calls rdmad refused since it started, by method and reason: not-allowed ([api] changes), denied (polkit, or no polkit), busy (a local bound: outstanding polkit checks, plans, live reads, reports); a series appears with its first refusal."

// Doctor's findings (rdmactl doctor, org.rdmad1.Manager.Diagnose).
const (
	findingsHelp = "Doctor's findings by severity (ok, warn, fail; ignored ones are not counted), as rdmactl doctor shows them; computed off the pass, after full passes and at least every minute."
	findingHelp  = "1 for each standing warn, fail or ignored ([doctor] ignore) finding of doctor, by id, subject (as rdmactl doctor names it) and severity."
	missingHelp  = "[[expect]] rules not met because devices are missing: a rule that names a device that is not here, or whose count is short (doctor's expect-missing; ignored ones are not counted); computed with doctor's findings."
)

// severities are the rdmad_doctor_findings series, always all present. An
// ignored finding has none: it counts toward no alert on the counts.
var severities = []doctor.Severity{doctor.SeverityOK, doctor.SeverityWarn, doctor.SeverityFail}

// renderFindings renders doctor's findings: counts by severity, and one
// series per distinct warn, fail or ignored finding (two findings with the
// same id, subject and severity are one series: Prometheus refuses
// duplicates). An ignored finding is kept visible with severity="ignored"
// so a dashboard can show what a site silenced.
func renderFindings(fs []doctor.Finding) []byte {
	counts := map[doctor.Severity]int{}
	seen := map[string]bool{}
	var lines []string
	missing := 0
	for _, f := range fs {
		counts[f.Severity]++
		if f.ID == doctor.IDExpectMissing && f.Severity == doctor.SeverityFail {
			missing++
		}
		if f.Severity == doctor.SeverityOK {
			continue
		}
		line := `rdmad_doctor_finding{id="` + labelValue(f.ID) + `",subject="` + labelValue(f.Subject.String()) +
			`",severity="` + labelValue(string(f.Severity)) + "\"} 1\n"
		if !seen[line] {
			seen[line] = true
			lines = append(lines, line)
		}
	}
	sort.Strings(lines)
	var b bytes.Buffer
	renderFindingFamilies(&b, counts, lines, missing)
	return b.Bytes()
}

// renderFindingFamilies writes doctor's families; counts nil: doctor has
// not run yet, the families have no samples.
func renderFindingFamilies(b *bytes.Buffer, counts map[doctor.Severity]int, lines []string, missing int) {
	family(b, "rdmad_doctor_findings", findingsHelp)
	if counts != nil {
		for _, sev := range severities {
			b.WriteString(`rdmad_doctor_findings{severity="` + string(sev) + `"} ` + strconv.Itoa(counts[sev]) + "\n")
		}
	}
	family(b, "rdmad_doctor_finding", findingHelp)
	for _, l := range lines {
		b.WriteString(l)
	}
	family(b, "rdmad_expect_missing", missingHelp)
	if counts != nil {
		sample(b, "rdmad_expect_missing", strconv.Itoa(missing))
	}
}

// family writes the HELP and TYPE lines of a gauge; every rdmad metric is
// one but rdmad_drift_corrected_total and rdmad_refused_calls_total,
// counters since rdmad started.
func family(b *bytes.Buffer, name, help string) {
	b.WriteString("# HELP " + name + " " + help + "\n# TYPE " + name + " gauge\n")
}

func sample(b *bytes.Buffer, name, value string) { b.WriteString(name + " " + value + "\n") }

func seconds(t time.Time) string {
	if t.IsZero() {
		return "0"
	}
	return strconv.FormatFloat(float64(t.UnixMilli())/1e3, 'f', 3, 64)
}

func boolValue(v bool) string {
	if v {
		return "1"
	}
	return "0"
}
