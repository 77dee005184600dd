package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/rdmad/rdmad/daemon/host"
)

func TestLoadDefaultsWithoutFiles(t *testing.T) {
	root := t.TempDir()
	p, err := load(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Files) != 0 {
		t.Errorf("Files = %v, want none", p.Files)
	}
	if want := (Modules{Enable: true, Directory: "/etc/rdma/modules"}); p.Modules != want {
		t.Errorf("Modules = %+v, want %+v", p.Modules, want)
	}
	if p.Memlock != nil {
		t.Errorf("Memlock = %+v, want nil (no [memlock]: limits left alone)", p.Memlock)
	}
	if p.Netns.Mode != NetnsUnmanaged {
		t.Errorf("Netns = %q, want unmanaged", p.Netns.Mode)
	}
	if p.MainFile != filepath.Join(root, MainFile) || p.DropInDir != filepath.Join(root, DropInDir) {
		t.Errorf("MainFile, DropInDir = %q, %q", p.MainFile, p.DropInDir)
	}
}

func TestShippedConfigLoads(t *testing.T) {
	shipped, err := filepath.Abs("../../etc/rdma/rdmad.toml")
	if err != nil {
		t.Fatal(err)
	}
	p, err := Load(files, shipped)
	if err != nil {
		t.Fatalf("shipped rdmad.toml does not load: %v", err)
	}
	if len(p.Files) != 1 || p.Files[0] != shipped {
		t.Errorf("Files = %v", p.Files)
	}
	want := &Memlock{Group: "rdma", Soft: Limit{Unlimited: true}, Hard: Limit{Unlimited: true}, Services: false}
	if p.Memlock != nil && p.Memlock.Source.File == shipped && p.Memlock.Source.Line > 0 {
		want.Source = p.Memlock.Source // the line of [memlock] in the shipped file
	}
	if !reflect.DeepEqual(p.Memlock, want) {
		t.Errorf("Memlock = %+v, want %+v", p.Memlock, want)
	}
	if len(p.RoCE)+len(p.Links)+len(p.VPI) != 0 || p.Netns.Mode != NetnsUnmanaged || p.Metrics.Textfile != "" {
		t.Errorf("shipped config declares device policy; examples must stay commented: %+v", p)
	}
}

// The commented examples in the shipped file must be valid once uncommented.
func TestShippedExamplesAreValid(t *testing.T) {
	data, err := os.ReadFile("../../etc/rdma/rdmad.toml")
	if err != nil {
		t.Fatal(err)
	}
	var uncommented []byte
	for _, line := range strings.Split(string(data), "\n") {
		if len(line) > 1 && line[0] == '#' && (line[1] == '[' || ('a' <= line[1] && line[1] <= 'z')) {
			line = line[1:]
		}
		uncommented = append(uncommented, line+"\n"...)
	}
	p, err := Parse("rdmad.toml", uncommented)
	if err != nil {
		t.Fatalf("uncommented examples do not load: %v\n%s", err, uncommented)
	}
	if len(p.RoCE) != 2 || len(p.Links) != 1 || len(p.VPI) != 2 || p.Netns.Mode != NetnsShared || p.Metrics.Textfile == "" {
		t.Errorf("examples: %d roce, %d link, %d vpi, netns %q, metrics textfile %q", len(p.RoCE), len(p.Links), len(p.VPI), p.Netns.Mode, p.Metrics.Textfile)
	}
	if len(p.QoS) != 2 || p.RoCE[0].TrafficClass == nil {
		t.Fatalf("%+v", p)
	}
	_, cable := QoSCableLength.In(p.QoS[1].LosslessRule)
	_, pause := QoSPause.In(p.QoS[1].LosslessRule)
	_, ecn := QoSECN.In(p.QoS[1].LosslessRule)
	if dcbx, _ := QoSDCBX.In(p.QoS[1].LosslessRule); !cable || !pause || !ecn || dcbx != DCBXHost {
		t.Errorf("examples: the lossless profile is not all there: %+v, roce %+v", p.QoS, p.RoCE)
	}
	if len(p.Expect) != 3 || p.Expect[2].Count != 2 || len(p.Doctor.Ignore) != 2 || p.Doctor.Counters.Threshold("symbol_error").Source.Line == 0 || len(p.MemlockCheckUnits.Names) != 1 {
		t.Errorf("examples: %d expect, %d ignore, thresholds %v, check_units %v", len(p.Expect), len(p.Doctor.Ignore), p.Doctor.Counters.Thresholds, p.MemlockCheckUnits)
	}
}

func TestLoadMergesDropIns(t *testing.T) {
	root := t.TempDir()
	main := writeFile(t, root, MainFile, `
[modules]
directory = "/srv/rdma/modules"

[memlock]
group = "hpc"
soft = "32G"
hard = "64G"

[[roce]]
device = "mlx5_*"
mode = "v2"
tos = 106

[[link]]
name = "rxe0"
type = "rxe"
netdev = "eth0"
`)
	d10 := writeFile(t, root, DropInDir+"/10-memlock.toml", "[memlock]\nsoft = \"48G\"\nservices = false\n")
	d20 := writeFile(t, root, DropInDir+"/20-roce.toml", "[[roce]]\ndevice = \"mlx5_1\"\nport = 2\nmode = \"v1\"\n\n[[link]]\nname = \"rxe0\"\ntype = \"rxe\"\nnetdev = \"eth1\"\n")
	// zz-rdmad-persist.toml sorts before zzz.toml but is applied last.
	persisted := writeFile(t, root, DropInDir+"/"+PersistedName, PersistedHeader+"\n[netns]\nmode = \"exclusive\"\n")
	zzz := writeFile(t, root, DropInDir+"/zzz.toml", "[netns]\nmode = \"shared\"\n")
	// Not drop-ins: hidden temporaries, other suffixes, directories.
	writeFile(t, root, DropInDir+"/.zz-rdmad-persist.toml.tmp-123.toml", "garbage = [")
	writeFile(t, root, DropInDir+"/30-old.toml.bak", "garbage = [")
	writeFile(t, root, DropInDir+"/README", "garbage = [")
	if err := os.Mkdir(filepath.Join(root, DropInDir, "40-dir.toml"), 0o755); err != nil {
		t.Fatal(err)
	}

	p, err := load(root)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{main, d10, d20, zzz, persisted}; !reflect.DeepEqual(p.Files, want) {
		t.Errorf("Files = %v\nwant %v", p.Files, want)
	}
	if want := (Modules{Enable: true, Directory: "/srv/rdma/modules"}); p.Modules != want {
		t.Errorf("Modules = %+v", p.Modules)
	}
	// memlock merged key by key: group and hard from the main file.
	// Its source is the last [memlock] table of the files.
	wantMem := &Memlock{Group: "hpc", Soft: Limit{Bytes: 48 << 30}, Hard: Limit{Bytes: 64 << 30}, Services: false,
		Source: Position{File: d10, Line: 1}}
	if !reflect.DeepEqual(p.Memlock, wantMem) {
		t.Errorf("Memlock = %+v, want %+v", p.Memlock, wantMem)
	}
	if p.Netns.Mode != NetnsExclusive {
		t.Errorf("Netns = %q: the persisted drop-in must win over zzz.toml", p.Netns.Mode)
	}
	if len(p.RoCE) != 2 || p.RoCE[0].Source != (Position{main, 10}) || p.RoCE[1].Source != (Position{d20, 1}) {
		t.Errorf("RoCE = %+v", p.RoCE)
	}
	if want := []Link{{Source: Position{d20, 6}, Name: "rxe0", Type: LinkRXE, Netdev: "eth1"}}; !reflect.DeepEqual(p.Links, want) {
		t.Errorf("Links = %+v, want the later rxe0 only: %+v", p.Links, want)
	}
	if pos, ok := p.LinkSource("rxe0"); !ok || pos != (Position{d20, 6}) {
		t.Errorf("LinkSource(rxe0) = %v, %v", pos, ok)
	}
}

func TestMemlockEnableFalseAndEmptyTable(t *testing.T) {
	p, err := Parse("a.toml", []byte("[memlock]\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := &Memlock{Group: "rdma", Soft: Limit{Unlimited: true}, Hard: Limit{Unlimited: true}, Services: false, Source: Position{File: "a.toml", Line: 1}}
	if !reflect.DeepEqual(p.Memlock, want) {
		t.Errorf("empty [memlock] = %+v, want defaults %+v", p.Memlock, want)
	}
	p, err = Parse("a.toml", []byte("[memlock]\nenable = false\nsoft = \"1G\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if p.Memlock != nil {
		t.Errorf("enable = false gave Memlock %+v, want nil", p.Memlock)
	}
}

func TestLoadExplicitMainFileTakesDropInsBesideIt(t *testing.T) {
	dir := t.TempDir()
	main := writeFile(t, dir, "conf/custom.toml", "[netns]\nmode = \"shared\"\n")
	writeFile(t, dir, "conf/rdmad.d/a.toml", "[netns]\nmode = \"exclusive\"\n")
	p, err := Load(files, main)
	if err != nil {
		t.Fatal(err)
	}
	if p.Netns.Mode != NetnsExclusive || len(p.Files) != 2 || p.DropInDir != filepath.Join(dir, "conf/rdmad.d") {
		t.Errorf("Load(%s) = %+v", main, p)
	}
}

func TestRoCEForResolvesEachFieldSeparately(t *testing.T) {
	src := `
[[roce]]
device = "mlx5_*"
mode = "v2"
tos = 106

[[roce]]
device = "mlx5_1"
port = 2
mode = "v1"

[[roce]]
netdev = "ens1f*"
tos = 0

[[roce]]
device = "mlx5_1"
port = 1
tos = 32
`
	p, err := Parse("r.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	mlx50 := Target{Name: "mlx5_0", Netdevs: []string{"ens1f0"}}
	mlx51 := Target{Name: "mlx5_1", Netdevs: []string{"ib0"}}
	rxe := Target{Name: "rxe0", Netdevs: []string{"ens1f9"}}
	at := func(line int) Position { return Position{"r.toml", line} }
	tests := []struct {
		t        Target
		port     int
		mode     RoCEMode
		modeLine int
		tos      int // -1: none
		tosLine  int
	}{
		{mlx50, 1, RoCEv2, 2, 0, 12},  // the netdev rule's TOS is later
		{mlx51, 1, RoCEv2, 2, 32, 16}, // port-1 TOS rule
		{mlx51, 2, RoCEv1, 7, 106, 2}, // mode from the port-2 rule, TOS still from the glob
		{rxe, 1, "", 0, 0, 12},        // only the netdev rule applies
		{Target{Name: "hfi1_0"}, 1, "", 0, -1, 0},
	}
	for _, tc := range tests {
		d := p.RoCEFor(tc.t, tc.port)
		if d.Mode != tc.mode || (tc.modeLine != 0 && d.ModeSource != at(tc.modeLine)) {
			t.Errorf("%s/%d mode = %q from %v, want %q from line %d", tc.t.Name, tc.port, d.Mode, d.ModeSource, tc.mode, tc.modeLine)
		}
		switch {
		case tc.tos < 0 && d.TOS != nil:
			t.Errorf("%s/%d tos = %d, want none", tc.t.Name, tc.port, *d.TOS)
		case tc.tos >= 0 && (d.TOS == nil || *d.TOS != tc.tos || d.TOSSource != at(tc.tosLine)):
			t.Errorf("%s/%d tos = %v from %v, want %d from line %d", tc.t.Name, tc.port, d.TOS, d.TOSSource, tc.tos, tc.tosLine)
		}
		if (tc.tos < 0 && tc.mode == "") != d.Empty() {
			t.Errorf("%s/%d Empty() = %v", tc.t.Name, tc.port, d.Empty())
		}
	}
}

func TestVPIForLastRuleWins(t *testing.T) {
	p, err := Parse("v.toml", []byte("[[vpi]]\ndriver = \"mlx4_core\"\ntype = \"ib\"\n[[vpi]]\ndevice = \"mlx4_0\"\nport = 2\ntype = \"eth\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	tgt := Target{Name: "mlx4_0", Driver: "mlx4_core"}
	if d := p.VPIFor(tgt, 1); d.Type != VPIib || d.Source.Line != 1 {
		t.Errorf("port 1 = %+v", d)
	}
	if d := p.VPIFor(tgt, 2); d.Type != VPIeth || d.Source.Line != 4 {
		t.Errorf("port 2 = %+v", d)
	}
}

// Selectors as written in the file, matched against real device identities;
// this exercises the normalisation done while loading as well as Matches.
func TestSelectorMatchesEveryKey(t *testing.T) {
	dev := Target{Name: "mlx5_1", NodeGUID: "248a:0703:00aa:5f60", PCI: "0000:3b:00.1", Driver: "mlx5_core", Netdevs: []string{"ens1f1", "ens1f1v0"}}
	tests := []struct {
		sel  string
		want bool
	}{
		{`device = "mlx5_*"`, true},
		{`device = "mlx5_[02]"`, false},
		{`device = "mlx5_?"`, true},
		{`guid = "248A:0703:00AA:5F60"`, true},
		{`guid = "0x248a070300aa5f60"`, true}, // as ibstat prints it
		{`guid = "248a:0703:00aa:5f61"`, false},
		{`pci = "0000:3b:00.*"`, true},
		{`pci = "3b:00.1"`, true}, // lspci's short form
		{`pci = "0000:3B:00.1"`, true},
		{`pci = "0000:3b:00.0"`, false},
		{`netdev = "ens1f1v*"`, true},
		{`netdev = "eth*"`, false},
		{`driver = "mlx5_core"`, true},
		{`driver = "mlx4_core"`, false},
		{"device = \"mlx5_*\"\ndriver = \"mlx5_core\"\nnetdev = \"ens1f1\"", true},
		{"device = \"mlx5_*\"\ndriver = \"mlx4_core\"", false}, // every key must match
	}
	for _, tc := range tests {
		p, err := Parse("s.toml", []byte("[[roce]]\n"+tc.sel+"\nmode = \"v2\"\n"))
		if err != nil {
			t.Fatalf("%s: %v", tc.sel, err)
		}
		if got := p.RoCE[0].Matches(dev); got != tc.want {
			t.Errorf("%s (%v): Matches = %v, want %v", tc.sel, p.RoCE[0].Selector, got, tc.want)
		}
	}
}

func TestParseLimit(t *testing.T) {
	tests := []struct {
		in          string
		want        Limit
		limitsConf  string
		systemd     string
		human       string
		errContains string
	}{
		{in: "unlimited", want: Limit{Unlimited: true}, limitsConf: "unlimited", systemd: "infinity", human: "unlimited"},
		{in: "Infinity", want: Limit{Unlimited: true}, limitsConf: "unlimited", systemd: "infinity", human: "unlimited"},
		{in: "64G", want: Limit{Bytes: 64 << 30}, limitsConf: "67108864", systemd: "68719476736", human: "64G"},
		{in: "64GiB", want: Limit{Bytes: 64 << 30}, limitsConf: "67108864", systemd: "68719476736", human: "64G"},
		{in: "64gb", want: Limit{Bytes: 64 << 30}, limitsConf: "67108864", systemd: "68719476736", human: "64G"},
		{in: "512M", want: Limit{Bytes: 512 << 20}, limitsConf: "524288", systemd: "536870912", human: "512M"},
		{in: "1536 M", want: Limit{Bytes: 1536 << 20}, limitsConf: "1572864", systemd: "1610612736", human: "1536M"},
		{in: "2T", want: Limit{Bytes: 2 << 40}, limitsConf: "2147483648", systemd: "2199023255552", human: "2T"},
		{in: "64K", want: Limit{Bytes: 65536}, limitsConf: "64", systemd: "65536", human: "64K"},
		{in: "1000", want: Limit{Bytes: 1000}, limitsConf: "1", systemd: "1000", human: "1000"}, // KiB rounds up
		{in: "1025B", want: Limit{Bytes: 1025}, limitsConf: "2", systemd: "1025", human: "1025"},
		{in: "lots", errContains: "not a size"},
		{in: "", errContains: "empty"},
		{in: "0", errContains: "0 forbids"},
		{in: "0G", errContains: "0 forbids"},
		{in: "64X", errContains: "unknown unit"},
		{in: "64iB", errContains: "unknown unit"},
		{in: "1.5G", errContains: "fractions"},
		{in: "-1", errContains: "not a size"},
		{in: "16777216T", errContains: "too large"},
		{in: "99999999999999999999", errContains: "too large"},
	}
	for _, tc := range tests {
		l, err := ParseLimit(tc.in)
		if tc.errContains != "" {
			if err == nil || !strings.Contains(err.Error(), tc.errContains) {
				t.Errorf("ParseLimit(%q) = %v, %v; want error with %q", tc.in, l, err, tc.errContains)
			}
			continue
		}
		if err != nil || l != tc.want {
			t.Errorf("ParseLimit(%q) = %+v, %v; want %+v", tc.in, l, err, tc.want)
			continue
		}
		if l.LimitsConf() != tc.limitsConf || l.Systemd() != tc.systemd || l.Human() != tc.human {
			t.Errorf("%q renders limits.conf %q systemd %q human %q; want %q %q %q", tc.in, l.LimitsConf(), l.Systemd(), l.Human(), tc.limitsConf, tc.systemd, tc.human)
		}
	}
}

func TestMemlockIntegerBytes(t *testing.T) {
	p, err := Parse("m.toml", []byte("[memlock]\nsoft = 1048576\nhard = \"1M\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if p.Memlock.Soft != (Limit{Bytes: 1 << 20}) || p.Memlock.Hard != p.Memlock.Soft {
		t.Errorf("Memlock = %+v", p.Memlock)
	}
}

func TestLineIndex(t *testing.T) {
	src := `# comment [not a table]
title = """
[[roce]]
tos = 1
"""   # a multi-line string that looks like TOML
"quoted key" = 'x'
a.b.c = 1

[[roce]]     # first
device = "a\"b"
inline = { x = 1, y = [1, 2] }

[[roce]]
mode = "v2"
arr = [
  { k = 1 },
  # comment
  { k = 2 },
]

[memlock]
soft = '''
multi
'''
hard = "1G"
[[roce.sub]]
x = 1
`
	ix := indexLines(src)
	want := map[string]int{
		"title":            2,
		`"quoted key"`:     6,
		"a.b.c":            7,
		"roce":             9,
		"roce[0]":          9,
		"roce[0].device":   10,
		"roce[0].inline":   11,
		"roce[0].inline.y": 11,
		"roce[1]":          13,
		"roce[1].mode":     14,
		"roce[1].arr[0]":   16,
		"roce[1].arr[1]":   18,
		"roce[1].arr[1].k": 18,
		"memlock":          21,
		"memlock.soft":     22,
		"memlock.hard":     25,
		"roce[1].sub[0]":   26,
		"roce[1].sub[0].x": 27,
	}
	for path, line := range want {
		if got := ix.lookup(path); got != line {
			t.Errorf("line of %s = %d, want %d", path, got, line)
		}
	}
	if got := ix.lookup("roce[1].arr[1].missing"); got != 18 {
		t.Errorf("unknown key falls back to %d, want its table's line 18", got)
	}
}

// files is the bounded reader the daemon uses.
var files = host.Files{}

// load loads the configuration of a host tree, as rdmad --root does.
func load(root string) (*Policy, error) { return Load(files, filepath.Join(root, MainFile)) }
