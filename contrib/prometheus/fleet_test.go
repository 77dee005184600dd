package prometheus

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/test/bustest"
	"github.com/rdmad/rdmad/test/livetest"
	"github.com/rdmad/rdmad/test/promtest"
)

// textfileDir is node_exporter's textfile directory on the fixture host,
// Debian's default, where rdmad writes rdmad.prom.
const textfileDir = "var/lib/prometheus/node-exporter"

// startRdmad runs the real rdmad on a copy of the demo fixture host on a
// private bus, with the metrics textfile on and the extra drop-in, and
// waits until the file shows doctor's findings and rdmad on the bus.
func startRdmad(t *testing.T, dropin string) (root string) {
	t.Helper()
	addr := bustest.Start(t)
	root, env := livetest.DemoHost(t)
	hosttest.Write(t, root, "etc/rdma/rdmad.d/40-metrics.toml", "[metrics]\ntextfile = \"/"+textfileDir+"/rdmad.prom\"\n"+dropin)
	livetest.Start(t, bins, addr, root, env)
	deadline := time.Now().Add(30 * time.Second)
	for {
		data, _ := os.ReadFile(filepath.Join(root, textfileDir, "rdmad.prom"))
		if strings.Contains(string(data), "\nrdmad_doctor_findings{") && strings.Contains(string(data), "\nrdmad_dbus_connected 1\n") {
			return root
		}
		if time.Now().After(deadline) {
			t.Fatalf("rdmad's textfile has no doctor findings or no rdmad_dbus_connected 1 after 30 s:\n%s", data)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// rdmadFamilies are the metric families of a textfile the real rdmad
// wrote: every family it writes has its TYPE line, samples or not.
func rdmadFamilies(t *testing.T) []string {
	t.Helper()
	root := startRdmad(t, "")
	data, err := os.ReadFile(filepath.Join(root, textfileDir, "rdmad.prom"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range regexp.MustCompile(`(?m)^# TYPE (\S+) `).FindAllStringSubmatch(string(data), -1) {
		out = append(out, m[1])
	}
	if len(out) < 10 {
		t.Fatalf("rdmad's textfile has %d families:\n%s", len(out), data)
	}
	return out
}

// shortFor are the rules' for: durations in the copy the real Prometheus
// loads: the alerts must fire within the test's bounds.
var shortFor = regexp.MustCompile(`(?m)^(\s+for:) \S+$`)

// olderHost is the textfile of a second host, as an older rdmad wrote
// it (%.3f: its heartbeat): another version (version skew), and an
// [[expect]] rule not met (an adapter missing).
const olderHost = `# rdmad textfile metrics (see docs/metrics.md); written by rdmad, do not edit.
# HELP rdmad_build_info rdmad's version, the commit it was built from and its Go version; always 1.
# TYPE rdmad_build_info gauge
rdmad_build_info{version="0.9.0",revision="0000000000000000000000000000000000000000",goversion="go1.24.4"} 1
# HELP rdmad_heartbeat_timestamp_seconds When rdmad wrote this file, Unix time; rewritten at least once a minute while rdmad runs.
# TYPE rdmad_heartbeat_timestamp_seconds gauge
rdmad_heartbeat_timestamp_seconds %.3f
# HELP rdmad_expect_missing [[expect]] rules not met because devices are missing.
# TYPE rdmad_expect_missing gauge
rdmad_expect_missing 1
`

// prom is a running Prometheus, queried through its HTTP API.
type prom struct {
	t    *testing.T
	base string
	ctx  context.Context
}

// api GETs path (with its query) and decodes the answer's data into v; a
// status other than success fails the test.
func (p *prom) api(path string, v any) {
	p.t.Helper()
	code, body, err := promtest.Get(p.ctx, p.base+path)
	if err != nil {
		p.t.Fatalf("GET %s: %v", path, err)
	}
	var r struct {
		Status, Error string
		Data          json.RawMessage
	}
	if err := json.Unmarshal(body, &r); err != nil || r.Status != "success" {
		p.t.Fatalf("GET %s: %d %v %s", path, code, err, body)
	}
	if err := json.Unmarshal(r.Data, v); err != nil {
		p.t.Fatalf("GET %s: %v\n%s", path, err, r.Data)
	}
}

// sample is one element of an instant vector.
type sample struct {
	Metric map[string]string
	Value  [2]any
}

func (p *prom) query(q string) []sample {
	p.t.Helper()
	var d struct {
		ResultType string
		Result     []sample
	}
	p.api("/api/v1/query?query="+url.QueryEscape(q), &d)
	return d.Result
}

// alert is one element of /api/v1/alerts.
type alert struct {
	Labels map[string]string
	State  string
}

func (p *prom) alerts() []alert {
	p.t.Helper()
	var d struct{ Alerts []alert }
	p.api("/api/v1/alerts", &d)
	return d.Alerts
}

// firing says whether alert name fires with labels (a subset).
func (p *prom) firing(name string, labels map[string]string) bool {
	p.t.Helper()
	for _, a := range p.alerts() {
		if a.Labels["alertname"] != name || a.State != "firing" {
			continue
		}
		match := true
		for k, v := range labels {
			match = match && a.Labels[k] == v
		}
		if match {
			return true
		}
	}
	return false
}

// eventually polls cond every 250 ms until it holds or the test's
// context ends.
func (p *prom) eventually(what string, cond func() bool) {
	p.t.Helper()
	for !cond() {
		select {
		case <-p.ctx.Done():
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			late := &prom{t: p.t, base: p.base, ctx: ctx}
			var names []string
			for _, a := range late.alerts() {
				names = append(names, fmt.Sprintf("%s %s %v", a.Labels["alertname"], a.State, a.Labels))
			}
			sort.Strings(names)
			p.t.Fatalf("never: %s (alerts: %s)", what, strings.Join(names, "; "))
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// fleet is the two hosts, their node_exporters and the Prometheus that
// scrapes them.
type fleet struct {
	prom        *prom
	root        string // the fixture host rdmad runs on
	host, older string // the two scrape targets
}

// startFleet starts the fleet of TestFleetOnRealPrometheus; args go to
// Prometheus.
func startFleet(t *testing.T, ctx context.Context, args ...string) fleet {
	t.Helper()
	promtool := promtest.Promtool(t)
	prometheus := promtest.Tool(t, "prometheus")
	nodeExporter := promtest.Tool(t, "prometheus-node-exporter", "node_exporter")

	root := startRdmad(t, "[drift]\naction = \"report\"\n\n[[roce]]\ndevice = \"mlx5_0\"\nport = 1\ntos = 106\n\n"+
		"[[qos]]\ndevice = \"mlx5_0\"\npfc = [3]\ntrust = \"dscp\"\n")
	older := t.TempDir()
	if err := os.WriteFile(filepath.Join(older, "rdmad.prom"), []byte(fmt.Sprintf(olderHost, float64(time.Now().UnixMilli())/1e3)), 0o644); err != nil {
		t.Fatal(err)
	}
	var targets []string
	for _, dir := range []string{filepath.Join(root, textfileDir), older} {
		addr := promtest.Addr(t)
		promtest.Start(t, "node_exporter "+addr, addr, "/metrics", nodeExporter, "--web.listen-address="+addr,
			"--collector.disable-defaults", "--collector.textfile", "--collector.textfile.directory="+dir)
		targets = append(targets, addr)
	}

	// The shipped rules, for: durations shortened.
	work := t.TempDir()
	files, _ := filepath.Glob("*.rules.yml")
	var ruleFiles []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		short := shortFor.ReplaceAll(data, []byte("$1 2s"))
		path := filepath.Join(work, f)
		if err := os.WriteFile(path, short, 0o644); err != nil {
			t.Fatal(err)
		}
		ruleFiles = append(ruleFiles, path)
	}
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files: [%q, %q]
scrape_configs:
  - job_name: node
    static_configs:
      - targets: [%q, %q]
`, ruleFiles[0], ruleFiles[1], targets[0], targets[1])
	cfgPath := filepath.Join(work, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := execOut(promtool, "check", "config", cfgPath); err != nil {
		t.Fatalf("promtool check config: %v\n%s", err, out)
	}
	addr := promtest.Addr(t)
	promtest.Start(t, "prometheus", addr, "/-/ready", prometheus, append([]string{"--config.file=" + cfgPath,
		"--storage.tsdb.path=" + filepath.Join(work, "data"), "--web.listen-address=" + addr}, args...)...)
	return fleet{prom: &prom{t: t, base: "http://" + addr, ctx: ctx}, root: root, host: targets[0], older: targets[1]}
}

// The fleet on real servers: node_exporter's textfile collector serves
// the file the real rdmad writes on the demo fixture host (and a second
// host's file, as an older rdmad wrote it), Prometheus scrapes both every
// second and evaluates a copy of the shipped rules with short for:
// durations every second. Through Prometheus's HTTP API: the series
// arrive, the lossless values among them (the fixture carries its
// netdevs' DCB state); every rule evaluates without error; a bad drop-in fires
// RdmadConfigError, which resolves once it is fixed; an out-of-band TOS
// change under [drift] action = "report" fires RdmaPolicyDrift and shows
// in the fleet-drift recording rule; the version skew and the missing
// adapter of the second host fire; every dashboard query evaluates.
// Everything listens on 127.0.0.1 and stops when the test ends.
func TestFleetOnRealPrometheus(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	f := startFleet(t, ctx)
	p, root, host, olderHostAddr := f.prom, f.root, f.host, f.older

	// The series arrive through node_exporter, the recording rules
	// record, every rule evaluates without error.
	p.eventually("rdmad's series scraped from the fixture host", func() bool {
		return len(p.query(`rdmad_dbus_connected{instance="`+host+`"} == 1`)) == 1 &&
			len(p.query(`rdmad_devices{instance="`+host+`"} == 4`)) == 1 &&
			len(p.query(`rdmad_doctor_findings{instance="`+host+`",severity="ok"} > 0`)) == 1
	})
	rules := len(allRules(t))
	p.eventually("every rule evaluated, none in error", func() bool {
		var d struct {
			Groups []struct {
				Rules []struct {
					Name, Health, LastError string
				}
			}
		}
		p.api("/api/v1/rules", &d)
		n := 0
		for _, g := range d.Groups {
			for _, r := range g.Rules {
				if r.Health == "err" {
					t.Fatalf("rule %s: %s", r.Name, r.LastError)
				}
				if r.Health == "ok" {
					n++
				}
			}
		}
		return n == rules
	})
	// The lossless values of the fixture's ConnectX-5 netdevs (its DCB
	// state file): mlx5_0's as declared, mlx5_1's as found.
	p.eventually("the QoS values of both RoCE ports", func() bool {
		return len(p.query(`rdmad_qos_pfc_mask{instance="`+host+`",device="mlx5_0",policy="holds"} == 8`)) == 1 &&
			len(p.query(`rdmad_qos_trust_info{instance="`+host+`",device="mlx5_0",trust="dscp",policy="holds"}`)) == 1 &&
			len(p.query(`rdmad_qos_pfc_mask{instance="`+host+`",device="mlx5_1",policy="undeclared"}`)) == 1 &&
			len(p.query(`pfc_mask_policy:rdmad_qos_pfc_mask:netdevs{pfc_mask="8",policy="holds"} == 1`)) == 1
	})
	p.eventually("the fleet of two hosts", func() bool {
		r := p.query(`fleet:rdmad_hosts:count`)
		return len(r) == 1 && r[0].Value[1] == "2"
	})

	// A configuration error fires after its for:, and resolves.
	hosttest.Write(t, root, "etc/rdma/rdmad.d/60-bad.toml", "[[roce]]\ndevice = \"mlx5_1\"\ntos = 300\n")
	p.eventually("RdmadConfigError fires after a bad drop-in", func() bool {
		return p.firing("RdmadConfigError", map[string]string{"instance": host, "severity": "warning"})
	})
	if err := os.Remove(filepath.Join(root, "etc/rdma/rdmad.d/60-bad.toml")); err != nil {
		t.Fatal(err)
	}
	p.eventually("RdmadConfigError resolves once the drop-in is fixed", func() bool {
		return !p.firing("RdmadConfigError", nil) && len(p.query(`rdmad_config_error{instance="`+host+`"} == 0`)) == 1
	})

	// An out-of-band change under [drift] action = "report": drift, the
	// alert, the fleet view.
	if p.firing("RdmaPolicyDrift", nil) {
		t.Fatal("RdmaPolicyDrift fires before anything changed")
	}
	hosttest.Write(t, root, host0TOS, "42\n")
	p.eventually("RdmaPolicyDrift fires after an out-of-band TOS change", func() bool {
		return p.firing("RdmaPolicyDrift", map[string]string{"instance": host, "device": "mlx5_0", "port": "1", "setting": "roce_tos"})
	})
	if got := p.query(`setting:rdmad_drift:hosts{setting="roce_tos"}`); len(got) != 1 || got[0].Value[1] != "1" {
		t.Errorf("setting:rdmad_drift:hosts{setting=\"roce_tos\"} = %v, want 1", got)
	}
	if v := hosttest.Read(t, root, host0TOS); v != "42" {
		t.Errorf("TOS %q under [drift] action = \"report\": rdmad put it back", v)
	}

	// The second host: an older rdmad, an adapter missing.
	p.eventually("RdmaVersionSkew fires for two versions", func() bool { return p.firing("RdmaVersionSkew", nil) })
	p.eventually("RdmaAdapterMissing fires for the second host", func() bool {
		return p.firing("RdmaAdapterMissing", map[string]string{"instance": olderHostAddr, "severity": "critical"})
	})
	if got := p.query(`version:rdmad_build_info:hosts`); len(got) != 2 {
		t.Errorf("version:rdmad_build_info:hosts = %v, want two versions", got)
	}
	for _, quiet := range []string{"RdmadDBusDisconnected", "RdmadStale", "RdmadNothingDeclared", "RdmaLosslessBroken"} {
		if p.firing(quiet, nil) {
			t.Errorf("%s fires", quiet)
		}
	}

	// Every dashboard query evaluates on the real server.
	_, queries := readDashboard(t)
	for _, q := range queries {
		var d struct{ ResultType string }
		p.api("/api/v1/query?query="+url.QueryEscape(q.expr), &d)
	}

	// The drift is put right: the alert resolves.
	hosttest.Write(t, root, host0TOS, "106\n")
	p.eventually("RdmaPolicyDrift resolves once the TOS is set back", func() bool { return !p.firing("RdmaPolicyDrift", nil) })
}

// host0TOS is the TOS of mlx5_0 port 1 in the fixture's configfs.
var host0TOS = host.ConfigfsPortPath("mlx5_0", 1, "default_roce_tos")
