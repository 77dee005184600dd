package config

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// Bad [[expect]], [doctor] and check_units values are errors naming the
// file, the line and the key.
func TestHealthTablesRejectBadInput(t *testing.T) {
	const file = "/etc/rdma/rdmad.d/20-expect.toml"
	for _, tc := range []struct {
		name string
		toml string
		line int
		want []string
	}{
		{"expect without selector", "[[expect]]\nport = 2\nstate = \"down\"\n", 1, []string{"expect[0]: no device selector"}},
		{"expect nothing", "# x\n[[expect]]\ndevice = \"mlx5_0\"\nport = 2\n", 2, []string{"expect[0]: expects nothing", "state, rate, width, pcie, count"}},
		{"expect count zero", "[[expect]]\ndriver = \"mlx5_core\"\ncount = 0\n", 3, []string{"expect[0].count", "0 is out of range"}},
		{"expect count string", "[[expect]]\ndriver = \"mlx5_core\"\ncount = \"2\"\n", 3, []string{"expect[0].count", "must be an integer"}},
		{"expect bad state", "[[expect]]\ndevice = \"mlx5_0\"\nstate = \"active\"\n", 3, []string{"expect[0].state", `"active" is not a port state`, `"up"`, `"down"`}},
		{"expect rate string", "[[expect]]\ndriver = \"mlx5_core\"\nrate = \"200G\"\n", 3, []string{"expect[0].rate", "must be a rate in Gb/s", `a string ("200G")`}},
		{"expect rate zero", "[[expect]]\ndriver = \"mlx5_core\"\n\nrate = 0\n", 4, []string{"expect[0].rate", "out of range"}},
		{"expect width", "[[expect]]\ndriver = \"mlx5_core\"\nwidth = \"4\"\n", 3, []string{"expect[0].width", `"4" is not a link width`, `"4X"`}},
		{"expect width 3X", "[[expect]]\ndriver = \"mlx5_core\"\nwidth = \"3X\"\n", 3, []string{"expect[0].width", `"3X" is not a link width`}},
		{"expect pcie", "[[expect]]\ndriver = \"mlx5_core\"\npcie = \"x16\"\n", 3, []string{"expect[0].pcie", `"x16" is not a PCIe link`, "16.0 GT/s x16"}},
		{"expect pcie speed", "[[expect]]\ndriver = \"mlx5_core\"\npcie = \"12.0 GT/s x16\"\n", 3, []string{"expect[0].pcie", "not a PCIe link"}},
		{"expect down with rate", "[[expect]]\ndevice = \"mlx5_0\"\nport = 2\nstate = \"down\"\nrate = 100\n", 1, []string{"expect[0]", `state = "down" judges nothing`}},
		{"expect unknown key", "[[expect]]\ndevice = \"mlx5_0\"\nspeed = 100\n", 3, []string{"expect[0].speed: unknown key", "[[expect]] accepts", "rate", "pcie"}},
		{"expect single table", "[expect]\ndevice = \"mlx5_0\"\nstate = \"up\"\n", 1, []string{"expect: must be an array of tables", "[[expect]]"}},
		{"ignore not an array", "[doctor]\nignore = \"nfs-*\"\n", 2, []string{"doctor.ignore", "must be an array of finding ids"}},
		{"ignore upper case", "[doctor]\nignore = [\"Port-No-SM\"]\n", 2, []string{"doctor.ignore[0]", `"Port-No-SM" is not a finding id`}},
		{"ignore empty id", "[doctor]\nignore = [\":mlx5_0/1\"]\n", 2, []string{"doctor.ignore[0]", "names no finding id"}},
		{"ignore empty subject", "[doctor]\n\nignore = [\"port-no-sm:\"]\n", 3, []string{"doctor.ignore[0]", "empty subject"}},
		{"ignore bad glob", "[doctor]\nignore = [\"port-no-sm:mlx4_[\"]\n", 2, []string{"doctor.ignore[0]", "not a valid glob"}},
		{"ignore not a string", "[doctor]\nignore = [1]\n", 2, []string{"doctor.ignore[0]", "must be a string"}},
		{"doctor unknown key", "[doctor]\nsilence = [\"x\"]\n", 2, []string{"doctor.silence: unknown key", "[doctor] accepts ignore, counters"}},
		{"counters interval", "[doctor.counters]\ninterval = \"1 minute\"\n", 2, []string{"doctor.counters.interval", `"1 minute" is not a duration`}},
		{"counters interval short", "[doctor.counters]\ninterval = \"500ms\"\n", 2, []string{"doctor.counters.interval", "500ms is out of range"}},
		{"counters interval long", "[doctor.counters]\ninterval = \"2h\"\n", 2, []string{"doctor.counters.interval", "out of range"}},
		{"counters negative", "[doctor.counters]\nsymbol_error = -1\n", 2, []string{"doctor.counters.symbol_error", "-1 is out of range"}},
		{"counters unknown", "[doctor.counters]\nsymbol_errors = 3\n", 2, []string{"doctor.counters.symbol_errors: unknown key", "interval, symbol_error"}},
		{"counters case", "[doctor.counters]\nvl15_dropped = 3\n", 2, []string{"doctor.counters.vl15_dropped", "did you mean VL15_dropped?"}},
		{"check_units socket", "[memlock]\ncheck_units = [\"slurmd.socket\"]\n", 2, []string{"memlock.check_units[0]", "is not a service"}},
		{"check_units not array", "[memlock]\ncheck_units = \"slurmd\"\n", 2, []string{"memlock.check_units", "must be an array of service names"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(file, []byte(tc.toml))
			if err == nil {
				t.Fatal("accepted")
			}
			msg := err.Error()
			prefix := file + ":" + strconv.Itoa(tc.line) + ": "
			if !strings.HasPrefix(msg, prefix) {
				t.Errorf("error %q does not start with %q", msg, prefix)
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q lacks %q", msg, w)
				}
			}
		})
	}
}

func TestExpectForResolvesEachFieldAndTellsExactRules(t *testing.T) {
	p, err := Parse("/etc/rdma/rdmad.toml", []byte(`[[expect]]
driver = "mlx5_core"
state = "up"
rate = 200
width = "4X"
pcie = "16 GT/s x16"

[[expect]]
device = "mlx5_0"
port = 2
state = "down"

[[expect]]
pci = "0000:3b:00.*"
rate = 12.5
`))
	if err != nil {
		t.Fatal(err)
	}
	mlx5 := Target{Name: "mlx5_0", Driver: "mlx5_core", PCI: "0000:3b:00.0"}
	e1 := p.ExpectFor(mlx5, 1)
	if e1.State != ExpectUp || e1.StateSource.Line != 1 || e1.Rate != 12.5 || e1.RateSource.Line != 13 || e1.Width != 4 ||
		e1.PCIe == nil || *e1.PCIe != (PCIeLink{16, 16}) || e1.PCIe.String() != "16.0 GT/s x16" {
		t.Errorf("mlx5_0/1: %+v", e1)
	}
	if e2 := p.ExpectFor(mlx5, 2); e2.State != ExpectDown || e2.StateSource.Line != 8 || e2.Width != 4 {
		t.Errorf("mlx5_0/2: %+v", e2)
	}
	if e := p.ExpectFor(Target{Name: "rxe0", Driver: "rdma_rxe"}, 1); !e.Empty() {
		t.Errorf("rxe0/1 selected: %+v", e)
	}
	exact := map[int]bool{0: false, 1: true, 2: false}
	for i, r := range p.Expect {
		if r.Exact() != exact[i] {
			t.Errorf("rule %d Exact = %v", i, r.Exact())
		}
	}
	for sel, want := range map[string]bool{`guid = "b859:9f03:00d4:2e7a"`: true, `pci = "0000:3b:00.0"`: true, `device = "mlx5_*"`: false, `netdev = "ens1f0np0"`: false} {
		p, err := Parse("f.toml", []byte("[[expect]]\n"+sel+"\nstate = \"up\"\n"))
		if err != nil {
			t.Fatal(err)
		}
		if p.Expect[0].Exact() != want {
			t.Errorf("%s: Exact = %v", sel, !want)
		}
	}
}

// A rule requires its devices when it counts them or names one device;
// a glob or driver rule without count, and an exact rule that only says a
// port is unused, match nothing by design.
func TestExpectRequiresPresence(t *testing.T) {
	for rule, least := range map[string]int{
		"device = \"mlx5_0\"\nstate = \"up\"":                      1,
		"pci = \"0000:3b:00.1\"\nrate = 100":                       1,
		"guid = \"b859:9f03:00d4:2e7a\"\npcie = \"8 GT/s x8\"":     1,
		"device = \"mlx5_1\"\nport = 2\nstate = \"down\"":          0,
		"device = \"mlx5_1\"\nstate = \"down\"\ncount = 1":         1,
		"driver = \"mlx5_core\"\nstate = \"up\"":                   0,
		"driver = \"mlx5_core\"\ncount = 2":                        2,
		"device = \"mlx5_*\"\nport = 1\ncount = 4\nstate = \"up\"": 4,
	} {
		p, err := Parse("f.toml", []byte("[[expect]]\n"+rule+"\n"))
		if err != nil {
			t.Fatalf("%s: %v", rule, err)
		}
		r := p.Expect[0]
		if r.Least() != least || r.RequiresPresence() != (least > 0) {
			t.Errorf("%q: Least %d RequiresPresence %v, want %d", rule, r.Least(), r.RequiresPresence(), least)
		}
	}
}

func TestDoctorTableMergesAcrossFiles(t *testing.T) {
	root := t.TempDir()
	main := writeFile(t, root, "etc/rdma/rdmad.toml", "[doctor]\nignore = [\"nfs-*\"]\n[doctor.counters]\ninterval = \"30s\"\nsymbol_error = 5\n")
	site := writeFile(t, root, "etc/rdma/rdmad.d/50-site.toml", "[doctor]\nignore = [\n  \"port-no-sm:mlx4_0/1\",\n]\n[doctor.counters]\nsymbol_error = 50\nout_of_sequence = 0\n[memlock]\ncheck_units = [\"slurmd\", \"gpu-job.service\", \"slurmd.service\"]\n")
	p, err := load(root)
	if err != nil {
		t.Fatal(err)
	}
	d := p.Doctor
	if len(d.Ignore) != 2 || d.Ignore[0].Pattern != "nfs-*" || d.Ignore[0].Source.String() != main+":2" ||
		d.Ignore[1].Source.File != site || d.Ignore[1].Source.Line < 2 {
		t.Errorf("ignore %+v", d.Ignore)
	}
	if d.Counters.Interval != 30*time.Second {
		t.Errorf("interval %v", d.Counters.Interval)
	}
	if th := d.Counters.Threshold("symbol_error"); th.PerHour != 50 || th.Source.Line != 6 {
		t.Errorf("symbol_error %+v: the later file wins", th)
	}
	if th := d.Counters.Threshold("out_of_sequence"); th.PerHour != 0 || th.Source.Line == 0 {
		t.Errorf("out_of_sequence = 0 declared: %+v", th)
	}
	if th := d.Counters.Threshold("link_downed"); th.PerHour != 2 || th.Source != (Position{}) {
		t.Errorf("link_downed default %+v", th)
	}
	if strings.Join(p.MemlockCheckUnits.Names, " ") != "slurmd.service gpu-job.service" || p.MemlockCheckUnits.Source.File != site {
		t.Errorf("check_units %v", p.MemlockCheckUnits)
	}
	if p.Memlock != nil {
		t.Errorf("[memlock] with check_units only made rdmad manage memlock: %+v", p.Memlock)
	}
	// Without [doctor]: the default interval, no ignore.
	q, err := Parse("f.toml", nil)
	if err != nil || q.Doctor.Counters.Interval != DefaultCounterInterval || len(q.Doctor.Ignore) != 0 {
		t.Errorf("defaults: %+v %v", q.Doctor, err)
	}
	// An empty [memlock] still manages memlock with defaults.
	if q, err := Parse("f.toml", []byte("[memlock]\n")); err != nil || q.Memlock == nil {
		t.Errorf("empty [memlock]: %+v %v", q.Memlock, err)
	}
	if q, err := Parse("f.toml", []byte("[memlock]\nsoft = \"1G\"\nhard = \"1G\"\ncheck_units = [\"x\"]\n")); err != nil || q.Memlock == nil || len(q.MemlockCheckUnits.Names) != 1 {
		t.Errorf("[memlock] with limits and check_units: %+v %v", q, err)
	}
}

func TestIgnoreRulesMatchIDAndSubjectGlobs(t *testing.T) {
	for _, tc := range []struct {
		pattern, id, subject string
		want                 bool
	}{
		{"nfs-*", "nfs-rdma-not-listening", "host", true},
		{"nfs-*", "port-no-sm", "host", false},
		{"port-no-sm:mlx4_0/1", "port-no-sm", "mlx4_0/1", true},
		{"port-no-sm:mlx4_0/1", "port-no-sm", "mlx4_0/2", false},
		{"port-no-sm:mlx4_0/*", "port-no-sm", "mlx4_0/2", true},
		{"counter-*:mlx5_*", "counter-increase", "mlx5_1/1", true},
		{"counter-*:*", "counter-saturated", "mlx5_1/1", true},
		{"roce-mtu:netdev eth?", "roce-mtu", "netdev eth1", true},
		{"port-*", "port-link-down", "mlx5_0/2", true},
		{"port-*", "pcie-link-degraded", "mlx5_0", false},
	} {
		if got := (IgnoreRule{Pattern: tc.pattern}).Matches(tc.id, tc.subject); got != tc.want {
			t.Errorf("%q matches %s %s = %v", tc.pattern, tc.id, tc.subject, got)
		}
	}
}

// Every counter has a threshold key, and the list has no duplicates.
func TestCounterCatalog(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range Counters {
		if seen[c.Name] || !isBareKey(c.Name) {
			t.Errorf("counter %q repeated or not a bare TOML key", c.Name)
		}
		seen[c.Name] = true
		p, err := Parse("f.toml", []byte("[doctor.counters]\n"+c.Name+" = 7\n"))
		if err != nil || p.Doctor.Counters.Threshold(c.Name).PerHour != 7 {
			t.Errorf("%s = 7: %v", c.Name, err)
		}
	}
}
