package config

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Each bad input must produce an error naming the file, the line and the
// problem; want lists substrings of that one message.
func TestParseRejectsBadInput(t *testing.T) {
	const file = "/etc/rdma/rdmad.d/10-roce.toml"
	tests := []struct {
		name string
		toml string
		line int
		want []string
	}{
		// A top-level key must come before any table, or it belongs to that table.
		{"unknown top-level key", "# rdmad\n\nfrobnicate = 1\n[modules]\nenable = true\n", 3, []string{"frobnicate: unknown key", "the top level accepts [modules], [memlock]"}},
		{"unknown top-level table", "[modules]\nenable = true\n\n[rocee]\nmode = \"v2\"\n", 4, []string{"rocee: unknown key", "[[roce]]"}},
		{"unknown key in table", "[memlock]\ngroup = \"rdma\"\nsofty = \"1G\"\n", 3, []string{"memlock.softy: unknown key", "group, soft, hard"}},
		{"unknown key in second roce", "[[roce]]\ndevice = \"a\"\nmode = \"v2\"\n\n[[roce]]\ndevice = \"b\"\ntoss = 3\n", 7, []string{"roce[1].toss: unknown key"}},
		{"key in wrong case", "[[roce]]\ndevice = \"a\"\nMode = \"v2\"\n", 3, []string{"roce[0].Mode", "did you mean mode?"}},
		{"wrong type bool", "[modules]\n\nenable = \"yes\"\n", 3, []string{"modules.enable", "must be true or false", `a string ("yes")`}},
		{"quoted bool", "[memlock]\nservices = \"true\"\n", 2, []string{"memlock.services", "without quotes"}},
		{"wrong type tos", "[[roce]]\ndevice = \"a\"\ntos = \"106\"\n", 3, []string{"roce[0].tos", "must be an integer"}},
		{"tos 300", "[[roce]]\ndevice = \"mlx5_*\"\nmode = \"v2\"\n\n[[roce]]\ndevice = \"mlx5_1\"\ntos = 300\n", 7, []string{"roce[1].tos: 300 is out of range 0..255"}},
		{"tos -1", "[[roce]]\ndevice = \"a\"\ntos = -1\n", 3, []string{"roce[0].tos: -1 is out of range 0..255"}},
		{"mode RoCE v1", "[[roce]]\ndevice = \"a\"\nmode = \"RoCE v1\"\n", 3, []string{"roce[0].mode", `the kernel's string: write "v1"`, "IB/RoCE v1"}},
		{"mode kernel v2", "[[roce]]\ndevice = \"a\"\nmode = \"RoCE v2\"\n", 3, []string{"roce[0].mode", `the kernel's string: write "v2"`}},
		{"mode v3", "[[roce]]\ndevice = \"a\"\nmode = \"v3\"\n", 3, []string{"roce[0].mode", `"v3" is not a RoCE mode`}},
		{"port 0", "[[roce]]\ndevice = \"a\"\nport = 0\nmode = \"v2\"\n", 3, []string{"roce[0].port: 0 is out of range 1.."}},
		{"roce without selector", "# c\n[[roce]]\nport = 1\nmode = \"v2\"\n", 2, []string{"roce[0]: no device selector", "device ="}},
		{"roce sets nothing", "[[roce]]\ndevice = \"mlx5_0\"\nport = 1\n", 1, []string{"roce[0]: sets nothing", "mode, tos"}},
		{"bad glob", "[[roce]]\nmode = \"v2\"\ndevice = \"mlx5_[\"\n", 3, []string{"roce[0].device", "not a valid glob"}},
		{"glob too long", "[[roce]]\nmode = \"v2\"\ndevice = \"mlx5_*" + strings.Repeat("?", MaxGlob) + "\"\n", 3, []string{"roce[0].device", "262 bytes; a pattern has at most 256"}},
		{"netdev glob too long", "[[qos]]\npfc = [3]\nnetdev = \"" + strings.Repeat("*", MaxGlob+1) + "\"\n", 3, []string{"qos[0].netdev", "257 bytes"}},
		{"bad guid", "[[roce]]\nguid = \"0002:c903:0031\"\nmode = \"v2\"\n", 2, []string{"roce[0].guid", "not a node GUID"}},
		{"bad guid digit", "[[roce]]\nguid = \"0x0002c90300317c5z\"\nmode = \"v2\"\n", 2, []string{"roce[0].guid", "not a hex digit"}},
		{"bad pci", "[[vpi]]\npci = \"slot 3\"\ntype = \"eth\"\n", 2, []string{"vpi[0].pci", "not a PCI address"}},
		{"memlock soft lots", "[memlock]\nsoft = \"lots\"\n", 2, []string{"memlock.soft", `"lots" is not a size`}},
		{"memlock bad unit", "[memlock]\nhard = \"64X\"\n", 2, []string{"memlock.hard", "unknown unit"}},
		{"memlock fraction", "[memlock]\nhard = \"1.5G\"\n", 2, []string{"memlock.hard", "1536M"}},
		{"memlock zero", "[memlock]\nsoft = \"0\"\n", 2, []string{"memlock.soft", "0 forbids"}},
		{"soft above hard", "[memlock]\nsoft = \"64G\"\nhard = \"1G\"\n", 2, []string{"memlock.soft: 64G is above memlock.hard 1G"}},
		{"soft unlimited above hard", "[memlock]\nhard = \"1G\"\n", 2, []string{"memlock.hard: 1G is below memlock.soft unlimited (the default)"}},
		{"bad group", "[memlock]\ngroup = \"1rdma\"\n", 2, []string{"memlock.group", "not a valid group name"}},
		{"group with at", "[memlock]\ngroup = \"@rdma\"\n", 2, []string{"memlock.group", "without the '@'"}},
		{"netns private", "[netns]\nmode = \"private\"\n", 2, []string{"netns.mode", `"private" is not an RDMA netns mode`}},
		{"modules relative dir", "[modules]\ndirectory = \"etc/rdma/modules\"\n", 2, []string{"modules.directory", "absolute path"}},
		{"link bad type", "[[link]]\nname = \"rxe0\"\ntype = \"roce\"\nnetdev = \"eth0\"\n", 3, []string{"link[0].type", `"roce" is not a soft RDMA link type`}},
		{"link missing netdev", "[[link]]\nname = \"rxe0\"\ntype = \"rxe\"\n", 1, []string{"link[0]: missing netdev"}},
		{"link name with slash", "[[link]]\nname = \"rxe/0\"\ntype = \"rxe\"\nnetdev = \"eth0\"\n", 2, []string{"link[0].name", `'/'`}},
		{"link name with percent", "[[link]]\nname = \"rxe%d\"\ntype = \"rxe\"\nnetdev = \"eth0\"\n", 2, []string{"link[0].name", "'%'"}},
		{"link netdev too long", "[[link]]\nname = \"rxe0\"\ntype = \"rxe\"\nnetdev = \"abcdefghijklmnop\"\n", 4, []string{"link[0].netdev", "at most 15"}},
		{"two rxe on one netdev", "[[link]]\nname = \"rxe0\"\ntype = \"rxe\"\nnetdev = \"eth0\"\n[[link]]\nname = \"rxe1\"\ntype = \"rxe\"\nnetdev = \"eth0\"\n", 5, []string{`link "rxe1"`, `already has rxe link "rxe0"`, file + ":1"}},
		{"vpi type fc", "[[vpi]]\ndevice = \"mlx4_0\"\nport = 1\ntype = \"fc\"\n", 4, []string{"vpi[0].type", `"fc" is not a VPI port type`}},
		{"vpi missing type", "[[vpi]]\ndevice = \"mlx4_0\"\n", 1, []string{"vpi[0]: missing key type"}},
		{"single table for array", "[roce]\ndevice = \"a\"\nmode = \"v2\"\n", 1, []string{"roce: must be an array of tables", "[[roce]]"}},
		{"array for single table", "[[memlock]]\nsoft = \"1G\"\n", 1, []string{"memlock: must be a single table"}},
		{"inline array element not a table", "roce = [1]\n", 1, []string{"roce[0]: must be a table"}},
		{"inline table key", "[[roce]]\ndevice = \"a\"\nmode = \"v2\"\n[[link]]\nname = \"rxe0\"\ntype = \"rxe\"\nnetdev = \"eth0\"\nextra = { a = 1 }\n", 8, []string{"link[0].extra: unknown key"}},
		{"metrics relative textfile", "[metrics]\ntextfile = \"rdmad.prom\"\n", 2, []string{"metrics.textfile", "absolute path"}},
		{"metrics textfile not .prom", "[metrics]\n\ntextfile = \"/var/lib/node-exporter/rdmad.txt\"\n", 3, []string{"metrics.textfile", "ending in .prom", "reads only *.prom"}},
		{"metrics textfile directory", "[metrics]\ntextfile = \"/var/lib/node-exporter.prom/\"\n", 2, []string{"metrics.textfile", "ending in .prom"}},
		{"metrics textfile only suffix", "[metrics]\ntextfile = \"/var/lib/node-exporter/.prom\"\n", 2, []string{"metrics.textfile", "ending in .prom"}},
		{"metrics textfile newline", "[metrics]\ntextfile = \"/var/lib/a\\nb.prom\"\n", 2, []string{"metrics.textfile", "control character"}},
		{"metrics textfile not a string", "[metrics]\ntextfile = true\n", 2, []string{"metrics.textfile", "must be a string"}},
		{"metrics unknown key", "[metrics]\ntextfile = \"/run/a.prom\"\nlisten = \":9100\"\n", 3, []string{"metrics.listen: unknown key", "[metrics] accepts textfile"}},
		{"metrics array of tables", "[[metrics]]\ntextfile = \"/run/a.prom\"\n", 1, []string{"metrics: must be a single table"}},
		{"qos priority 8", "[[qos]]\ndevice = \"mlx5_*\"\n\npfc = [3, 8]\n", 4, []string{"qos[0].pfc: priority 8 is out of range 0..7"}},
		{"qos pfc not an array", "[[qos]]\ndevice = \"mlx5_*\"\npfc = 3\n", 3, []string{"qos[0].pfc", "must be an array of priorities", "[] turns PFC off"}},
		{"qos pfc twice", "[[qos]]\ndevice = \"mlx5_*\"\npfc = [3, 3]\n", 3, []string{"qos[0].pfc", "priority 3 is listed twice"}},
		{"qos trust ip", "[[qos]]\ndevice = \"mlx5_*\"\ntrust = \"ip\"\n", 3, []string{"qos[0].trust", `"ip" is not a QoS trust mode`, `"dscp" or "pcp"`}},
		{"qos dscp 64", "[[qos]]\ndevice = \"mlx5_*\"\ntrust = \"dscp\"\ndscp_prio = { 26 = 3, 64 = 1 }\n", 4, []string{"qos[0].dscp_prio.64", "DSCP 64 is out of range 0..63"}},
		{"qos dscp prio 9", "[[qos]]\ndevice = \"mlx5_*\"\ndscp_prio = { 26 = 9 }\n", 3, []string{"qos[0].dscp_prio.26: DSCP 26: priority 9 is out of range 0..7"}},
		{"qos dscp_prio with pcp", "[[qos]]\ndevice = \"mlx5_*\"\ntrust = \"pcp\"\ndscp_prio = { 26 = 3 }\n", 4, []string{"qos[0].dscp_prio", `trust = "dscp" only`}},
		{"qos sets nothing", "[[qos]]\ndevice = \"mlx5_*\"\nport = 1\n", 1, []string{"qos[0]: sets nothing", "trust, pfc, dscp_prio"}},
		{"qos without selector", "[[qos]]\npfc = [3]\n", 1, []string{"qos[0]: no device selector"}},
		{"qos unknown key", "[[qos]]\ndevice = \"a\"\npfc = [3]\nprio_map = [0]\n", 4, []string{"qos[0].prio_map: unknown key", "[[qos]] accepts device"}},
		{"syntax error", "[modules]\nenable = true\ndirectory = /etc\n", 3, []string{"TOML syntax error"}},
		{"duplicate key", "[modules]\nenable = true\nenable = false\n", 3, []string{"TOML syntax error"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(file, []byte(tc.toml))
			if err == nil {
				t.Fatalf("Parse accepted:\n%s", tc.toml)
			}
			msg := err.Error()
			prefix := file + ":" + strconv.Itoa(tc.line) + ": "
			if !strings.HasPrefix(msg, prefix) {
				t.Errorf("error %q does not start with %q", msg, prefix)
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not mention %q", msg, w)
				}
			}
			var ce *Error
			if !errors.As(err, &ce) || ce.Pos.File != file || ce.Pos.Line != tc.line {
				t.Errorf("error is not a *Error at %s:%d: %#v", file, tc.line, err)
			}
		})
	}
}

func TestParseReportsEveryProblem(t *testing.T) {
	src := "[memlock]\nsoft = \"lots\"\n\n[[roce]]\ndevice = \"a\"\ntos = 300\n\n[[link]]\nname = \"x\"\ntype = \"ib\"\nnetdev = \"eth0\"\n"
	_, err := Parse("f.toml", []byte(src))
	if err == nil {
		t.Fatal("accepted")
	}
	lines := strings.Split(err.Error(), "\n")
	want := []string{"f.toml:2: memlock.soft", "f.toml:6: roce[0].tos", "f.toml:10: link[0].type"}
	if len(lines) != len(want) {
		t.Fatalf("got %d problems, want %d:\n%s", len(lines), len(want), err)
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("problem %d = %q, want prefix %q", i, lines[i], w)
		}
	}
}

func TestLoadNamesTheDropInWithTheError(t *testing.T) {
	root := t.TempDir()
	writeFile(t, root, MainFile, "[modules]\nenable = true\n")
	writeFile(t, root, DropInDir+"/10-roce.toml", "[[roce]]\ndevice = \"mlx5_*\"\nmode = \"v2\"\n")
	writeFile(t, root, DropInDir+"/20-tos.toml", "# TOS for the storage port\n\n[[roce]]\ndevice = \"mlx5_1\"\nport = 1\ntos = 300\n")
	_, err := load(root)
	if err == nil {
		t.Fatal("Load accepted tos = 300")
	}
	want := filepath.Join(root, DropInDir, "20-tos.toml") + ":6: roce[0].tos: 300 is out of range 0..255"
	if err.Error() != want {
		t.Errorf("error = %q\nwant    %q", err, want)
	}
}

func TestLoadSoftAboveHardAcrossFiles(t *testing.T) {
	root := t.TempDir()
	writeFile(t, root, MainFile, "[memlock]\nhard = \"8G\"\n")
	writeFile(t, root, DropInDir+"/50-soft.toml", "[memlock]\nsoft = \"16G\"\n")
	_, err := load(root)
	if err == nil {
		t.Fatal("Load accepted soft 16G over hard 8G")
	}
	main := filepath.Join(root, MainFile)
	for _, w := range []string{filepath.Join(root, DropInDir, "50-soft.toml") + ":2: memlock.soft: 16G is above memlock.hard 8G", "set at " + main + ":2"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not contain %q", err, w)
		}
	}
}

func TestLoadUnreadableMainFile(t *testing.T) {
	root := t.TempDir()
	// A directory where the file should be: unreadable for every user,
	// including root (which ignores permission bits).
	if err := os.MkdirAll(filepath.Join(root, MainFile), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := load(root)
	if err == nil || !strings.Contains(err.Error(), "read "+filepath.Join(root, MainFile)) {
		t.Fatalf("error = %v, want a read error naming the main file", err)
	}
}

func writeFile(t testing.TB, root, rel, content string) string {
	t.Helper()
	name := filepath.Join(root, rel)
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return name
}

// A drop-in that is a FIFO (or a huge file, or a link to an endless
// device) is a configuration error naming it, reported at once: reading it
// must neither block nor grow without bound.
func TestLoadRefusesDropInsThatAreNotFiles(t *testing.T) {
	root := t.TempDir()
	writeFile(t, root, MainFile, "[modules]\nenable = true\n")
	dir := filepath.Join(root, DropInDir)
	cases := map[string]func(name string) error{
		"fifo.toml": func(name string) error { return syscall.Mkfifo(name, 0o644) },
		"zero.toml": func(name string) error { return os.Symlink("/dev/zero", name) },
		"big.toml": func(name string) error {
			return os.WriteFile(name, []byte("# "+strings.Repeat("x", 2<<20)+"\n"), 0o644)
		},
	}
	for file, mk := range cases {
		os.RemoveAll(dir)
		os.MkdirAll(dir, 0o755)
		name := filepath.Join(dir, file)
		if err := mk(name); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { _, err := load(root); done <- err }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), name) {
				t.Errorf("%s: Load = %v, want an error naming it", file, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: Load blocked", file)
		}
	}
}
