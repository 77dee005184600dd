package cli

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/godbus/dbus/v5"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/dbusapi"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden with what rdmactl prints now")

// golden compares what rdmactl printed with testdata/NAME.golden.
func golden(t *testing.T, name, args string, code int, stdout, stderr string) {
	t.Helper()
	got := fmt.Sprintf("$ rdmactl %s\nexit %d\n--- stdout\n%s--- stderr\n%s", args, code, stdout, stderr)
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test ./cmd/rdmactl/internal/cli -update writes it)", err)
	}
	if got != string(want) {
		t.Errorf("rdmactl %s differs from %s (go test ./cmd/rdmactl/internal/cli -update rewrites it):\n--- got\n%s\n--- want\n%s", args, path, got, want)
	}
}

func goldenName(args string) string {
	r := strings.NewReplacer(" ", "_", "/", "_", "=", "_", "--", "", "\"", "")
	return r.Replace(args)
}

// Every command's help is its own (rdmactl roce set --help shows that
// command only).
func TestGoldenHelp(t *testing.T) {
	var walk func(c *cobra.Command)
	var paths [][]string
	walk = func(c *cobra.Command) {
		if c.Hidden || c.Name() == "help" || c.Name() == "completion" && c.Parent() != nil && c.Parent().Parent() != nil {
			return
		}
		paths = append(paths, strings.Fields(c.CommandPath())[1:])
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(newEnv(nil, nil).tree())
	if len(paths) < 16 {
		t.Fatalf("%d commands in the tree", len(paths))
	}
	for _, p := range paths {
		args := strings.Join(append(p, "--help"), " ")
		var out, errb bytes.Buffer
		code := newEnv(&out, &errb).run(append(p, "--help"))
		if code != ExitOK || errb.Len() > 0 {
			t.Errorf("%s: exit %d, %s", args, code, errb.String())
		}
		if len(p) > 0 && !strings.Contains(out.String(), "rdmactl "+strings.Join(p, " ")) {
			t.Errorf("%s: help names another command:\n%s", args, out.String())
		}
		golden(t, "help_"+goldenName(strings.Join(append([]string{"rdmactl"}, p...), " ")), args, code, out.String(), errb.String())
	}
}

// A wrong command line: one line saying what is wrong, then where the
// help is; exit 2. Nothing is asked of rdmad.
func TestGoldenUsageErrors(t *testing.T) {
	f := fixture()
	addr := serveFake(t, f)
	for _, args := range []string{
		"stauts",
		"roce frob",
		"roce set",
		"roce set mlx5_0/x --tos 1",
		"roce set mlx5_0/1 --tos 300",
		"roce set mlx5_0 --mode v3",
		"roce set mlx5_0",
		"roce show mlx5_0 mlx5_1",
		"--frob status",
		"-o yaml status",
		"--json=long status",
		"device show",
		"device show mlx5_0 mlx5_1",
		"link add rxe0 type rxe",
		"link add rxe0 type foo netdev eth1",
		"link add rxe0 type rxe netdev eth1 netdev eth2",
		"link add rxe0 kind rxe",
		"link del",
		"netns set private",
		"status now",
		"doctor --quiet=maybe",
		"doctor --lines --quiet",
		"-o json doctor --lines",
		"help frob",
		"help roce frob",
		"roce set mlx5_0 --tos abc",
		"link add",
		"qos set mlx5_0",
		"qos set mlx5_0/1 --trust ip",
		"qos set mlx5_0/1 --pfc 8",
		"qos set mlx5_0/1 --pfc 3,3",
		"qos set mlx5_0/1 --pause maybe",
		"qos set mlx5_0/1 --prio-tc 0,0,0,1",
		"qos set mlx5_0/1 --udp-port-prio 4791",
		"qos set mlx5_0/1 --cable-length 0",
		"qos set mlx5_0/1 --pfc-storm-timeout 50",
		"qos set mlx5_0/1 --prio-tc 0,0,0,8,0,0,0,0",
		"qos set mlx5_0/1 --tc-tsa ets,ets,wrr,ets,ets,ets,ets,ets",
		"qos show mlx5_0 mlx5_1",
		"roce unset",
		"roce unset /1",
		"qos unset mlx5_0/0",
		"link unset",
		"netns unset shared",
		"qualify",
		"qualify --wait 0s mlx5_0",
		"qualify --all mlx5_0",
	} {
		code, out, errs := runCLI(addr, strings.Fields(args)...)
		if code != ExitUsage || out != "" || strings.Count(errs, "\n") != 2 {
			t.Errorf("%s: exit %d, want 2 and two lines on stderr:\n%s%s", args, code, out, errs)
		}
		golden(t, "usage_"+goldenName(args), args, code, out, errs)
	}
	if calls := f.callLog(); len(calls) > 0 {
		t.Errorf("usage errors reached rdmad: %v", calls)
	}
}

// Each command's output on the fixture, as text and in each JSON spelling.
func TestGoldenOutput(t *testing.T) {
	f := fixture()
	addr := serveFake(t, f)
	var cases []string
	for _, cmd := range []string{"status", "device list", "device show mlx5_0", "roce show", "roce show mlx5_0/1", "qos show", "qos show rxe0",
		"link list", "netns show", "doctor", "reload", "reconcile"} {
		for _, format := range []string{"", "-j ", "--json=pretty ", "-o json "} {
			cases = append(cases, format+cmd)
		}
	}
	cases = append(cases, "", "device", "roce", "link", "netns", "--no-legend device list", "--no-legend roce show",
		"--no-legend link list", "--no-legend doctor", "doctor --quiet", "-q doctor", "doctor --lines", "--no-pager status", "--json status",
		"-j=pretty link list", "--version", "help roce set",
		"roce set mlx5_0/1 --mode v1 --tos 96 --persist", "link add rxe2 type rxe netdev eth3",
		"link add rxe2 --type siw --netdev eth3 --persist", "link del rxe1", "netns set exclusive --persist",
		"device show mlx9_0", "roce show mlx9_0", "qos", "qos set mlx5_0/1 --trust dscp --pfc 3,4 --persist",
		"qos set mlx5_0 --pfc none", "qos set mlx5_0/1 --trust pcp", "qos show mlx9_0",
		"roce unset mlx5_0/1", "qos unset mlx5_0 --persist", "link unset rxe1 --persist", "netns unset",
		"qos set mlx5_0/1 --pfc 3 --pause off --cable-length 10 --tc-maxrate 0,25Gbit,0,0,0,0,0,0 --udp-port-prio 4791:3 --persist",
		"qos set mlx5_0/1 --ecn none --prio-tc 0,0,0,1,0,0,0,0 --dcbx host", "qos set mlx5_0/1 --pfc 3")
	for _, args := range cases {
		code, out, errs := runCLI(addr, strings.Fields(args)...)
		golden(t, "out_"+goldenName(args), args, code, out, errs)
	}
	// --no-pager changes nothing: rdmactl never pages.
	for _, cmd := range []string{"status", "doctor", "-j device list"} {
		code, out, errs := runCLI(addr, strings.Fields(cmd)...)
		pcode, pout, perrs := runCLI(addr, append([]string{"--no-pager"}, strings.Fields(cmd)...)...)
		if pcode != code || pout != out || perrs != errs {
			t.Errorf("--no-pager %s differs from %s: exit %d, output:\n%s%s", cmd, cmd, pcode, pout, perrs)
		}
	}
	// The changes reached rdmad with their arguments, both spellings of
	// link add alike.
	want := []string{
		`AddLink ["rxe2","rxe","eth3",false]`,
		`AddLink ["rxe2","siw","eth3",true]`,
		`DeleteLink ["rxe1",false]`,
		"Reconcile", "Reconcile", "Reconcile", "Reconcile",
		"Reload", "Reload", "Reload", "Reload",
		`SetNetnsMode ["exclusive",true]`,
		`SetQoS ["mlx5_0",0,"",[],false]`,
		`SetQoS ["mlx5_0",1,"",[3],false]`,
		`SetQoS ["mlx5_0",1,"dscp",[3,4],true]`,
		`SetQoS ["mlx5_0",1,"pcp",[255],false]`,
		`SetQoSSettings ["mlx5_0",1,{"cable_length":"u @u 10","pause":"b false","pfc":"ay @ay [0x3]","tc_maxrate":"as [\"0\", \"25Gbit\", \"0\", \"0\", \"0\", \"0\", \"0\", \"0\"]","udp_port_prio":"a{qy} @a{qy} {4791: 0x3}"},true]`,
		`SetQoSSettings ["mlx5_0",1,{"dcbx":"s \"host\"","ecn":"ay @ay []","prio_tc":"ay @ay [0x0, 0x0, 0x0, 0x1, 0x0, 0x0, 0x0, 0x0]"},false]`,
		`SetRoCE ["mlx5_0",1,"v1",96,true]`,
		`Withdraw ["link","rxe1",0,true]`,
		`Withdraw ["netns","",0,false]`,
		`Withdraw ["qos","mlx5_0",0,true]`,
		`Withdraw ["roce","mlx5_0",1,false]`,
	}
	if got := f.callLog(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("calls:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// roce show and qos show print the ports as rdmad read them for the call
// (ReadPorts), with when; when rdmad is busy with other reads they print
// its last read and say so.
func TestGoldenLiveRead(t *testing.T) {
	f := fixture()
	p := f.devices[1].Ports[0]
	p.RoCETOS, p.QoSTrust = 0, "pcp"
	p.Settings = []dbusapi.Setting{
		{Name: "roce_tos", Title: "RoCE TOS", Declared: "106", Source: "/etc/rdma/rdmad.d/50-roce.toml:3", Observed: "0", State: "differs",
			Why: "changed since rdmad last read it; rdmad corrects or reports it when it reads it again (an event, the verify read-back, rdmactl reconcile)"},
		{Name: "qos_trust", Title: "QoS trust", Declared: "dscp", Source: "/etc/rdma/rdmad.d/60-qos.toml:1", Observed: "pcp", State: "differs",
			Why: "changed since rdmad last read it; rdmad corrects or reports it when it reads it again (an event, the verify read-back, rdmactl reconcile)"},
	}
	f.live = map[string]dbusapi.Port{"mlx5_0": p}
	addr := serveFake(t, f)
	for _, args := range []string{"roce show mlx5_0", "qos show mlx5_0", "-j roce show mlx5_0/1"} {
		code, out, errs := runCLI(addr, strings.Fields(args)...)
		golden(t, "live_"+goldenName(args), args, code, out, errs)
	}
	f.mu.Lock()
	f.readErr = &dbus.Error{Name: dbusapi.ErrBusy, Body: []any{"ReadPorts: uid 1000 has 2 calls being answered already, the most a user has at once; try again once they are"}}
	f.mu.Unlock()
	for _, args := range []string{"roce show mlx5_0", "-j qos show mlx5_0"} {
		code, out, errs := runCLI(addr, strings.Fields(args)...)
		golden(t, "busy_"+goldenName(args), args, code, out, errs)
	}
}

// An empty host: lists are [] in JSON and say so in text.
func TestGoldenEmpty(t *testing.T) {
	addr := serveFake(t, empty())
	for _, args := range []string{"status", "device list", "roce show", "qos show", "link list", "doctor", "-j device list",
		"-j roce show", "-j qos show", "-j link list", "-j doctor", "-j status", "--no-legend link list"} {
		code, out, errs := runCLI(addr, strings.Fields(args)...)
		if strings.Contains(out, "null") {
			t.Errorf("%s prints null:\n%s", args, out)
		}
		golden(t, "empty_"+goldenName(args), args, code, out, errs)
	}
}

// Every command of the tree is in rdmactl(8), and every global flag.
func TestManPageHasEveryCommand(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(hosttest.RepoRoot(), "docs/rdmactl.8"))
	if err != nil {
		t.Fatal(err)
	}
	man := strings.ReplaceAll(string(b), `\-`, "-")
	root := newEnv(nil, nil).tree()
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Hidden || c.Name() == "help" || c.Parent() != nil && c.Parent().Name() == "completion" {
			return
		}
		if path := strings.TrimPrefix(c.CommandPath(), "rdmactl "); c != root && !strings.Contains(man, path) {
			t.Errorf("docs/rdmactl.8 does not describe rdmactl %s", path)
		}
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(root)
	root.PersistentFlags().VisitAll(func(f *pflag.Flag) {
		if !strings.Contains(man, "--"+f.Name) {
			t.Errorf("docs/rdmactl.8 does not describe --%s", f.Name)
		}
	})
}

// Configuration errors, one per line with its file:line, in status and in
// a refused reload.
func TestGoldenConfigError(t *testing.T) {
	// The last good configuration, saved an hour before the last reconcile,
	// is in force.
	f := fixture()
	f.manager.ConfigError = `/etc/rdma/rdmad.d/50-roce.toml:3: mode "v3": want "v1" or "v2"\x0a/etc/rdma/rdmad.toml:9: tos 900: want 0..255`
	f.manager.PolicyInForce, f.manager.PolicySaved = "last-good", fixtureReconcile-3600e6
	f.callErr = &dbus.Error{Name: dbusapi.ErrConfig, Body: []any{"/etc/rdma/rdmad.d/50-roce.toml:3: mode \"v3\": want \"v1\" or \"v2\"\n/etc/rdma/rdmad.toml:9: tos 900: want 0..255"}}
	addr := serveFake(t, f)
	for _, args := range []string{"status", "reload", "roce set mlx5_0 --tos 1 --persist"} {
		code, out, errs := runCLI(addr, strings.Fields(args)...)
		golden(t, "configerror_"+goldenName(args), args, code, out, errs)
	}
}
