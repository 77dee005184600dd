package units

import (
	"bufio"
	"bytes"
	"encoding/xml"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/dbusapi"
)

// maxExposure is the ceiling of systemd-analyze security's exposure score
// for rdmad.service: no more exposed than the system services that also
// change the host for D-Bus callers (systemd-hostnamed scores 1.5,
// systemd-networkd 2.8 on the reference machine).
const maxExposure = 2.5

// sandboxDoc lists, under notTightenedHeading, the analyzer items that stay
// open and why.
const (
	sandboxDoc          = "../docs/decisions/sandbox.md"
	notTightenedHeading = "## What could not be tightened"
)

// securityReport runs `systemd-analyze security --offline=yes` on the unit and
// returns the overall exposure and the names of the items it marks open (✗).
func securityReport(t *testing.T, unit string) (exposure float64, open []string, out string) {
	t.Helper()
	analyze := requireTool(t, "systemd-analyze")
	data, err := os.ReadFile(unit)
	if err != nil {
		t.Fatal(err)
	}
	// The analyzer names the unit after the file: keep the name.
	path := filepath.Join(t.TempDir(), filepath.Base(unit))
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(analyze, "security", "--offline=yes", "--no-pager", path)
	cmd.Env = append(os.Environ(), "SYSTEMD_COLORS=0")
	b, err := cmd.CombinedOutput()
	out = string(b)
	if err != nil {
		t.Fatalf("systemd-analyze security: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`Overall exposure level for \S+: ([0-9.]+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no overall exposure in systemd-analyze security output:\n%s", out)
	}
	exposure, err = strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[0] == "✗" {
			open = append(open, f[1])
		}
	}
	return exposure, open, out
}

// documentedOpenItems reads the first column of the table under
// notTightenedHeading in the sandbox decisions.
func documentedOpenItems(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(sandboxDoc)
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), notTightenedHeading+"\n")
	if !ok {
		t.Fatalf("%s has no %q section", sandboxDoc, notTightenedHeading)
	}
	if i := strings.Index(section, "\n## "); i >= 0 {
		section = section[:i]
	}
	var items []string
	row := regexp.MustCompile("^\\| `([^`]+)` \\|")
	for _, line := range strings.Split(section, "\n") {
		if m := row.FindStringSubmatch(line); m != nil {
			items = append(items, m[1])
		}
	}
	return items
}

// TestSecurityExposure holds rdmad.service to its exposure ceiling, and keeps
// docs/decisions/sandbox.md honest: what the analyzer still finds open is
// exactly what the document explains.
func TestSecurityExposure(t *testing.T) {
	exposure, open, out := securityReport(t, "rdmad.service")
	t.Logf("rdmad.service exposure %.1f", exposure)
	if exposure > maxExposure {
		t.Errorf("systemd-analyze security: exposure %.1f, want <= %.1f\n%s", exposure, maxExposure, out)
	}
	documented := documentedOpenItems(t)
	if len(documented) == 0 {
		t.Fatalf("%s: no rows under %q", sandboxDoc, notTightenedHeading)
	}
	for _, item := range open {
		if !slices.Contains(documented, item) {
			t.Errorf("analyzer item %s is open but %s does not say why (tighten it or add a row)", item, sandboxDoc)
		}
	}
	for _, item := range documented {
		if !slices.Contains(open, item) {
			t.Errorf("%s explains %s as not tightened, but the analyzer finds it closed: remove the row", sandboxDoc, item)
		}
	}
}

// The comparison above must notice a loosened unit: without the system call
// filter the exposure rises and new open items appear.
func TestSecurityExposureDetectsLoosening(t *testing.T) {
	data, err := os.ReadFile("rdmad.service")
	if err != nil {
		t.Fatal(err)
	}
	loose := regexp.MustCompile(`(?m)^(SystemCallFilter|IPAddressDeny|ProtectKernelTunables)=.*\n`).ReplaceAll(data, nil)
	if bytes.Equal(loose, data) {
		t.Fatal("rdmad.service has none of the lines this test removes")
	}
	path := filepath.Join(t.TempDir(), "rdmad.service")
	if err := os.WriteFile(path, loose, 0o644); err != nil {
		t.Fatal(err)
	}
	exposure, open, _ := securityReport(t, path)
	strict, _, _ := securityReport(t, "rdmad.service")
	if exposure <= strict {
		t.Errorf("exposure without the filter %.1f, not above the unit's %.1f", exposure, strict)
	}
	if !slices.Contains(open, "SystemCallFilter=~@mount") || !slices.Contains(open, "IPAddressDeny=") {
		t.Errorf("open items of the loosened unit lack the filter and IP items: %v", open)
	}
}

// syscallSets expands systemd's system call groups with the real tool.
type syscallSets struct {
	analyze string
	groups  map[string][]string
}

func (s *syscallSets) expand(t *testing.T, name string) []string {
	t.Helper()
	if !strings.HasPrefix(name, "@") {
		return []string{name}
	}
	if calls, ok := s.groups[name]; ok {
		return calls
	}
	out, err := exec.Command(s.analyze, "syscall-filter", "--no-pager", name).Output()
	if err != nil {
		t.Fatalf("systemd-analyze syscall-filter %s: %v", name, err)
	}
	var calls []string
	for i, line := range strings.Split(string(out), "\n") {
		line = strings.TrimSpace(line)
		if i == 0 || line == "" || strings.HasPrefix(line, "#") {
			continue // the group's own name, comments
		}
		calls = append(calls, s.expand(t, line)...)
	}
	if len(calls) == 0 {
		t.Fatalf("systemd-analyze syscall-filter %s: empty group", name)
	}
	s.groups[name] = calls
	return calls
}

// allowedSyscalls evaluates the unit's SystemCallFilter= lines as systemd
// does for an allow-list: the first line sets the list, each later line adds
// to it, or removes from it when it starts with "~".
func allowedSyscalls(t *testing.T) map[string]bool {
	t.Helper()
	u, err := parseUnit("rdmad.service")
	if err != nil {
		t.Fatal(err)
	}
	lines := u["Service.SystemCallFilter"]
	if len(lines) == 0 {
		t.Fatal("rdmad.service has no SystemCallFilter=")
	}
	if strings.HasPrefix(lines[0], "~") {
		t.Fatalf("SystemCallFilter starts with a deny-list (%q): this test models allow-lists", lines[0])
	}
	sets := &syscallSets{analyze: requireTool(t, "systemd-analyze"), groups: map[string][]string{}}
	allowed := map[string]bool{}
	for _, line := range lines {
		remove := strings.HasPrefix(line, "~")
		for _, item := range strings.Fields(strings.TrimPrefix(line, "~")) {
			for _, call := range sets.expand(t, item) {
				if remove {
					delete(allowed, call)
				} else {
					allowed[call] = true
				}
			}
		}
	}
	return allowed
}

// TestSyscallFilterShape: modprobe can load modules, nothing can unload them,
// and the privileged and resource-control calls are gone.
func TestSyscallFilterShape(t *testing.T) {
	allowed := allowedSyscalls(t)
	for _, call := range []string{"finit_module", "init_module", "execve", "openat", "socket", "sendmsg", "inotify_add_watch", "renameat", "fchmod", "prlimit64"} {
		if !allowed[call] {
			t.Errorf("%s is filtered out; rdmad or modprobe needs it", call)
		}
	}
	for _, call := range []string{"delete_module", "mount", "reboot", "swapon", "chown", "setuid", "settimeofday", "setpriority", "sched_setscheduler", "ptrace", "bpf", "kexec_load"} {
		if allowed[call] {
			t.Errorf("%s is allowed; the filter should refuse it", call)
		}
	}
	if u, _ := parseUnit("rdmad.service"); u.get("Service.SystemCallErrorNumber") != "EPERM" {
		t.Errorf("SystemCallErrorNumber = %q, want EPERM (a refused call fails one action, it does not kill rdmad)", u.get("Service.SystemCallErrorNumber"))
	}
}

// TestRdmadSyscallsInFilter runs the real rdmad on a fixture host and a
// private bus under strace, through start, D-Bus reads and writes, a
// persisted change, reload, Diagnose, SIGHUP, module loading and shutdown,
// and checks that every system call it (and the modprobe it runs) makes is
// in the unit's allow-list. The VM test runs it under the real filter; this
// finds a new call (a Go release, a dependency) on the build machine first.
func TestRdmadSyscallsInFilter(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and traces rdmad")
	}
	strace := requireTool(t, "strace")
	requireTool(t, "dbus-daemon")
	allowed := allowedSyscalls(t)

	bin := t.TempDir()
	rdmad, rdmactl := filepath.Join(bin, "rdmad"), filepath.Join(bin, "rdmactl")
	for out, pkg := range map[string]string{rdmad: "../cmd/rdmad", rdmactl: "../cmd/rdmactl"} {
		if b, err := exec.Command("go", "build", "-o", out, pkg).CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, b)
		}
	}
	root := hosttest.Copy(t, "demo")
	repo := hosttest.RepoRoot()
	for src, dst := range map[string]string{
		"etc/rdma/rdmad.toml":        "etc/rdma/rdmad.toml",
		"docs/examples/50-roce.toml": "etc/rdma/rdmad.d/50-roce.toml",
	} {
		b, err := os.ReadFile(filepath.Join(repo, src))
		if err != nil {
			t.Fatal(err)
		}
		hosttest.Write(t, root, dst, string(b))
	}
	// modprobe stand-in: lists what it loads in the fixture's proc/modules.
	env, _ := hosttest.ModprobeScript(t, root)
	addr := privateBus(t)

	trace := filepath.Join(t.TempDir(), "trace")
	cmd := exec.Command(strace, "-f", "-qq", "-o", trace, rdmad, "--root", root, "--bus", addr)
	cmd.Env = env
	var logs bytes.Buffer
	cmd.Stderr = &logs
	cmd.WaitDelay = 10 * time.Second // a surviving child must not hold the test on its stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	pid := 0 // rdmad's, once known
	stopped := false
	defer func() {
		if !stopped {
			if pid > 0 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			_ = cmd.Process.Kill()
			<-done
		}
	}()
	ctl := func(args ...string) error {
		out, err := exec.Command(rdmactl, append([]string{"--bus", addr}, args...)...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("rdmactl %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	deadline := time.Now().Add(60 * time.Second)
	for ctl("status") != nil {
		if time.Now().After(deadline) {
			t.Fatalf("rdmad under strace never answered on the bus\n%s", logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	pid = tracedChild(t, cmd.Process.Pid)
	for _, args := range [][]string{
		{"-o", "json", "status"},
		{"roce", "set", "mlx5_0/1", "--tos", "32", "--persist"},
		{"reload"},
	} {
		if err := ctl(args...); err != nil {
			t.Error(err)
		}
	}
	// Diagnose runs the doctor's host reads inside rdmad; doctor exits 1 when
	// a check fails (the fixture has no uverbs), 0 otherwise.
	out, err := exec.Command(rdmactl, "--bus", addr, "-o", "json", "doctor").Output()
	if ee, ok := err.(*exec.ExitError); (err != nil && !ok) || (ok && ee.ExitCode() != 1) || !bytes.HasPrefix(out, []byte("[")) {
		t.Errorf("rdmactl -o json doctor: %v: %.200s", err, out)
	}
	if err := syscall.Kill(pid, syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if err := ctl("status"); err != nil {
		t.Error(err)
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		stopped = true
		if err != nil {
			t.Errorf("rdmad under strace: %v\n%s", err, logs.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("rdmad did not stop on SIGTERM\n%s", logs.String())
	}

	used := tracedSyscalls(t, trace)
	// The exercise must have reached what the filter has to allow: exec of
	// modprobe, the bus, netlink, the config watch, an atomic write.
	for _, call := range []string{"execve", "socket", "connect", "bind", "inotify_add_watch", "fchmod", "fsync"} {
		if used[call] == 0 {
			t.Errorf("rdmad never called %s: the traced run did not exercise what it claims", call)
		}
	}
	var refused []string
	for call, n := range used {
		if !allowed[call] {
			refused = append(refused, fmt.Sprintf("%s (%d calls)", call, n))
		}
	}
	sort.Strings(refused)
	if len(refused) > 0 {
		t.Errorf("rdmad.service's SystemCallFilter refuses calls rdmad makes (they would fail with EPERM): %s", strings.Join(refused, ", "))
	}
	t.Logf("%d distinct system calls traced", len(used))
}

// tracedChild returns the pid of the process strace started.
func tracedChild(t *testing.T, stracePid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", stracePid, stracePid))
	if err != nil {
		t.Fatalf("children of strace: %v", err)
	}
	f := strings.Fields(string(b))
	if len(f) != 1 {
		t.Fatalf("strace has children %q, want one", f)
	}
	pid, err := strconv.Atoi(f[0])
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// tracedSyscalls counts the system calls in an strace -f log ("PID name(...").
func tracedSyscalls(t *testing.T, trace string) map[string]int {
	t.Helper()
	f, err := os.Open(trace)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	call := regexp.MustCompile(`^\d+\s+([a-z0-9_]+)\(`)
	used := map[string]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 4*1024*1024)
	for sc.Scan() {
		if m := call.FindStringSubmatch(sc.Text()); m != nil {
			used[m[1]]++
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(used) == 0 {
		t.Fatalf("no system calls in %s", trace)
	}
	return used
}

// privateBus starts a dbus-daemon with the tests' bus configuration
// (test/bus/bus.conf.in) and returns its address; it stops with the test.
func privateBus(t *testing.T) string {
	t.Helper()
	tmpl, err := os.ReadFile("../test/bus/bus.conf.in")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	conf := strings.ReplaceAll(string(tmpl), "@SOCKET@", filepath.Join(dir, "bus.sock"))
	return startBus(t, dir, conf)
}

// actionIDs are the polkit action ids a text names, sorted, without
// repeats.
func actionIDs(text string) []string {
	ids := regexp.MustCompile(`org\.rdmad1\.[a-z-]*[a-z]`).FindAllString(text, -1)
	sort.Strings(ids)
	return slices.Compact(ids)
}

// managerTable reads the org.rdmad1.Manager table of docs/security.md:
// method -> the polkit actions its row names (none: nil) and their
// default ("none" when unauthorized).
func managerTable(t *testing.T) map[string]managerRow {
	t.Helper()
	data, err := os.ReadFile("../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "### org.rdmad1.Manager\n")
	if !ok {
		t.Fatal("docs/security.md has no ### org.rdmad1.Manager table")
	}
	if i := strings.Index(section, "\n#"); i >= 0 {
		section = section[:i]
	}
	row := regexp.MustCompile("^\\| `([A-Za-z]+)` \\| ([^|]*) \\| (?:`([^`]+)`|none) \\|")
	rows := map[string]managerRow{}
	for _, line := range strings.Split(section, "\n") {
		if m := row.FindStringSubmatch(line); m != nil {
			def := m[3]
			if def == "" {
				def = "none"
			}
			rows[m[1]] = managerRow{actionIDs(m[2]), def}
		}
	}
	return rows
}

type managerRow struct {
	actions []string
	def     string
}

// TestSecurityDocMethodTable keeps docs/security.md's table of who may call
// what equal to the API: every Manager method of the introspection XML has a
// row with the polkit action its documentation names, and every action's
// defaults in org.rdmad1.policy are the ones the table states.
func TestSecurityDocMethodTable(t *testing.T) {
	xmlData, err := os.ReadFile("../dbusapi/org.rdmad1.xml")
	if err != nil {
		t.Fatal(err)
	}
	contract, err := dbusapi.ParseContract(xmlData)
	if err != nil {
		t.Fatal(err)
	}
	var policy struct {
		Actions []struct {
			ID       string `xml:"id,attr"`
			Defaults struct {
				Any      string `xml:"allow_any"`
				Inactive string `xml:"allow_inactive"`
				Active   string `xml:"allow_active"`
			} `xml:"defaults"`
		} `xml:"action"`
	}
	policyData, err := os.ReadFile("org.rdmad1.policy")
	if err != nil {
		t.Fatal(err)
	}
	if err := xml.Unmarshal(policyData, &policy); err != nil {
		t.Fatalf("org.rdmad1.policy: %v", err)
	}
	defaults := map[string][3]string{}
	for _, a := range policy.Actions {
		defaults[a.ID] = [3]string{a.Defaults.Any, a.Defaults.Inactive, a.Defaults.Active}
	}

	table := managerTable(t)
	methods := map[string]bool{}
	for _, iface := range contract.Interfaces {
		if iface.Name != dbusapi.ManagerIface {
			continue
		}
		for _, m := range iface.Members {
			if m.Kind != "method" {
				continue
			}
			methods[m.Name] = true
			var want []string
			if _, after, ok := strings.Cut(m.Doc, "Polkit action:"); ok {
				want = actionIDs(after)
			}
			row, ok := table[m.Name]
			switch {
			case !ok:
				t.Errorf("docs/security.md: no row for %s.%s (polkit actions %q)", iface.Name, m.Name, want)
				continue
			case !slices.Equal(row.actions, want):
				t.Errorf("docs/security.md: %s has polkit actions %q, the XML says %q", m.Name, row.actions, want)
			}
			for _, a := range want {
				d, ok := defaults[a]
				if !ok {
					t.Errorf("%s: action %s is not in org.rdmad1.policy", m.Name, a)
					continue
				}
				for i, v := range d {
					if v != row.def {
						t.Errorf("org.rdmad1.policy: %s default %d is %q, docs/security.md says %q", a, i, v, row.def)
					}
				}
			}
		}
	}
	if len(methods) == 0 {
		t.Fatalf("no methods of %s in the XML", dbusapi.ManagerIface)
	}
	for name := range table {
		if !methods[name] {
			t.Errorf("docs/security.md lists %s, which org.rdmad1.Manager does not have", name)
		}
	}
}
