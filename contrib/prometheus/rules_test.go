// Package prometheus tests rdmad's Prometheus rules and Grafana dashboard
// (contrib/prometheus): promtool checks the rule files and runs their unit
// tests; every alert has its summary, description and runbook section;
// every dashboard query parses and names only series rdmad or the
// recording rules write; and the whole runs on a real Prometheus scraping
// a real node_exporter that serves the textfile of the real rdmad on a
// fixture host (fleet_test.go).
package prometheus

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/test/livetest"
	"github.com/rdmad/rdmad/test/promtest"
)

var bins livetest.Binaries

func TestMain(m *testing.M) { livetest.Main(m, &bins) }

// runbookBase is where every alert's runbook_url points: a section of
// docs/runbook.md named after the alert.
const runbookBase = "https://github.com/rdmad/rdmad/blob/main/docs/runbook.md#"

// ruleFile is a Prometheus rule file.
type ruleFile struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []rule `json:"rules"`
	} `json:"groups"`
}

type rule struct {
	Alert       string            `json:"alert"`
	Record      string            `json:"record"`
	Expr        string            `json:"expr"`
	For         string            `json:"for"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

// readYAML decodes the YAML file path into v, strictly (a field v lacks
// is an error), through Debian's python3 and its yaml module (PyYAML,
// which test/install-deps.sh installs): the Go module has no YAML parser
// of its own for the two tests that need one.
func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		missing(t, "/usr/bin/python3")
	}
	cmd := exec.Command("/usr/bin/python3", "-c", `import json, sys, yaml
json.dump(yaml.safe_load(open(sys.argv[1], encoding="utf-8")), sys.stdout, default=str)`, path)
	out, err := cmd.Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok && strings.Contains(string(ee.Stderr), "No module named 'yaml'") {
			missing(t, "python3's yaml module (python3-yaml)")
		}
		t.Fatalf("read %s: %v", path, err)
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// missing skips a test for a tool test/install-deps.sh installs, or fails
// it where that ran (RDMAD_TEST_DEPS).
func missing(t *testing.T, what string) {
	t.Helper()
	if os.Getenv("RDMAD_TEST_DEPS") != "" {
		t.Fatalf("%s is missing although test/install-deps.sh ran (RDMAD_TEST_DEPS is set): it installs it", what)
	}
	t.Skipf("%s is missing (test/install-deps.sh test installs it; make test runs that)", what)
}

// shippedRules are contrib/prometheus/*.rules.yml, by file name.
func shippedRules(t *testing.T) map[string][]rule {
	t.Helper()
	files, err := filepath.Glob("*.rules.yml")
	if err != nil || len(files) < 2 {
		t.Fatalf("rule files: %v %v, want the alerts and the recording rules", files, err)
	}
	out := map[string][]rule{}
	for _, f := range files {
		var rf ruleFile
		readYAML(t, f, &rf)
		for _, g := range rf.Groups {
			out[f] = append(out[f], g.Rules...)
		}
	}
	return out
}

func allRules(t *testing.T) []rule {
	var out []rule
	for _, rs := range shippedRules(t) {
		out = append(out, rs...)
	}
	return out
}

func execOut(bin string, args ...string) ([]byte, error) {
	return exec.Command(bin, args...).CombinedOutput()
}

func promtool(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(promtest.Promtool(t), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// The shipped rule files load in Prometheus (promtool check rules).
func TestCheckRules(t *testing.T) {
	files, _ := filepath.Glob("*.rules.yml")
	out := promtool(t, append([]string{"check", "rules"}, files...)...)
	if strings.Count(out, "SUCCESS") != len(files) {
		t.Errorf("promtool check rules:\n%s", out)
	}
}

// Every rule's unit tests pass (promtool test rules), and the test files
// are no rule files (Prometheus would load them from a *.rules.yml glob).
func TestRuleUnitTests(t *testing.T) {
	tests, _ := filepath.Glob("tests/*.yml")
	if len(tests) < 2 {
		t.Fatalf("unit test files %v, want one per rule file", tests)
	}
	for _, f := range tests {
		if strings.HasSuffix(f, ".rules.yml") {
			t.Errorf("%s: a unit test file named like a rule file", f)
		}
	}
	promtool(t, append([]string{"test", "rules"}, tests...)...)
}

// unitTests is what the promtool test files test: the alerts with a case
// that fires and one that must not, and the recording rules evaluated.
type unitTests struct {
	fires, quiet, records map[string]bool
}

func readUnitTests(t *testing.T) unitTests {
	t.Helper()
	u := unitTests{fires: map[string]bool{}, quiet: map[string]bool{}, records: map[string]bool{}}
	files, _ := filepath.Glob("tests/*.yml")
	for _, f := range files {
		var doc struct {
			RuleFiles          []string `json:"rule_files"`
			EvaluationInterval string   `json:"evaluation_interval"`
			Tests              []struct {
				Interval    string            `json:"interval"`
				InputSeries []json.RawMessage `json:"input_series"`
				Alerts      []struct {
					EvalTime string `json:"eval_time"`
					Name     string `json:"alertname"`
					Exp      []any  `json:"exp_alerts"`
				} `json:"alert_rule_test"`
				Exprs []struct {
					Expr     string `json:"expr"`
					EvalTime string `json:"eval_time"`
					Exp      []any  `json:"exp_samples"`
				} `json:"promql_expr_test"`
			} `json:"tests"`
		}
		readYAML(t, f, &doc)
		for _, tc := range doc.Tests {
			for _, a := range tc.Alerts {
				if len(a.Exp) > 0 {
					u.fires[a.Name] = true
				} else {
					u.quiet[a.Name] = true
				}
			}
			for _, e := range tc.Exprs {
				u.records[strings.TrimSpace(e.Expr)] = true
			}
		}
	}
	return u
}

// Every alert has a severity, a summary, a description and a runbook
// section (docs/runbook.md has one per alert, and none for an alert that
// is gone), and unit tests with series that fire it and series that must
// not; every recording rule is evaluated by a unit test and named in
// docs/metrics.md.
func TestEveryRuleDocumentedAndTested(t *testing.T) {
	runbook, err := os.ReadFile(filepath.Join(hosttest.RepoRoot(), "docs/runbook.md"))
	if err != nil {
		t.Fatal(err)
	}
	metricsDoc, err := os.ReadFile(filepath.Join(hosttest.RepoRoot(), "docs/metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	sections := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^## (\S+)$`).FindAllStringSubmatch(string(runbook), -1) {
		sections[m[1]] = true
	}
	u := readUnitTests(t)
	alerts := map[string]bool{}
	for _, r := range allRules(t) {
		if r.Record != "" {
			if !u.records[r.Record] {
				t.Errorf("recording rule %s: no promql_expr_test evaluates it", r.Record)
			}
			if !strings.Contains(string(metricsDoc), "`"+r.Record+"`") {
				t.Errorf("recording rule %s is not named in docs/metrics.md", r.Record)
			}
			continue
		}
		alerts[r.Alert] = true
		if s := r.Labels["severity"]; !slices.Contains([]string{"critical", "warning", "info"}, s) {
			t.Errorf("%s: severity %q, want critical, warning or info", r.Alert, s)
		}
		for _, a := range []string{"summary", "description", "runbook_url"} {
			if strings.TrimSpace(r.Annotations[a]) == "" {
				t.Errorf("%s has no %s", r.Alert, a)
			}
		}
		if want := runbookBase + strings.ToLower(r.Alert); r.Annotations["runbook_url"] != want {
			t.Errorf("%s: runbook_url %q, want %q", r.Alert, r.Annotations["runbook_url"], want)
		}
		if !sections[r.Alert] {
			t.Errorf("docs/runbook.md has no section \"## %s\"", r.Alert)
		}
		if !u.fires[r.Alert] || !u.quiet[r.Alert] {
			t.Errorf("%s: unit tests with series that fire it: %v, that must not: %v", r.Alert, u.fires[r.Alert], u.quiet[r.Alert])
		}
	}
	for s := range sections {
		if !alerts[s] {
			t.Errorf("docs/runbook.md has a section for %s, which no rule defines", s)
		}
	}
}

// dashboard is the part of the Grafana dashboard the tests read.
type dashboard struct {
	Inputs []struct {
		Name, Type, PluginID string
	} `json:"__inputs"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Query      json.RawMessage `json:"query"`
			AllValue   string          `json:"allValue"`
			Datasource *datasource     `json:"datasource"`
			Current    struct {
				Value any `json:"value"`
			} `json:"current"`
		} `json:"list"`
	} `json:"templating"`
}

type datasource struct{ Type, UID string }

type panel struct {
	ID         int         `json:"id"`
	Type       string      `json:"type"`
	Title      string      `json:"title"`
	Datasource *datasource `json:"datasource"`
	Targets    []struct {
		RefID      string      `json:"refId"`
		Expr       string      `json:"expr"`
		Datasource *datasource `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

const dashboardFile = "rdmad-fleet.dashboard.json"

// dashboardQuery is one query of the dashboard, its variables
// substituted as Grafana would with their defaults.
type dashboardQuery struct {
	where, expr string
}

// grafanaBuiltins are Grafana's own variables, as a query of the
// dashboard would see them.
var grafanaBuiltins = map[string]string{"__rate_interval": "1m", "__interval": "15s", "__range": "24h", "__range_s": "86400"}

func readDashboard(t *testing.T) (dashboard, []dashboardQuery) {
	t.Helper()
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	vars := map[string]string{}
	for k, v := range grafanaBuiltins {
		vars[k] = v
	}
	var queries []dashboardQuery
	for _, v := range d.Templating.List {
		switch v.Type {
		case "query":
			var q struct{ Query string }
			if err := json.Unmarshal(v.Query, &q); err != nil {
				t.Fatalf("variable %s: query %s: %v", v.Name, v.Query, err)
			}
			// label_values(METRIC, LABEL) asks the series of METRIC.
			m := regexp.MustCompile(`^label_values\((.+),\s*\w+\)$`).FindStringSubmatch(q.Query)
			if m == nil {
				t.Fatalf("variable %s: query %q is not label_values(SERIES, LABEL)", v.Name, q.Query)
			}
			queries = append(queries, dashboardQuery{"variable " + v.Name, m[1]})
			if v.AllValue == "" {
				t.Errorf("variable %s has no allValue", v.Name)
			}
			vars[v.Name] = v.AllValue
		case "textbox", "custom", "constant":
			s, ok := v.Current.Value.(string)
			if !ok || s == "" {
				t.Fatalf("variable %s has no current value", v.Name)
			}
			vars[v.Name] = s
		default:
			t.Fatalf("variable %s: type %s", v.Name, v.Type)
		}
	}
	subst := regexp.MustCompile(`\$\{(\w+)\}|\$(\w+)`)
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			walk(p.Panels)
			for _, tg := range p.Targets {
				where := fmt.Sprintf("panel %d %q query %s", p.ID, p.Title, tg.RefID)
				expr := subst.ReplaceAllStringFunc(tg.Expr, func(s string) string {
					m := subst.FindStringSubmatch(s)
					name := m[1] + m[2]
					v, ok := vars[name]
					if !ok {
						t.Errorf("%s: unknown variable $%s", where, name)
					}
					return v
				})
				queries = append(queries, dashboardQuery{where, expr})
			}
		}
	}
	walk(d.Panels)
	return d, queries
}

// The dashboard is a Grafana 10 (schema 36 or later) export whose data
// source is the ${DS_PROMETHEUS} input, with a row for each fleet view;
// every query, its variables substituted, parses in promtool (wrapped
// into a generated rule file: promtool 2.42 has no PromQL formatter).
func TestDashboardQueriesParse(t *testing.T) {
	d, queries := readDashboard(t)
	if d.SchemaVersion < 36 {
		t.Errorf("schemaVersion %d, want Grafana 10's (36 or later)", d.SchemaVersion)
	}
	if len(d.Inputs) != 1 || d.Inputs[0].Name != "DS_PROMETHEUS" || d.Inputs[0].Type != "datasource" || d.Inputs[0].PluginID != "prometheus" {
		t.Errorf("__inputs %+v, want the one Prometheus data source DS_PROMETHEUS", d.Inputs)
	}
	var rows []string
	var check func([]panel)
	check = func(ps []panel) {
		for _, p := range ps {
			check(p.Panels)
			if p.Type == "row" {
				rows = append(rows, p.Title)
				continue
			}
			if p.Datasource == nil || p.Datasource.UID != "${DS_PROMETHEUS}" {
				t.Errorf("panel %q: data source %+v, want ${DS_PROMETHEUS}", p.Title, p.Datasource)
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
		}
	}
	check(d.Panels)
	for _, want := range []string{"Fleet status", "Drift", "Corrections and fights", "Doctor findings", "Versions", "Lossless uniformity"} {
		if !slices.Contains(rows, want) {
			t.Errorf("no row %q (rows: %v)", want, rows)
		}
	}

	type rec struct {
		Record string `json:"record"`
		Expr   string `json:"expr"`
	}
	var recs []rec
	for i, q := range queries {
		recs = append(recs, rec{fmt.Sprintf("dashboard:query_%d:check", i), q.expr})
	}
	// JSON is YAML: promtool reads the generated file as a rule file.
	gen, err := json.MarshalIndent(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": recs}}}, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "dashboard.rules.yml")
	if err := os.WriteFile(path, gen, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(promtest.Promtool(t), "check", "rules", path)
	if out, err := cmd.CombinedOutput(); err != nil {
		var lines []string
		for i, q := range queries {
			lines = append(lines, fmt.Sprintf("query_%d: %s: %s", i, q.where, q.expr))
		}
		t.Errorf("promtool check rules on the dashboard's queries: %v\n%s\n%s", err, out, strings.Join(lines, "\n"))
	}
}

// Every dashboard query names only series rdmad writes or the recording
// rules record; every rule names only those and, for RdmadAbsent,
// node_exporter's own infiniband collector's.
func TestQueriesNameOnlyKnownSeries(t *testing.T) {
	known := knownSeries(t)
	_, queries := readDashboard(t)
	for _, q := range queries {
		for _, name := range seriesNames(t, q.expr) {
			if !known[name] {
				t.Errorf("%s names %s, which neither rdmad nor the recording rules write:\n%s", q.where, name, q.expr)
			}
		}
	}
	for _, r := range allRules(t) {
		for _, name := range seriesNames(t, r.Expr) {
			if !known[name] && !nodeExporterSeries[name] {
				t.Errorf("rule %s%s names %s, which neither rdmad nor the recording rules write:\n%s", r.Alert, r.Record, name, r.Expr)
			}
		}
	}
}

// nodeExporterSeries are node_exporter's own series a rule may name:
// RdmadAbsent finds RDMA hosts without rdmad through its infiniband
// collector.
var nodeExporterSeries = map[string]bool{"node_infiniband_info": true}

// knownSeries are the series a query may name: the families of a
// textfile the real rdmad wrote (rdmadFamilies), those docs/metrics.md
// documents, and the recording rules' names.
func knownSeries(t *testing.T) map[string]bool {
	t.Helper()
	known := map[string]bool{}
	written := rdmadFamilies(t)
	for _, n := range written {
		known[n] = true
	}
	doc, err := os.ReadFile(filepath.Join(hosttest.RepoRoot(), "docs/metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `(rdmad_[a-z_]+)` \\|").FindAllStringSubmatch(string(doc), -1) {
		known[m[1]], documented[m[1]] = true, true
	}
	if len(documented) < 10 {
		t.Fatalf("docs/metrics.md's table documents %d metrics; has its layout changed?", len(documented))
	}
	for _, n := range written {
		if !documented[n] {
			t.Errorf("rdmad writes %s, which docs/metrics.md's table does not document", n)
		}
	}
	for _, r := range allRules(t) {
		if r.Record != "" {
			known[r.Record] = true
		}
	}
	return known
}

// promqlKeywords are the words of PromQL that are not series: operators,
// aggregations (which may be followed by their grouping), modifiers and
// the literals Inf and NaN.
var promqlKeywords = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true,
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	"inf": true, "nan": true, "start": true, "end": true, "atan2": true,
	"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true,
	"count": true, "count_values": true, "bottomk": true, "topk": true, "quantile": true}

// groupingKeywords take a parenthesized list of labels, not an expression.
var groupingKeywords = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}

// seriesNames lists the series a PromQL expression selects by name: its
// identifiers that are neither functions or aggregations (followed by a
// parenthesis), keywords, label names (inside braces or a grouping
// list), strings nor durations. It reads PromQL as promtool's parser
// does for these tokens; TestSeriesNames checks it.
func seriesNames(t *testing.T, expr string) []string {
	t.Helper()
	var out []string
	skipString := func(i int) int { // i at the opening quote; returns the index after the closing one
		q := expr[i]
		for j := i + 1; j < len(expr); j++ {
			switch {
			case expr[j] == '\\' && q != '`':
				j++
			case expr[j] == q:
				return j + 1
			}
		}
		t.Fatalf("unterminated string in %q", expr)
		return len(expr)
	}
	skipTo := func(i int, close byte) int { // past the matching close, strings skipped
		for j := i + 1; j < len(expr); {
			switch c := expr[j]; {
			case c == '"' || c == '\'' || c == '`':
				j = skipString(j)
			case c == close:
				return j + 1
			default:
				j++
			}
		}
		t.Fatalf("unbalanced %q in %q", close, expr)
		return len(expr)
	}
	isStart := func(c byte) bool { return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
	isPart := func(c byte) bool { return isStart(c) || c >= '0' && c <= '9' }
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			i = skipString(i)
		case c == '{':
			i = skipTo(i, '}')
		case c == '[':
			i = skipTo(i, ']')
		case c >= '0' && c <= '9' || c == '.':
			for i < len(expr) && (isPart(expr[i]) || expr[i] == '.') {
				i++
			}
		case isStart(c):
			j := i
			for j < len(expr) && isPart(expr[j]) {
				j++
			}
			word := expr[i:j]
			k := j
			for k < len(expr) && (expr[k] == ' ' || expr[k] == '\t' || expr[k] == '\n') {
				k++
			}
			lower := strings.ToLower(word)
			switch {
			case groupingKeywords[lower] && k < len(expr) && expr[k] == '(':
				j = skipTo(k, ')')
			case promqlKeywords[lower], k < len(expr) && expr[k] == '(':
				// a keyword, a function or an aggregation
			default:
				out = append(out, word)
			}
			i = j
		default:
			i++
		}
	}
	sort.Strings(out)
	return slices.Compact(out)
}

func TestSeriesNames(t *testing.T) {
	for _, c := range []struct {
		expr string
		want []string
	}{
		{`rdmad_port_drift == 1`, []string{"rdmad_port_drift"}},
		{`sum by (setting) (max by (instance, setting) (rdmad_port_drift or rdmad_host_drift))`, []string{"rdmad_host_drift", "rdmad_port_drift"}},
		{`count_values by (policy) ("pfc_mask", rdmad_qos_pfc_mask)`, []string{"rdmad_qos_pfc_mask"}},
		{`time() - rdmad_heartbeat_timestamp_seconds{instance=~"a|b", job!="x{y}"} > 300`, []string{"rdmad_heartbeat_timestamp_seconds"}},
		{`increase(rdmad_drift_corrected_total[1h] offset 5m) > 0`, []string{"rdmad_drift_corrected_total"}},
		{`count by (job, instance) (node_infiniband_info) unless on (instance) group_left (x) rdmad_build_info`, []string{"node_infiniband_info", "rdmad_build_info"}},
		{`sum(x) without (a) / ignoring(b) y:rec:sum > bool Inf`, []string{"x", "y:rec:sum"}},
		{`label_replace(up, "a", "$1", "b", "(.*)")`, []string{"up"}},
		{`vector(0) or count(bogus_series == 0)`, []string{"bogus_series"}},
	} {
		if got := seriesNames(t, c.expr); !slices.Equal(got, c.want) {
			t.Errorf("seriesNames(%q) = %v, want %v", c.expr, got, c.want)
		}
	}
}
