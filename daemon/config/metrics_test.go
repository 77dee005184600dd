package config

import (
	"strings"
	"testing"
)

func TestMetricsTextfileOffByDefault(t *testing.T) {
	p, err := Parse("rdmad.toml", []byte("[modules]\nenable = true\n"))
	if err != nil {
		t.Fatal(err)
	}
	if p.Metrics.Textfile != "" {
		t.Errorf("Metrics.Textfile = %q without [metrics], want off", p.Metrics.Textfile)
	}
}

// Drop-ins set, move and turn off the textfile key by key, like every
// other scalar key.
func TestMetricsTextfileMergesAcrossDropIns(t *testing.T) {
	root := t.TempDir()
	writeFile(t, root, MainFile, "[metrics]\ntextfile = \"/var/lib/prometheus/node-exporter//rdmad.prom\"\n")
	p, err := load(root)
	if err != nil {
		t.Fatal(err)
	}
	if want := "/var/lib/prometheus/node-exporter/rdmad.prom"; p.Metrics.Textfile != want {
		t.Errorf("Textfile = %q, want the cleaned path %q", p.Metrics.Textfile, want)
	}

	writeFile(t, root, DropInDir+"/10-metrics.toml", "[metrics]\ntextfile = \"/run/node-exporter/rdmad.prom\"\n")
	if p, err = load(root); err != nil {
		t.Fatal(err)
	}
	if want := "/run/node-exporter/rdmad.prom"; p.Metrics.Textfile != want {
		t.Errorf("Textfile = %q, want the drop-in's %q", p.Metrics.Textfile, want)
	}

	writeFile(t, root, DropInDir+"/20-off.toml", "[metrics]\ntextfile = \"\"\n")
	if p, err = load(root); err != nil {
		t.Fatal(err)
	}
	if p.Metrics.Textfile != "" {
		t.Errorf("Textfile = %q, want a later textfile = \"\" to turn metrics off", p.Metrics.Textfile)
	}
}

// rdmad's own drop-in never carries [metrics]: it is not set over D-Bus.
func TestLoadPersistedRejectsMetrics(t *testing.T) {
	_, err := parsePersisted(PersistedName, []byte(PersistedHeader+"[metrics]\ntextfile = \"/run/a.prom\"\n"))
	if err == nil || !strings.Contains(err.Error(), PersistedName+":2: metrics: rdmad does not persist this table") {
		t.Errorf("err = %v, want the [metrics] table refused at line 2", err)
	}
}
