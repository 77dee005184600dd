// Package ansible tests the rdmad role and site.yml by running them with the
// real ansible-playbook (connection local) against a scratch configuration
// directory and, for the apply-and-verify part, against the real rdmad on a
// private D-Bus serving a fixture host.
package ansible

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/fixturekernel"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/test/bustest"
	"github.com/rdmad/rdmad/test/livetest"
	"github.com/rdmad/rdmad/test/promtest"
	"github.com/rdmad/rdmad/test/testdeps"
)

var bins livetest.Binaries

func TestMain(m *testing.M) { livetest.Main(m, &bins) }

// recap is the PLAY RECAP line; changed is -1 when there was none.
type recap struct{ ok, changed, failed int }

var recapLine = regexp.MustCompile(`(?m)^localhost\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=\d+\s+failed=(\d+)`)

// playbook runs site.yml on localhost with connection local and the given
// variables (written as a JSON vars file: YAML is a superset). It returns
// the recap, the output, and whether ansible-playbook succeeded.
func playbook(t *testing.T, vars string, extra ...string) (recap, string, error) {
	t.Helper()
	return playbookOn(t, "", vars, extra...)
}

// playbookOn runs site.yml as playbook does, on the hosts of inventory (a
// YAML inventory; "" for localhost alone).
func playbookOn(t *testing.T, inventory, vars string, extra ...string) (recap, string, error) {
	t.Helper()
	ap := testdeps.Tool(t, "ansible-playbook", "ansible-core")
	home := t.TempDir()
	varsFile := filepath.Join(home, "vars.yml")
	if err := os.WriteFile(varsFile, []byte(vars), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(home, "ansible.cfg")
	if err := os.WriteFile(cfg, []byte("[defaults]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	hosts := []string{"-i", "localhost,", "-e", "rdmad_hosts=localhost"}
	if inventory != "" {
		inv := filepath.Join(home, "inventory.yml")
		if err := os.WriteFile(inv, []byte(inventory), 0o644); err != nil {
			t.Fatal(err)
		}
		hosts = []string{"-i", inv, "-e", "rdmad_hosts=all"}
	}
	args := append(append([]string{"-c", "local"}, hosts...),
		// The test runs as the user it is; site.yml's become is for real hosts.
		"-e", "ansible_become=false", "-e", "@"+varsFile)
	args = append(args, extra...)
	cmd := exec.Command(ap, append(args, filepath.Join(hosttest.RepoRoot(), "contrib/ansible/site.yml"))...)
	cmd.Dir = home
	cmd.Env = append(os.Environ(), "ANSIBLE_CONFIG="+cfg, "ANSIBLE_HOME="+home, "ANSIBLE_LOCAL_TEMP="+home+"/tmp",
		"ANSIBLE_REMOTE_TEMP="+home+"/tmp", "ANSIBLE_NOCOLOR=1", "ANSIBLE_PYTHON_INTERPRETER=/usr/bin/python3",
		"ANSIBLE_RETRY_FILES_ENABLED=0")
	out, err := cmd.CombinedOutput()
	r := recap{changed: -1}
	if m := recapLine.FindStringSubmatch(string(out)); m != nil {
		r.ok, _ = strconv.Atoi(m[1])
		r.changed, _ = strconv.Atoi(m[2])
		r.failed, _ = strconv.Atoi(m[3])
	}
	return r, string(out), err
}

func TestSyntaxCheck(t *testing.T) {
	if _, out, err := playbook(t, "{}", "--syntax-check"); err != nil {
		t.Fatalf("ansible-playbook --syntax-check: %v\n%s", err, out)
	}
}

// renderOnly are variables that make the role only render the drop-in: no
// package, no service, no status check, and `true` for the reload.
func renderOnly(etc string) string {
	return fmt.Sprintf(`rdmad_install: false
rdmad_manage_service: false
rdmad_verify: false
rdmad_rdmactl: /bin/true
rdmad_rdmad: %q
rdmad_config_dir: %q
`, bins.Rdmad, etc)
}

// everyTable sets every table variable of the role, with values of the
// shapes rdmad.toml(5) uses: strings, numbers, booleans, lists, an inline
// table (dscp_prio) and a sub-table (doctor.counters).
const everyTable = `rdmad_roce:
  - {device: "mlx5_*", mode: v2, tos: 106}
  - {pci: "0000:3b:00.1", port: 1, mode: v1}
  - {netdev: "ens*", driver: mlx5_core, tos: 0}
rdmad_qos:
  - {driver: mlx5_core, trust: dscp, pfc: [3], dscp_prio: {26: 3, 46: 5}}
  - {pci: "0000:3b:00.*", port: 1, pfc: []}
rdmad_vpi:
  - {device: mlx4_0, port: 2, type: eth}
rdmad_links:
  - {name: rxe0, type: rxe, netdev: eth1}
rdmad_expect:
  - {driver: mlx5_core, state: up, rate: 200}
  - {pci: "0000:3b:00.1", port: 1, state: down}
rdmad_memlock: {group: hpc, soft: 64G, hard: unlimited, services: false}
rdmad_netns_mode: exclusive
rdmad_modules: {enable: false, directory: /etc/rdma/modules}
rdmad_metrics: {textfile: /var/lib/prometheus/node-exporter/rdmad.prom}
rdmad_drift: {action: report, verify_interval: "0"}
rdmad_api: {changes: runtime}
rdmad_doctor: {ignore: ["nfs-*", "port-no-sm:mlx4_0/1"], counters: {interval: 1m, symbol_error: 10}}
`

// everyTableTOML is everyTable as TOML decodes it (numbers are int64).
var everyTableTOML = map[string]any{
	"roce": []map[string]any{
		{"device": "mlx5_*", "mode": "v2", "tos": int64(106)},
		{"pci": "0000:3b:00.1", "port": int64(1), "mode": "v1"},
		{"netdev": "ens*", "driver": "mlx5_core", "tos": int64(0)},
	},
	"qos": []map[string]any{
		{"driver": "mlx5_core", "trust": "dscp", "pfc": []any{int64(3)}, "dscp_prio": map[string]any{"26": int64(3), "46": int64(5)}},
		{"pci": "0000:3b:00.*", "port": int64(1), "pfc": []any{}},
	},
	"vpi":  []map[string]any{{"device": "mlx4_0", "port": int64(2), "type": "eth"}},
	"link": []map[string]any{{"name": "rxe0", "type": "rxe", "netdev": "eth1"}},
	"expect": []map[string]any{
		{"driver": "mlx5_core", "state": "up", "rate": int64(200)},
		{"pci": "0000:3b:00.1", "port": int64(1), "state": "down"},
	},
	"memlock": map[string]any{"group": "hpc", "soft": "64G", "hard": "unlimited", "services": false},
	"netns":   map[string]any{"mode": "exclusive"},
	"modules": map[string]any{"enable": false, "directory": "/etc/rdma/modules"},
	"metrics": map[string]any{"textfile": "/var/lib/prometheus/node-exporter/rdmad.prom"},
	"drift":   map[string]any{"action": "report", "verify_interval": "0"},
	"api":     map[string]any{"changes": "runtime"},
	"doctor": map[string]any{"ignore": []any{"nfs-*", "port-no-sm:mlx4_0/1"},
		"counters": map[string]any{"interval": "1m", "symbol_error": int64(10)}},
}

// TestRoleRendersEveryTable renders a drop-in with every table the role
// knows, written generically from the variables: decoded as TOML it is
// exactly the variables, tables, sub-tables, inline tables and all; a
// second run changes nothing.
func TestRoleRendersEveryTable(t *testing.T) {
	etc := filepath.Join(t.TempDir(), "etc/rdma")
	vars := renderOnly(etc) + "rdmad_validate: false\n" + everyTable
	r, out, err := playbook(t, vars)
	if err != nil || r.failed != 0 || r.changed <= 0 {
		t.Fatalf("first run: %+v %v\n%s", r, err, out)
	}
	text := readFile(t, filepath.Join(etc, "rdmad.d/50-ansible.toml"))
	var got map[string]any
	if _, err := toml.Decode(text, &got); err != nil {
		t.Fatalf("the rendered drop-in is not TOML: %v\n%s", err, text)
	}
	if diff := cmpJSON(got, everyTableTOML); diff != "" {
		t.Errorf("the rendered drop-in is not the variables: %s\n%s", diff, text)
	}
	r, out, err = playbook(t, vars)
	if err != nil || r.changed != 0 {
		t.Errorf("second run is not idempotent: %+v %v\n%s", r, err, out)
	}
}

// cmpJSON compares two decoded documents by their JSON form ("" when equal).
func cmpJSON(got, want any) string {
	g, _ := json.MarshalIndent(got, "", " ")
	w, _ := json.MarshalIndent(want, "", " ")
	if string(g) == string(w) {
		return ""
	}
	return fmt.Sprintf("got\n%s\nwant\n%s", g, w)
}

// TestRoleDropInLoadsInRdmad: the drop-in of every table passes the role's
// own validation (rdmad --check-config --with, as a real run does) and
// rdmad's configuration loader takes it, with the values the variables give.
func TestRoleDropInLoadsInRdmad(t *testing.T) {
	etc := filepath.Join(t.TempDir(), "etc/rdma")
	vars := renderOnly(etc) + withoutTables(everyTable, tablesRdmadLacks(t)...)
	r, out, err := playbook(t, vars)
	if err != nil || r.failed != 0 {
		t.Fatalf("rdmad --check-config refuses the rendered drop-in: %+v %v\n%s", r, err, out)
	}
	p, err := config.Load(host.Files{}, filepath.Join(etc, "rdmad.toml"))
	if err != nil {
		t.Fatalf("rdmad rejects the rendered drop-in: %v\n%s", err, readFile(t, filepath.Join(etc, "rdmad.d/50-ansible.toml")))
	}
	if len(p.RoCE) != 3 || p.RoCE[0].Device.Name != "mlx5_*" || p.RoCE[0].Mode != config.RoCEv2 || *p.RoCE[0].TOS != 106 ||
		p.RoCE[1].PCI != "0000:3b:00.1" || p.RoCE[1].Port != 1 || p.RoCE[1].Mode != config.RoCEv1 || p.RoCE[1].TOS != nil ||
		p.RoCE[2].Netdev != "ens*" || p.RoCE[2].Driver != "mlx5_core" || p.RoCE[2].TOS == nil || *p.RoCE[2].TOS != 0 {
		t.Errorf("roce rules = %+v", p.RoCE)
	}
	if len(p.QoS) != 2 || p.QoS[0].Driver != "mlx5_core" || p.QoS[1].PCI != "0000:3b:00.*" {
		t.Errorf("qos rules = %+v", p.QoS)
	}
	if len(p.VPI) != 1 || p.VPI[0].Device.Name != "mlx4_0" || p.VPI[0].Port != 2 || p.VPI[0].Type != config.VPIeth {
		t.Errorf("vpi rules = %+v", p.VPI)
	}
	if len(p.Links) != 1 || p.Links[0].Name != "rxe0" || p.Links[0].Type != "rxe" || p.Links[0].Netdev != "eth1" {
		t.Errorf("links = %+v", p.Links)
	}
	if m := p.Memlock; m == nil || m.Group != "hpc" || m.Soft.Bytes != 64<<30 || !m.Hard.Unlimited || m.Services {
		t.Errorf("memlock = %+v", m)
	}
	if p.Netns.Mode != config.NetnsExclusive {
		t.Errorf("netns = %+v", p.Netns)
	}
	if p.Modules.Enable {
		t.Errorf("modules = %+v", p.Modules)
	}
	if p.Metrics.Textfile != "/var/lib/prometheus/node-exporter/rdmad.prom" {
		t.Errorf("metrics = %+v", p.Metrics)
	}
}

// tablesRdmadLacks lists the role's table variables (rdmad_drift...) whose
// table the rdmad under test does not know yet: rdmad --check-config answers
// "unknown key; the top level accepts". The role renders them all the same
// (TestRoleRendersEveryTable); the day rdmad knows one, it is checked here
// with the others.
func tablesRdmadLacks(t *testing.T) []string {
	t.Helper()
	dir := t.TempDir()
	var lacks []string
	for variable, table := range map[string]string{"rdmad_drift": "[drift]\naction = \"report\"\n",
		"rdmad_api": "[api]\nchanges = \"runtime\"\n", "rdmad_doctor": "[doctor]\nignore = [\"nfs-*\"]\n",
		"rdmad_expect": "[[expect]]\ndriver = \"mlx5_core\"\nstate = \"up\"\n"} {
		f := filepath.Join(dir, "t.toml")
		if err := os.WriteFile(f, []byte(table), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(bins.Rdmad, "--check-config", "--config", filepath.Join(dir, "none.toml"), "--with", f).CombinedOutput()
		if err != nil && strings.Contains(string(out), "unknown key; the top level accepts") {
			t.Logf("rdmad does not know the table of %s yet: not loaded here", variable)
			lacks = append(lacks, variable)
		}
	}
	return lacks
}

// withoutTables drops the given variables (one line each, with their
// indented lines) from a vars file.
func withoutTables(vars string, names ...string) string {
	var out []string
	skip := false
	for _, line := range strings.Split(vars, "\n") {
		if !strings.HasPrefix(line, " ") {
			name, _, _ := strings.Cut(line, ":")
			skip = slices.Contains(names, name)
		}
		if !skip {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// TestRoleRejectsUnknownKey: a misspelt key fails in validate, with rdmad's
// error naming it, and the drop-in is not written.
func TestRoleRejectsUnknownKey(t *testing.T) {
	etc := filepath.Join(t.TempDir(), "etc/rdma")
	_, out, err := playbook(t, renderOnly(etc)+"rdmad_roce:\n  - {device: mlx5_0, tso: 106}\n")
	if err == nil {
		t.Fatalf("a misspelt key was accepted:\n%s", out)
	}
	if !strings.Contains(out, "failed to validate") || !regexp.MustCompile(`50-ansible\.toml:\d+: [^"]*tso`).MatchString(out) {
		t.Errorf("the failure does not name the key with its file:line:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(etc, "rdmad.d/50-ansible.toml")); !os.IsNotExist(err) {
		t.Errorf("the drop-in was written despite the bad key: %v", err)
	}
}

// TestRoleRejectsUnknownVariable: a misspelt variable name (rdmad_qoss for
// rdmad_qos) would be ignored and its policy silently not applied; the play
// stops before the host changes and names it. So does a table of the wrong
// shape.
func TestRoleRejectsUnknownVariable(t *testing.T) {
	etc := filepath.Join(t.TempDir(), "etc/rdma")
	_, out, err := playbook(t, renderOnly(etc)+"rdmad_qoss:\n  - {driver: mlx5_core, pfc: [3]}\nrdmad_tos: 106\n")
	if err == nil {
		t.Fatalf("unknown variables were accepted:\n%s", out)
	}
	if !strings.Contains(out, "unknown variables rdmad_qoss, rdmad_tos") || !strings.Contains(out, "rdmad_qos,") {
		t.Errorf("the failure does not name the variables and the ones the role reads:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(etc, "rdmad.d/50-ansible.toml")); !os.IsNotExist(err) {
		t.Errorf("the drop-in was written despite an unknown variable: %v", err)
	}
	for vars, want := range map[string]string{
		"rdmad_qos: {driver: mlx5_core}\n": "rdmad_qos must be a list of mappings",
		"rdmad_api: [runtime]\n":           "rdmad_api must be a mapping",
		"rdmad_expect: [up]\n":             "rdmad_expect must be a list of mappings",
	} {
		if _, out, err := playbook(t, renderOnly(etc)+vars); err == nil || !strings.Contains(out, want) {
			t.Errorf("%q: want a failure saying %q:\n%s", vars, want, out)
		}
	}
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestRoleAppliesPolicyThroughRdmad runs the role against the real rdmad
// (private bus, demo fixture host): the drop-in is rendered, `rdmactl
// reload` applies it, the status check passes and the kernel files hold the
// declared values; a second run changes nothing; a value rdmad rejects fails
// the run with rdmad's file:line error and leaves the last good policy in
// force; a port that cannot take its value fails the verification.
func TestRoleAppliesPolicyThroughRdmad(t *testing.T) {
	addr := bustest.Start(t)
	root, env := livetest.DemoHost(t)
	state, err := fixturekernel.New(host.New(root)).Read()
	if err != nil {
		t.Fatal(err)
	}
	state.Netdevs["ens1f0np0"].Refuse = map[string]string{fixturekernel.VerbSetPFC: "EBUSY"}
	b, err := fixturekernel.Marshal(state)
	if err != nil {
		t.Fatal(err)
	}
	hosttest.Write(t, root, fixturekernel.File, string(b))
	livetest.Start(t, bins, addr, root, env)
	etc := filepath.Join(root, "etc/rdma")
	common := fmt.Sprintf(`rdmad_install: false
rdmad_manage_service: false
rdmad_rdmactl: %q
rdmad_rdmad: %q
rdmad_bus: %q
rdmad_config_dir: %q
rdmad_verify_delay: 0
`, bins.Rdmactl, bins.Rdmad, addr, etc)
	policy := common + `rdmad_roce:
  - {device: "mlx5_*", mode: v2, tos: 106}
  - {device: mlx5_1, port: 1, mode: v1}
rdmad_memlock: {soft: 64G, hard: unlimited}
`
	portFile := func(dev, attr string) string {
		return hosttest.Read(t, root, host.ConfigfsPortPath(dev, 1, attr))
	}

	r, out, err := playbook(t, policy)
	if err != nil || r.failed != 0 || r.changed < 2 {
		t.Fatalf("first run: %+v %v\n%s", r, err, out)
	}
	if !strings.Contains(out, "RUNNING HANDLER [rdmad : Reload rdmad]") || !strings.Contains(out, "last reconcile ok") {
		t.Errorf("first run did not reload and verify:\n%s", out)
	}
	for dev, want := range map[string]string{"mlx5_0": "RoCE v2/106", "mlx5_1": "IB/RoCE v1/106"} {
		if got := portFile(dev, "default_roce_mode") + "/" + portFile(dev, "default_roce_tos"); got != want {
			t.Errorf("%s port 1 = %s, want %s", dev, got, want)
		}
	}
	if got := hosttest.Read(t, root, "etc/security/limits.d/90-rdmad-memlock.conf"); !strings.Contains(got, "@rdma soft memlock 67108864") {
		t.Errorf("memlock limits file = %q", got)
	}

	r, out, err = playbook(t, policy)
	if err != nil || r.changed != 0 || r.failed != 0 {
		t.Errorf("second run is not idempotent: %+v %v\n%s", r, err, out)
	}

	// One node's local change that beats the site's policy: `rdmactl roce
	// set --persist` writes rdmad's own drop-in, which sorts last, so the
	// kernel holds what that drop-in says and nothing drifts; doctor names
	// it (override) and the run fails, naming the command that withdraws
	// it. Withdrawn, the next run passes again.
	ctl := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(bins.Rdmactl, append([]string{"--bus", addr}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("rdmactl %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	ctl("roce", "set", "mlx5_0/1", "--mode", "v1", "--tos", "0", "--persist")
	_, out, err = playbook(t, policy)
	if err == nil {
		t.Errorf("the run passed although a persisted local change overrides the drop-in:\n%s", out)
	}
	if !strings.Contains(out, "rdmad does not run the declared policy") || !strings.Contains(out, "warn override: RoCE") ||
		!strings.Contains(out, "rdmactl roce unset mlx5_0/1 --persist") {
		t.Errorf("the failure does not name the override and how to withdraw it:\n%s", out)
	}
	ctl("roce", "unset", "mlx5_0/1", "--persist")
	if r, out, err := playbook(t, policy); err != nil || r.failed != 0 {
		t.Errorf("after the override was withdrawn: %+v %v\n%s", r, err, out)
	}

	// A check-mode run of another policy: it says what would change and
	// fails nothing (no reload, no verification of what was not applied).
	dropin := filepath.Join(etc, "rdmad.d/50-ansible.toml")
	applied := readFile(t, dropin)
	r, out, err = playbook(t, common+"rdmad_roce:\n  - {device: \"mlx5_*\", tos: 32}\n", "--check", "--diff")
	if err != nil || r.failed != 0 || r.changed < 1 {
		t.Errorf("--check run: %+v %v\n%s", r, err, out)
	}
	if readFile(t, dropin) != applied || portFile("mlx5_0", "default_roce_tos") != "106" {
		t.Errorf("a --check run changed the host")
	}
	// It shows rdmactl plan of the rendered drop-in: the port's TOS now, the
	// one the policy would set and its file:line.
	if !strings.Contains(out, "TASK [rdmad : Plan the drop-in (rdmactl plan)]") ||
		!regexp.MustCompile(`mlx5_0/1 +roce_tos +106 +32 +`+regexp.QuoteMeta(dropin)+`:\d+ +- +set`).MatchString(out) {
		t.Errorf("the --check run does not show what the drop-in would change:\n%s", out)
	}
	// One line for the host, one for the batch: a TOS interrupts nothing.
	// (The TOS, the mode and the memlock limits no longer declared.)
	if !strings.Contains(out, `"msg": "localhost: 3 settings would change, none interrupting traffic"`) ||
		!strings.Contains(out, `"msg": "batch of 1 host: 3 settings would change; 0 hosts would be interrupted; 0 not planned"`) {
		t.Errorf("the --check run does not sum the plan up per host and per batch:\n%s", out)
	}
	// A check-mode run of a policy rdmad would refuse fails at the plan,
	// with rdmad's file:line error, and changes nothing either.
	_, out, err = playbook(t, common+"rdmad_roce:\n  - {device: \"mlx5_*\", tos: 300}\n", "--check")
	if err == nil || !regexp.MustCompile(regexp.QuoteMeta(dropin)+`:\d+: roce\[0\]\.tos: 300`).MatchString(out) {
		t.Errorf("a --check run of tos 300 does not fail at the plan with rdmad's file:line error: %v\n%s", err, out)
	}
	if readFile(t, dropin) != applied || portFile("mlx5_0", "default_roce_tos") != "106" {
		t.Errorf("a failing --check run changed the host")
	}

	// A value rdmad rejects fails in validate, with rdmad's file:line
	// error, before the drop-in is replaced: nothing lands, no reload.
	_, out, err = playbook(t, common+"rdmad_roce:\n  - {device: \"mlx5_*\", tos: 300}\n")
	if err == nil {
		t.Errorf("tos 300 was accepted:\n%s", out)
	}
	if !strings.Contains(out, "TASK [rdmad : Render the RDMA policy drop-in]") || !strings.Contains(out, "failed to validate") {
		t.Errorf("the bad value did not fail in validate:\n%s", out)
	}
	if !regexp.MustCompile(`50-ansible\.toml:\d+: roce\[0\]\.tos: 300`).MatchString(out) {
		t.Errorf("the failure does not carry rdmad's file:line error:\n%s", out)
	}
	if strings.Contains(out, "RUNNING HANDLER") {
		t.Errorf("rdmad was reloaded after a failed validation:\n%s", out)
	}
	if readFile(t, dropin) != applied {
		t.Errorf("the rejected drop-in landed:\n%s", readFile(t, dropin))
	}
	if got := portFile("mlx5_0", "default_roce_tos"); got != "106" {
		t.Errorf("a rejected policy changed the kernel: tos %s", got)
	}

	// A port that cannot take its value: the drop-in loads, the verification
	// fails and names the port.
	tos := filepath.Join(root, host.ConfigfsPortPath("mlx5_1", 1, "default_roce_tos"))
	if err := os.Remove(tos); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(tos, 0o755); err != nil { // writes fail with EISDIR
		t.Fatal(err)
	}
	_, out, err = playbook(t, common+"rdmad_roce:\n  - {device: \"mlx5_*\", tos: 32}\n", "-e", "rdmad_verify_retries=2")
	if err == nil {
		t.Errorf("verification passed although mlx5_1/1 cannot take tos 32:\n%s", out)
	}
	if !strings.Contains(out, "rdmad does not run the declared policy") || !strings.Contains(out, "mlx5_1/1") {
		t.Errorf("the verification failure does not name mlx5_1/1:\n%s", out)
	}
	if got := portFile("mlx5_0", "default_roce_tos"); got != "32" {
		t.Errorf("mlx5_0 tos = %s: one failing port stopped the others", got)
	}
}

// TestRoleVerifiesEveryDeclaredKind: the verification is not RoCE's alone.
// A [[qos]] rule rdmad cannot apply (the fixture's mlx5 driver refuses the
// PFC change with EBUSY), memlock limits
// it cannot write (limits.d is a file) and a soft link whose netdev does not
// exist each fail the run, named with the port, setting or link.
func TestRoleVerifiesEveryDeclaredKind(t *testing.T) {
	addr := bustest.Start(t)
	root, env := livetest.DemoHost(t)
	state, err := fixturekernel.New(host.New(root)).Read()
	if err != nil {
		t.Fatal(err)
	}
	state.Netdevs["ens1f0np0"].Refuse = map[string]string{fixturekernel.VerbSetPFC: "EBUSY"}
	b, err := fixturekernel.Marshal(state)
	if err != nil {
		t.Fatal(err)
	}
	hosttest.Write(t, root, fixturekernel.File, string(b))
	// limits.d is a file before rdmad starts: a running rdmad could make
	// the directory again between its removal and the write.
	if err := os.RemoveAll(filepath.Join(root, "etc/security/limits.d")); err != nil {
		t.Fatal(err)
	}
	hosttest.Write(t, root, "etc/security/limits.d", "not a directory\n")
	livetest.Start(t, bins, addr, root, env)
	etc := filepath.Join(root, "etc/rdma")
	vars := fmt.Sprintf(`rdmad_install: false
rdmad_manage_service: false
rdmad_rdmactl: %q
rdmad_rdmad: %q
rdmad_bus: %q
rdmad_config_dir: %q
rdmad_verify_delay: 0
rdmad_verify_retries: 2
rdmad_roce:
  - {driver: mlx5_core, tos: 106}
rdmad_qos:
  - {device: mlx5_0, port: 1, pfc: [3]}
rdmad_memlock: {soft: 64G, hard: unlimited}
rdmad_links:
  - {name: rxe0, type: rxe, netdev: veth0}
  - {name: rxe7, type: rxe, netdev: nosuch0}
`, bins.Rdmactl, bins.Rdmad, addr, etc)
	_, out, err := playbook(t, vars)
	if err == nil {
		t.Fatalf("the run passed although QoS, memlock and a link did not apply:\n%s", out)
	}
	if !strings.Contains(out, "rdmad does not run the declared policy") {
		t.Fatalf("the run did not fail in the verification:\n%s", out)
	}
	limits := filepath.Join(root, "etc/security/limits.d/90-rdmad-memlock.conf")
	for _, want := range []string{"mlx5_0/1 qos pfc: set PFC of ens1f0np0: driver refused the DCB setting (status -16: device or resource busy)", "host memlock limits.d: open " + limits + ": not a directory",
		"rxe7 (rxe on nosuch0: not created"} {
		if !strings.Contains(out, want) {
			t.Errorf("the verification failure does not name %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "rxe0 (") {
		t.Errorf("rxe0, which exists, is reported missing:\n%s", out)
	}
	// The RoCE part applied: one failing kind does not stop the others.
	if got := hosttest.Read(t, root, host.ConfigfsPortPath("mlx5_0", 1, "default_roce_tos")); got != "106" {
		t.Errorf("mlx5_0/1 tos = %s", got)
	}
}

// TestRolePlacesPrometheusRules runs site.yml's second play on a Prometheus
// server (localhost): rdmad's rule files land in the rules directory, each
// checked by the real promtool first, and the reload command runs once; a
// second run changes nothing; a rule file promtool refuses fails the run
// and leaves the file in place as it was.
func TestRolePlacesPrometheusRules(t *testing.T) {
	promtool := promtest.Promtool(t)
	dir := filepath.Join(t.TempDir(), "prometheus/rules")
	marker := filepath.Join(t.TempDir(), "reloaded")
	vars := func(src string) string {
		v := fmt.Sprintf(`rdmad_hosts: none
rdmad_prometheus_hosts: localhost
rdmad_prometheus_rules_dir: %q
rdmad_prometheus_promtool: %q
rdmad_prometheus_reload: [sh, -c, 'echo >>%s']
`, dir, promtool, marker)
		if src != "" {
			v += fmt.Sprintf("rdmad_prometheus_rules_src: %q\n", src)
		}
		return v
	}
	r, out, err := playbook(t, vars(""))
	if err != nil || r.failed != 0 || r.changed <= 0 {
		t.Fatalf("first run: %+v %v\n%s", r, err, out)
	}
	shipped, _ := filepath.Glob(filepath.Join(hosttest.RepoRoot(), "contrib/prometheus/*.rules.yml"))
	placed, _ := filepath.Glob(filepath.Join(dir, "*"))
	if len(shipped) < 2 || len(placed) != len(shipped) {
		t.Fatalf("placed %v, shipped %v", placed, shipped)
	}
	for _, f := range shipped {
		if got := readFile(t, filepath.Join(dir, filepath.Base(f))); got != readFile(t, f) {
			t.Errorf("%s differs from the shipped file", filepath.Base(f))
		}
	}
	if got := readFile(t, marker); got != "\n" {
		t.Errorf("reload ran %d times, want once", strings.Count(got, "\n"))
	}
	r, out, err = playbook(t, vars(""))
	if err != nil || r.changed != 0 {
		t.Errorf("second run is not idempotent: %+v %v\n%s", r, err, out)
	}

	// A rule file promtool refuses does not land.
	bad := t.TempDir()
	if err := os.WriteFile(filepath.Join(bad, filepath.Base(shipped[0])), []byte("groups:\n  - name: x\n    rules:\n      - alert: X\n        expr: sum(\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, out, err := playbook(t, vars(bad)); err == nil {
		t.Errorf("a rule file promtool refuses was placed:\n%s", out)
	}
	if got := readFile(t, filepath.Join(dir, filepath.Base(shipped[0]))); got != readFile(t, shipped[0]) {
		t.Errorf("the refused file replaced the good one")
	}
	if got := readFile(t, marker); got != "\n" {
		t.Errorf("reload ran after a refused file")
	}
}

// TestRoleDrainsWhatItInterrupts: two hosts, each a real rdmad on its own
// bus and the demo fixture host (whose ConnectX-5 netdevs' DCB state the
// fixture serves). h1's new policy turns PFC on for mlx5_0/1 (mlx5 toggles
// the link: its plan interrupts traffic), h2's changes only a TOS. The check run says so per host and per batch; the real run, one
// host a batch (site.yml's serial), drains h1 before its drop-in lands,
// polls the wait command until it passes, resumes h1 once its policy
// verified, and leaves h2 alone. A drain that never ends fails h1, and the
// run stops there (max_fail_percentage 0): h2 is not touched.
func TestRoleDrainsWhatItInterrupts(t *testing.T) {
	type node struct{ addr, root, etc string }
	var nodes [2]node
	for i := range nodes {
		addr := bustest.Start(t)
		root, env := livetest.DemoHost(t)
		livetest.Start(t, bins, addr, root, env)
		nodes[i] = node{addr, root, filepath.Join(root, "etc/rdma")}
	}
	log := filepath.Join(t.TempDir(), "drain.log")
	inventory := fmt.Sprintf(`all:
  hosts:
    h1:
      rdmad_bus: %q
      rdmad_config_dir: %q
      rdmad_qos: [{device: mlx5_0, port: 1, pfc: [3]}]
    h2:
      rdmad_bus: %q
      rdmad_config_dir: %q
      rdmad_roce: [{device: "mlx5_*", tos: 32}]
`, nodes[0].addr, nodes[0].etc, nodes[1].addr, nodes[1].etc)
	vars := fmt.Sprintf(`rdmad_install: false
rdmad_manage_service: false
rdmad_rdmactl: %q
rdmad_rdmad: %q
rdmad_verify_delay: 0
rdmad_drain_command: "echo drain {{ inventory_hostname }} >> %[3]s"
rdmad_drain_wait_command: "n=$(cat %[3]s.polls 2>/dev/null || echo 0); echo $((n + 1)) > %[3]s.polls; test $n -ge 2"
rdmad_drain_poll: 0
rdmad_resume_command: "echo resume {{ inventory_hostname }} >> %[3]s"
`, bins.Rdmactl, bins.Rdmad, log)
	pfc := func(n node) string {
		t.Helper()
		out, err := exec.Command(bins.Rdmactl, "--bus", n.addr, "-o", "json", "qos", "show", "mlx5_0/1").Output()
		if err != nil {
			t.Fatalf("rdmactl qos show: %v", err)
		}
		var rows []struct {
			PFC []int `json:"pfc"`
		}
		if err := json.Unmarshal(out, &rows); err != nil || len(rows) != 1 {
			t.Fatalf("rdmactl -o json qos show mlx5_0/1: %v\n%s", err, out)
		}
		return fmt.Sprint(rows[0].PFC)
	}

	_, out, err := playbookOn(t, inventory, vars, "--check", "-e", "rdmad_serial=2")
	if err != nil {
		t.Fatalf("--check run: %v\n%s", err, out)
	}
	if !regexp.MustCompile(`"msg": "h1: \d+ settings? would change, 1 interrupting traffic on mlx5_0/1"`).MatchString(out) ||
		!regexp.MustCompile(`"msg": "h2: \d+ settings? would change, none interrupting traffic"`).MatchString(out) ||
		!regexp.MustCompile(`"msg": "batch of 2 hosts: \d+ settings would change; 1 host would be interrupted: h1; 0 not planned"`).MatchString(out) {
		t.Errorf("the --check run does not say which host its plan interrupts:\n%s", out)
	}
	if !regexp.MustCompile(`mlx5_0/1 +qos_pfc +\[\] +\[3\] +\S+:\d+ +link-toggle +set`).MatchString(out) {
		t.Errorf("the --check run does not show the link toggle:\n%s", out)
	}
	if _, err := os.Stat(log); err == nil || pfc(nodes[0]) != "[]" {
		t.Errorf("the --check run drained or changed a host")
	}

	_, out, err = playbookOn(t, inventory, vars)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out)
	}
	if got := readFile(t, log); got != "drain h1\nresume h1\n" {
		t.Errorf("drain log %q, want h1 drained and resumed, h2 untouched:\n%s", got, out)
	}
	if polls := strings.TrimSpace(readFile(t, log+".polls")); polls != "3" {
		t.Errorf("the wait command ran %s times, want 3 (until it passed)", polls)
	}
	if pfc(nodes[0]) != "[3]" || hosttest.Read(t, nodes[1].root, host.ConfigfsPortPath("mlx5_0", 1, "default_roce_tos")) != "32" {
		t.Errorf("the policies did not apply: mlx5_0/1 PFC %s", pfc(nodes[0]))
	}
	// One host a batch: h1 is resumed before h2 is planned.
	if r, p := strings.Index(out, "TASK [rdmad : Resume the host]"), strings.LastIndex(out, "TASK [rdmad : Plan the drop-in (rdmactl plan)]"); r < 0 || p < r {
		t.Errorf("h2 was planned before h1 was resumed (serial):\n%s", out)
	}

	// A drain that never ends fails h1 and stops the run: h2 keeps its TOS.
	if err := os.Remove(log); err != nil {
		t.Fatal(err)
	}
	stuck := strings.Replace(vars, "test $n -ge 2", "false", 1) + "rdmad_drain_timeout: 2\nrdmad_drain_poll: 1\n"
	inventory2 := strings.Replace(strings.Replace(inventory, "pfc: [3]", "pfc: [3, 4]", 1), "tos: 32", "tos: 64", 1)
	_, out, err = playbookOn(t, inventory2, stuck)
	if err == nil {
		t.Fatalf("a drain that never ends passed:\n%s", out)
	}
	if got := readFile(t, log); got != "drain h1\n" {
		t.Errorf("drain log %q: want h1 drained, not resumed", got)
	}
	if pfc(nodes[0]) != "[3]" || hosttest.Read(t, nodes[1].root, host.ConfigfsPortPath("mlx5_0", 1, "default_roce_tos")) != "32" {
		t.Errorf("the run went on after h1 failed: mlx5_0/1 PFC %s", pfc(nodes[0]))
	}
}

// TestRolePlacesHealthChecks: the Slurm check's settings from the role's
// mapping, quoted for the shell and read back by the check's own shell;
// the NHC check linked into NHC's scripts with its line in nhc.conf, once.
func TestRolePlacesHealthChecks(t *testing.T) {
	dir := t.TempDir()
	etc := filepath.Join(dir, "etc/rdma")
	conf := filepath.Join(dir, "etc/rdmad/slurm-healthcheck.conf")
	nhc := filepath.Join(dir, "etc/nhc")
	script := filepath.Join(hosttest.RepoRoot(), "contrib/nhc/rdmad.nhc")
	vars := renderOnly(etc) + fmt.Sprintf(`rdmad_slurm_healthcheck: true
rdmad_slurm_healthcheck_conf: %q
rdmad_slurm_healthcheck_settings: {NO_ANSWER_DRAIN: 5, VERIFY: "yes", VERIFY_ARGS: "--timeout 5s --size 64M"}
rdmad_nhc_check: true
rdmad_nhc_dir: %q
rdmad_nhc_script: %q
`, conf, nhc, script)
	for run := 0; run < 2; run++ {
		if r, out, err := playbook(t, vars); err != nil || r.failed != 0 {
			t.Fatalf("run %d: %+v %v\n%s", run, r, err, out)
		}
	}
	out, err := exec.Command("sh", "-c", `. "$1" && printf '%s|%s|%s' "$NO_ANSWER_DRAIN" "$VERIFY" "$VERIFY_ARGS"`, "sh", conf).CombinedOutput()
	if err != nil || string(out) != "5|yes|--timeout 5s --size 64M" {
		t.Errorf("the check reads %q (%v) from:\n%s", out, err, readFile(t, conf))
	}
	if target, err := os.Readlink(filepath.Join(nhc, "scripts/rdmad.nhc")); err != nil || target != script {
		t.Errorf("NHC script link: %q %v", target, err)
	}
	if got := readFile(t, filepath.Join(nhc, "nhc.conf")); got != "* || check_rdmad\n" {
		t.Errorf("nhc.conf after two runs: %q", got)
	}
}
