// Package units holds checks of the files rdmad ships for systemd, udev,
// D-Bus and polkit: the tools that consume them on a real host parse them here.
package units

import (
	"bufio"
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/rdmad/rdmad/test/testdeps"
)

// shippedUnits are the systemd units verified with systemd-analyze: ours and
// the e2e guest's runner (it boots the same way on every e2e run).
var shippedUnits = []string{
	"rdmad.service",
	"../test/e2e/guest/rdmad-e2e.service",
}

// requireTool is the path of a program the checks run: a bare `go test`
// on a machine without systemd skips them; `make test` installs the tools
// (test/install-deps.sh) and fails without them.
func requireTool(t *testing.T, name string) string {
	t.Helper()
	pkg := map[string]string{"strace": "strace", "dbus-daemon": "dbus-daemon", "make": "make"}[name]
	if pkg == "" {
		pkg = "systemd" // systemd-analyze, systemd-sysusers, systemd-tmpfiles
	}
	return testdeps.Tool(t, name, pkg)
}

// TestSystemdAnalyzeVerify runs `systemd-analyze verify` on every unit and
// fails on anything it prints about them (warnings included: systemd loads a
// unit with a misspelt key but ignores the key).
func TestSystemdAnalyzeVerify(t *testing.T) {
	analyze := requireTool(t, "systemd-analyze")
	dir := t.TempDir()
	// ExecStart must name an executable that exists, or verify complains.
	fakeBin := filepath.Join(dir, "rdmad-bin")
	if err := os.WriteFile(fakeBin, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, u := range shippedUnits {
		data, err := os.ReadFile(u)
		if err != nil {
			t.Fatalf("read %s: %v", u, err)
		}
		text := regexp.MustCompile(`(?m)^(ExecStart=)\S+`).ReplaceAllString(string(data), "${1}"+fakeBin)
		dst := filepath.Join(dir, filepath.Base(u))
		if err := os.WriteFile(dst, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, dst)
	}
	cmd := exec.Command(analyze, append([]string{"verify", "--man=no", "--generators=no"}, paths...)...)
	out, err := cmd.CombinedOutput()
	var ours []string
	for _, line := range strings.Split(string(out), "\n") {
		for _, p := range paths {
			if strings.Contains(line, filepath.Base(p)) || strings.Contains(line, dir) {
				ours = append(ours, line)
				break
			}
		}
	}
	if len(ours) > 0 {
		t.Errorf("systemd-analyze verify reports on our units:\n%s", strings.Join(ours, "\n"))
	}
	if err != nil && len(ours) == 0 {
		// A failure not attributable to our files (the host's own units) is
		// shown but does not fail the test.
		t.Logf("systemd-analyze verify exited %v:\n%s", err, out)
	}
}

// TestServiceContract checks the settings other parts rely on: the bus name
// dbus activation and rdmactl look for, the alias the activation file names,
// and hardening that must not break modprobe.
func TestServiceContract(t *testing.T) {
	u, err := parseUnit("rdmad.service")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"Service.Type":            "notify",
		"Service.BusName":         "org.rdmad1",
		"Service.ExecStart":       "/usr/sbin/rdmad",
		"Service.Restart":         "on-failure",
		"Install.Alias":           "dbus-org.rdmad1.service",
		"Install.WantedBy":        "multi-user.target",
		"Service.NoNewPrivileges": "yes",
	}
	for key, v := range want {
		if got := u.get(key); got != v {
			t.Errorf("%s = %q, want %q", key, got, v)
		}
	}
	caps := strings.Fields(u.get("Service.CapabilityBoundingSet"))
	for _, c := range []string{"CAP_SYS_MODULE", "CAP_NET_ADMIN"} {
		if !contains(caps, c) {
			t.Errorf("CapabilityBoundingSet %v lacks %s", caps, c)
		}
	}
	if v := u.get("Service.ProtectKernelModules"); v == "yes" || v == "true" {
		t.Errorf("ProtectKernelModules=%s forbids modprobe", v)
	}
	rw := strings.Fields(u.get("Service.ReadWritePaths"))
	// ProtectKernelTunables makes all of /sys read-only: configfs rdma_cm
	// (RoCE) and /sys/devices (mlx4_port<N>) must be opened again.
	if v := u.get("Service.ProtectKernelTunables"); v == "yes" || v == "true" {
		for _, p := range []string{"/sys/kernel/config", "/sys/devices"} {
			if !contains(rw, p) && !contains(rw, "-"+p) {
				t.Errorf("ProtectKernelTunables=%s without ReadWritePaths=%s: rdmad could not write there", v, p)
			}
		}
	}
	tmpfiles, err := os.ReadFile("rdmad.tmpfiles")
	if err != nil {
		t.Fatal(err)
	}
	// Every writable /etc path must be created by tmpfiles, or strict
	// protection leaves rdmad unable to create it.
	for _, p := range rw {
		p = strings.TrimPrefix(p, "-")
		if strings.HasPrefix(p, "/etc/") && !regexp.MustCompile(`(?m)^d\s+`+regexp.QuoteMeta(p)+`\s`).Match(tmpfiles) {
			t.Errorf("ReadWritePaths %s is not created by rdmad.tmpfiles", p)
		}
	}
}

type unitFile map[string][]string // "Section.Key" -> values in order

func (u unitFile) get(key string) string { return strings.Join(u[key], " ") }

// parseUnit reads a systemd unit file: sections, Key=Value, comments,
// backslash continuation. Anything else is an error naming file and line.
func parseUnit(name string) (unitFile, error) {
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	u := unitFile{}
	section := ""
	lines := strings.Split(string(data), "\n")
	for i := 0; i < len(lines); i++ {
		line := strings.TrimSpace(lines[i])
		no := i + 1
		for strings.HasSuffix(line, "\\") && i+1 < len(lines) {
			i++
			line = strings.TrimSuffix(line, "\\") + " " + strings.TrimSpace(lines[i])
		}
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
		case line[0] == '[' && line[len(line)-1] == ']':
			section = line[1 : len(line)-1]
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				return nil, fmt.Errorf("%s:%d: not a Key=Value line in a section: %q", name, no, line)
			}
			u[section+"."+strings.TrimSpace(k)] = append(u[section+"."+strings.TrimSpace(k)], strings.TrimSpace(v))
		}
	}
	return u, nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// udevToken is one KEY op "value" of a rule line.
var udevToken = regexp.MustCompile(`^\s*([A-Z_]+(?:\{[^}]+\})?)\s*(==|!=|\+=|-=|:=|=)\s*"((?:[^"\\]|\\.)*)"\s*(?:,|$)`)

var udevMatchOnly = map[string]bool{"ACTION": true, "SUBSYSTEM": true, "KERNEL": true, "DRIVER": true, "DEVPATH": true}

type udevRule struct {
	line   int
	tokens [][3]string // key, op, value
}

// parseUdevRules checks the syntax udevd accepts (systemd 252 has no
// `udevadm verify`): comma-separated KEY op "value" tokens, match-only keys
// used only with == or !=.
func parseUdevRules(name string, data []byte) ([]udevRule, error) {
	var rules []udevRule
	for i, line := range strings.Split(string(data), "\n") {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue
		}
		r := udevRule{line: i + 1}
		rest := trimmed
		for rest != "" {
			m := udevToken.FindStringSubmatch(rest)
			if m == nil {
				return nil, fmt.Errorf("%s:%d: cannot parse %q", name, i+1, rest)
			}
			key, op := m[1], m[2]
			if udevMatchOnly[key] && op != "==" && op != "!=" {
				return nil, fmt.Errorf("%s:%d: %s is match-only, used with %q", name, i+1, key, op)
			}
			r.tokens = append(r.tokens, [3]string{key, op, m[3]})
			rest = strings.TrimSpace(rest[len(m[0]):])
		}
		rules = append(rules, r)
	}
	return rules, nil
}

func TestUdevRule(t *testing.T) {
	data, err := os.ReadFile("90-rdmad.rules")
	if err != nil {
		t.Fatal(err)
	}
	rules, err := parseUdevRules("90-rdmad.rules", data)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{
		`ACTION=="add"`:                       false,
		`SUBSYSTEM=="infiniband"`:             false,
		`TAG+="systemd"`:                      false,
		`ENV{SYSTEMD_WANTS}+="rdmad.service"`: false,
	}
	for _, r := range rules {
		for _, tok := range r.tokens {
			k := tok[0] + tok[1] + `"` + tok[2] + `"`
			if _, ok := want[k]; ok {
				want[k] = true
			}
		}
	}
	for k, seen := range want {
		if !seen {
			t.Errorf("90-rdmad.rules lacks %s", k)
		}
	}
	if len(rules) != 1 {
		t.Errorf("want one rule line (all tokens must be on it to combine), got %d", len(rules))
	}
	if p, err := exec.LookPath("udevadm"); err == nil {
		// `udevadm verify` exists from systemd 253; older udevadm prints its
		// unknown-command error and the parser above is the check.
		out, err := exec.Command(p, "verify", "90-rdmad.rules").CombinedOutput()
		if err == nil {
			t.Logf("udevadm verify: %s", out)
		} else if !bytes.Contains(out, []byte("nknown")) && !bytes.Contains(out, []byte("nvalid command")) {
			t.Errorf("udevadm verify 90-rdmad.rules: %v\n%s", err, out)
		}
	}
}

// The parser must reject what udevd rejects, or TestUdevRule proves nothing.
func TestUdevParserRejects(t *testing.T) {
	for _, bad := range []string{
		`ACTION="add", SUBSYSTEM=="infiniband"`, // assignment to a match-only key
		`ACTION=="add" SUBSYSTEM=="infiniband"`, // missing comma
		`ENV{SYSTEMD_WANTS}+=rdmad.service`,     // unquoted value
		`ACTION=="add", SUBSYSTEM=="infiniband`, // unterminated quote
	} {
		if _, err := parseUdevRules("bad.rules", []byte(bad)); err == nil {
			t.Errorf("parser accepted %q", bad)
		}
	}
}

// TestSysusersAndTmpfiles applies both files to a scratch root with the real
// systemd tools and checks the result.
func TestSysusersAndTmpfiles(t *testing.T) {
	sysusers := requireTool(t, "systemd-sysusers")
	tmpfiles := requireTool(t, "systemd-tmpfiles")
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	abs := func(n string) string { p, _ := filepath.Abs(n); return p }
	if out, err := exec.Command(sysusers, "--root="+root, abs("rdmad.sysusers")).CombinedOutput(); err != nil {
		t.Fatalf("systemd-sysusers: %v\n%s", err, out)
	}
	group, err := os.ReadFile(filepath.Join(root, "etc/group"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^rdma:x:\d+:`).Match(group) {
		t.Errorf("sysusers did not create group rdma:\n%s", group)
	}
	out, err := exec.Command(tmpfiles, "--root="+root, "--create", abs("rdmad.tmpfiles")).CombinedOutput()
	if err != nil {
		t.Fatalf("systemd-tmpfiles --create: %v\n%s", err, out)
	}
	if len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("systemd-tmpfiles complained:\n%s", out)
	}
	for _, d := range []string{"etc/rdma/rdmad.d", "etc/security/limits.d", "etc/systemd/system.conf.d", "etc/modprobe.d"} {
		st, err := os.Stat(filepath.Join(root, d))
		if err != nil || !st.IsDir() || st.Mode().Perm() != 0o755 {
			t.Errorf("tmpfiles did not create %s 0755: %v %v", d, st, err)
		}
	}
}

// wellFormedXML decodes every token; it returns the root element name and the
// DOCTYPE directive, if any.
func wellFormedXML(data []byte) (root, doctype string, err error) {
	dec := xml.NewDecoder(bytes.NewReader(data))
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return root, doctype, nil
		}
		if err != nil {
			return root, doctype, err
		}
		switch v := tok.(type) {
		case xml.StartElement:
			if root == "" {
				root = v.Name.Local
			}
		case xml.Directive:
			doctype = string(v)
		}
	}
}

func TestDBusAndPolkitFiles(t *testing.T) {
	files := map[string]string{"org.rdmad1.conf": "busconfig", "org.rdmad1.policy": "policyconfig"}
	for name, wantRoot := range files {
		data, err := os.ReadFile(name)
		if errors.Is(err, os.ErrNotExist) {
			t.Logf("%s not in the tree yet", name)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		root, _, err := wellFormedXML(data)
		if err != nil {
			t.Errorf("%s: not well-formed XML: %v", name, err)
			continue
		}
		if root != wantRoot {
			t.Errorf("%s: root element <%s>, want <%s>", name, root, wantRoot)
		}
	}
	if _, err := os.Stat("org.rdmad1.conf"); err == nil {
		checkPolicyLoadsInDBusDaemon(t)
	}
	// The activation file must hand activation to systemd by the unit's own
	// name: the dbus-org.rdmad1.service alias exists only once the unit is
	// enabled, and udev-started hosts need not enable it.
	if data, err := os.ReadFile("org.rdmad1.service"); err == nil {
		for _, want := range []string{"[D-BUS Service]", "Name=org.rdmad1", "SystemdService=rdmad.service"} {
			if !bytes.Contains(data, []byte(want)) {
				t.Errorf("org.rdmad1.service lacks %q", want)
			}
		}
	}
}

// checkPolicyLoadsInDBusDaemon starts a private dbus-daemon whose config
// includes our policy: dbus-daemon refuses to start on a policy it cannot parse.
func checkPolicyLoadsInDBusDaemon(t *testing.T) {
	dir := t.TempDir()
	policy, _ := filepath.Abs("org.rdmad1.conf")
	conf := fmt.Sprintf(`<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path=%s/bus</listen>
  <auth>EXTERNAL</auth>
  <policy context="default"><allow user="*"/></policy>
  <include>%s</include>
</busconfig>
`, dir, policy)
	startBus(t, dir, conf)
}

// startBus runs dbus-daemon with configuration conf (written into dir) until
// the test ends and returns the address it prints once the configuration is
// loaded; a configuration it refuses fails the test with its complaint.
func startBus(t *testing.T, dir, conf string) string {
	t.Helper()
	daemon := requireTool(t, "dbus-daemon")
	confPath := filepath.Join(dir, "bus.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(daemon, "--config-file="+confPath, "--print-address", "--nofork", "--nopidfile")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	// The address line appears once the config is loaded; EOF if refused.
	addr, _ := bufio.NewReader(stdout).ReadString('\n')
	if !strings.HasPrefix(addr, "unix:") {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("dbus-daemon did not start with %s:\n%s", confPath, stderr.String())
	}
	return strings.TrimSpace(addr)
}

// The unit bounds rdmad's memory (MemoryHigh below MemoryMax, Go's own
// limit below both), and the DaemonSet gives the container the same hard
// bound: one measurement at 1,024 devices sizes both
// (docs/performance.md).
func TestMemoryBound(t *testing.T) {
	u, err := parseUnit("rdmad.service")
	if err != nil {
		t.Fatal(err)
	}
	size := func(v string) int64 {
		units := map[string]int64{"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30}
		i := strings.IndexFunc(v, func(r rune) bool { return r < '0' || r > '9' })
		if i <= 0 {
			t.Fatalf("size %q", v)
		}
		n, _ := strconv.ParseInt(v[:i], 10, 64)
		m, ok := units[v[i:]]
		if !ok {
			t.Fatalf("size %q", v)
		}
		return n * m
	}
	high, hardMax := size(u.get("Service.MemoryHigh")), size(u.get("Service.MemoryMax"))
	goLimit := size(strings.TrimPrefix(u.get("Service.Environment"), "GOMEMLIMIT="))
	if !(goLimit < high && high < hardMax) {
		t.Errorf("GOMEMLIMIT %d, MemoryHigh %d, MemoryMax %d: want each below the next", goLimit, high, hardMax)
	}
	ds, err := os.ReadFile("../contrib/kubernetes/daemonset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`limits: \{memory: (\w+)\}`).FindSubmatch(ds)
	if m == nil || size(string(m[1])) != hardMax {
		t.Errorf("the DaemonSet's memory limit %q is not the unit's MemoryMax (%d bytes)", m, hardMax)
	}
	perf, err := os.ReadFile("../docs/performance.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"MemoryHigh=" + u.get("Service.MemoryHigh"), "MemoryMax=" + u.get("Service.MemoryMax")} {
		if !strings.Contains(string(perf), want) {
			t.Errorf("docs/performance.md does not record %s", want)
		}
	}
}
