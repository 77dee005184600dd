package metrics

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/rdmad/rdmad/test/promtest"
)

// Test helpers, exported for service_test.go too.

// ParseText reads a file as node_exporter's textfile collector does (the same
// expfmt parser, legacy metric names) and checks what the collector and
// Prometheus require beyond parsing: valid UTF-8, HELP and TYPE for every
// family, no sample timestamps (the collector refuses them).
func ParseText(t testing.TB, data []byte) map[string]*dto.MetricFamily {
	t.Helper()
	if !utf8.Valid(data) {
		t.Fatalf("file is not valid UTF-8:\n%s", data)
	}
	if !bytes.HasPrefix(data, []byte(Header)) {
		t.Errorf("file does not start with the header %q", Header)
	}
	var p expfmt.TextParser
	fams, err := p.TextToMetricFamilies(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("not valid Prometheus text: %v\n%s", err, data)
	}
	for name, f := range fams {
		if f.GetHelp() == "" {
			t.Errorf("%s has no HELP", name)
		}
		// Counters end in _total (rdmad_drift_corrected_total); every
		// other rdmad metric is a gauge.
		want := dto.MetricType_GAUGE
		if strings.HasSuffix(name, "_total") {
			want = dto.MetricType_COUNTER
		}
		if f.GetType() != want {
			t.Errorf("%s: TYPE %v, want %v", name, f.GetType(), want)
		}
		for _, m := range f.Metric {
			if m.TimestampMs != nil {
				t.Errorf("%s carries a timestamp, which the textfile collector refuses", name)
			}
		}
	}
	return fams
}

// Sample returns the value of the sample of family name whose labels are
// exactly labels ("k=v" pairs); ok false when there is none.
func Sample(fams map[string]*dto.MetricFamily, name string, labels ...string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
	want := map[string]string{}
	for _, l := range labels {
		k, v, _ := strings.Cut(l, "=")
		want[k] = v
	}
	for _, m := range f.Metric {
		got := map[string]string{}
		for _, lp := range m.Label {
			got[lp.GetName()] = lp.GetValue()
		}
		if reflect.DeepEqual(got, want) {
			if m.Counter != nil {
				return m.GetCounter().GetValue(), true
			}
			return m.GetGauge().GetValue(), true
		}
	}
	return 0, false
}

// Promtool runs `promtool check metrics` (Prometheus's own linter: naming,
// units, HELP, duplicates) on data; no output and exit 0 is clean.
// test/install-deps.sh puts promtool in .tools/ when it is not in PATH.
func Promtool(t testing.TB, data []byte) { promtest.CheckMetrics(t, data) }
