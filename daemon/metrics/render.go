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
	"github.com/rdmad/rdmad/daemon/host"
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

// The settings rdmad_port_drift reports, its "setting" label.
const (
	SettingRoCEMode = "roce_mode" // [[roce]] mode: configfs default_roce_mode
	SettingRoCETOS  = "roce_tos"  // [[roce]] tos: configfs default_roce_tos
	SettingVPIType  = "vpi_type"  // [[vpi]] type: mlx4_port<N>
	SettingQoSPFC   = "qos_pfc"   // [[qos]] pfc: the PFC priorities of the port's netdev (DCB)
	SettingQoSTrust = "qos_trust" // [[qos]] trust: the DSCP entries of its APP table (DCB)
)

// Drift says whether one declared setting of a port holds after the last
// pass over its device.
type Drift struct {
	Setting string
	Drifted bool
}

// PortDrift lists the settings the policy declares for port p of ds and
// whether each one drifted: the kernel value is not the declared one, or it
// could not be read or written in the last pass. It decides from typed
// state only: observed values against PortState's declared ones, and the
// failed actions by kind. A declared setting that does not apply to the
// port (RoCE settings on an InfiniBand or iWARP port, a VPI type on a
// device that is not mlx4) is not listed: reports show it not applicable.
func PortDrift(ds *reconcile.DeviceState, p *reconcile.PortState) []Drift {
	var out []Drift
	// The values of a device that did not read are the last good ones.
	stale := ds.ReadError != nil
	if p.Transport == host.TransportRoCE && !p.Desired.Empty() {
		// Without its rdma_cm directory no RoCE value of the device is set.
		noConfigfs := stale || failed(ds.Failures, reconcile.KindRoCEConfigfs)
		if p.Desired.Mode != "" {
			drifted := noConfigfs || failed(p.Failures, reconcile.KindRoCEMode) || !p.RoCEKnown || p.RoCEMode != p.Desired.Mode.Kernel()
			out = append(out, Drift{SettingRoCEMode, drifted})
		}
		if p.Desired.TOS != nil {
			drifted := noConfigfs || failed(p.Failures, reconcile.KindRoCETOS) || !p.RoCEKnown || p.RoCETOS != *p.Desired.TOS
			out = append(out, Drift{SettingRoCETOS, drifted})
		}
	}
	out = append(out, qosDrift(ds, p)...)
	if p.VPIType != "" && ds.Driver == host.DriverMLX4 {
		// The port type is not kept in the observed state: the last pass's
		// action on it says whether the kernel showed the declared type.
		drifted := stale || failed(p.Failures, reconcile.KindVPIPortType) || !verified(ds, p.Number, reconcile.KindVPIPortType)
		out = append(out, Drift{SettingVPIType, drifted})
	}
	return out
}

// qosDrift: [[qos]] settings of an Ethernet port drift when the kernel's
// value differs or could not be read or written. A virtual function has no
// DCB (its PF carries it): nothing is listed for it, as for a port QoS
// does not apply to.
func qosDrift(ds *reconcile.DeviceState, p *reconcile.PortState) []Drift {
	if p.Transport != host.TransportRoCE && p.Transport != host.TransportIWARP {
		return nil
	}
	if p.QoS.Empty() || notApplicable(ds, p.Number, reconcile.KindQoSVF) {
		return nil
	}
	stale := ds.ReadError != nil
	var out []Drift
	if p.QoS.HasPFC {
		drifted := stale || failed(p.Failures, reconcile.KindQoSPFC) || !p.QoSKnown || !samePrios(p.QoSPFC, p.QoS.PFC)
		out = append(out, Drift{SettingQoSPFC, drifted})
	}
	if p.QoS.Trust != "" {
		drifted := stale || failed(p.Failures, reconcile.KindQoSTrust) || !p.QoSKnown || p.QoSTrust != string(p.QoS.Trust) ||
			(p.QoS.Trust == config.TrustDSCP && !dscpHolds(p.QoSDSCP, p.QoS.DSCPTable()))
		out = append(out, Drift{SettingQoSTrust, drifted})
	}
	return out
}

func samePrios(a, b []uint8) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func dscpHolds(have map[uint8]uint8, want [64]uint8) bool {
	if len(have) != len(want) {
		return false
	}
	for d, prio := range want {
		if v, ok := have[uint8(d)]; !ok || v != prio {
			return false
		}
	}
	return true
}

func notApplicable(ds *reconcile.DeviceState, port int, k reconcile.Kind) bool {
	s := reconcile.PortSubject(ds.Name, port)
	for _, a := range ds.Actions {
		if a.Subject == s && a.Kind == k && a.Status == reconcile.NotApplicable {
			return true
		}
	}
	return false
}

func failed(acts []reconcile.Action, k reconcile.Kind) bool {
	for _, a := range acts {
		if a.Kind == k && a.Status == reconcile.Failed {
			return true
		}
	}
	return false
}

// verified reports whether the last pass over ds found the port's setting
// of kind k as declared, or set it and read it back.
func verified(ds *reconcile.DeviceState, port int, k reconcile.Kind) bool {
	s := reconcile.PortSubject(ds.Name, port)
	for _, a := range ds.Actions {
		if a.Subject == s && a.Kind == k {
			return a.Status == reconcile.Unchanged || a.Status == reconcile.Changed
		}
	}
	return false
}

// labelEscaper escapes a label value as the text exposition format wants.
var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

// labelValue makes a string read from the host a label value: first what
// D-Bus publishes (valid UTF-8, control characters and bad bytes as \xNN),
// then the text format's escaping.
func labelValue(s string) string { return labelEscaper.Replace(dbusapi.Escape(s)) }

// Per-device families: each device renders its samples of each family
// into its own buffer after a pass over it, and render writes every
// family's buffers together (a family's samples must be contiguous). A new
// per-port metric is one more entry here and one more case in buildDevice.
type devFamily int

const (
	famDrift devFamily = iota
	famRoCETOS
	famRoCEMode
	numDevFamilies
)

var devFamilies = [numDevFamilies]struct{ name, help string }{
	famDrift:    {"rdmad_port_drift", "1 when a declared port setting does not hold after the last pass (the kernel value differs, or could not be read or written), 0 when it does."},
	famRoCETOS:  {"rdmad_port_roce_tos", "The default RoCE type of service of a RoCE port as the kernel holds it (configfs rdma_cm default_roce_tos) after the last pass, declared or not."},
	famRoCEMode: {"rdmad_port_roce_mode_info", "The default RoCE mode of a RoCE port as the kernel holds it (configfs rdma_cm default_roce_mode: \"IB/RoCE v1\" or \"RoCE v2\") after the last pass; always 1."},
}

// deviceMetrics is what one device contributes to the file, rendered after
// each pass over it so that a pass over one device does not render the
// others again.
type deviceMetrics struct {
	fam   [numDevFamilies][]byte // samples per family
	ports []portKey              // one per port
}

// portKey is the rdmad_ports labels of one port, escaped.
type portKey struct{ transport, state string }

func buildDevice(ds *reconcile.DeviceState) *deviceMetrics {
	dm := &deviceMetrics{ports: make([]portKey, 0, len(ds.Ports))}
	var b [numDevFamilies]bytes.Buffer
	dev := labelValue(ds.Name)
	b[famDrift].Grow(len(ds.Ports) * 3 * (len(`rdmad_port_drift{device="",port="",setting="roce_mode"} 0`) + len(dev) + 3))
	for i := range ds.Ports {
		p := &ds.Ports[i]
		state := p.State
		if state == "" {
			state = "unknown"
		}
		dm.ports = append(dm.ports, portKey{labelValue(string(p.Transport)), labelValue(state)})
		port := strconv.Itoa(p.Number)
		for _, d := range PortDrift(ds, p) {
			w := &b[famDrift]
			w.WriteString(`rdmad_port_drift{device="`)
			w.WriteString(dev)
			w.WriteString(`",port="`)
			w.WriteString(port)
			w.WriteString(`",setting="`)
			w.WriteString(d.Setting)
			if d.Drifted {
				w.WriteString("\"} 1\n")
			} else {
				w.WriteString("\"} 0\n")
			}
		}
		// The kernel's values, only where it holds them: a RoCE port whose
		// rdma_cm values were read (a device that did not read shows none).
		if p.Transport == host.TransportRoCE && p.RoCEKnown && ds.ReadError == nil {
			if p.RoCETOS >= 0 {
				b[famRoCETOS].WriteString(`rdmad_port_roce_tos{device="` + dev + `",port="` + port + `"} ` + strconv.Itoa(p.RoCETOS) + "\n")
			}
			if p.RoCEMode != "" {
				b[famRoCEMode].WriteString(`rdmad_port_roce_mode_info{device="` + dev + `",port="` + port + `",mode="` + labelValue(p.RoCEMode) + "\"} 1\n")
			}
		}
	}
	for f := range b {
		dm.fam[f] = b[f].Bytes()
	}
	return dm
}

// snapshot is what one write renders: the host-level facts plus the
// rendered devices.
type snapshot struct {
	sum         reconcile.Summary
	devices     map[string]*deviceMetrics
	configError bool
	inForce     config.InForce
	now         time.Time
	// findings is doctor's last run rendered (renderFindings), nil before
	// the first: the families are then written without samples.
	findings []byte
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

	family(b, "rdmad_devices", "RDMA devices present.")
	sample(b, "rdmad_devices", strconv.Itoa(len(s.sum.Devices)))

	counts := map[portKey]int{}
	for _, n := range s.sum.Devices {
		if dm := s.devices[n]; dm != nil {
			for _, k := range dm.ports {
				counts[k]++
			}
		}
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

	for f := range devFamilies {
		family(b, devFamilies[f].name, devFamilies[f].help)
		for _, n := range s.sum.Devices {
			if dm := s.devices[n]; dm != nil {
				b.Write(dm.fam[f])
			}
		}
	}

	if s.findings != nil {
		b.Write(s.findings)
	} else {
		renderFindingFamilies(b, nil, nil)
	}
}

// Doctor's findings (rdmactl doctor, org.rdmad1.Manager.Diagnose).
const (
	findingsHelp = "Doctor's findings by severity (ok, warn, fail; ignored ones are not counted), as rdmactl doctor shows them; computed off the pass, after full passes and at least every minute."
	findingHelp  = "1 for each standing warn, fail or ignored ([doctor] ignore) finding of doctor, by id, subject (as rdmactl doctor names it) and severity."
)

// severities are the rdmad_doctor_findings series, always all present. An
// ignored finding has none: it counts toward no alert on the counts.
var severities = []dbusapi.Severity{dbusapi.SeverityOK, dbusapi.SeverityWarn, dbusapi.SeverityFail}

// renderFindings renders doctor's findings: counts by severity, and one
// series per distinct warn, fail or ignored finding (two findings with the
// same id, subject and severity are one series: Prometheus refuses
// duplicates). An ignored finding is kept visible with severity="ignored"
// so a dashboard can show what a site silenced.
func renderFindings(fs []dbusapi.Finding) []byte {
	counts := map[dbusapi.Severity]int{}
	seen := map[string]bool{}
	var lines []string
	for _, f := range fs {
		counts[f.Severity]++
		if f.Severity == dbusapi.SeverityOK {
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
	renderFindingFamilies(&b, counts, lines)
	return b.Bytes()
}

func renderFindingFamilies(b *bytes.Buffer, counts map[dbusapi.Severity]int, lines []string) {
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
}

// family writes the HELP and TYPE lines; every rdmad metric is a gauge.
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
