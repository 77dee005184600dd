package units

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The e2e host side decides pass/fail from the guest's serial console. These
// tests feed `test/e2e/run.sh report DIR` consoles as qemu writes them (CRLF,
// colour codes, systemd status lines) and check its verdict.

var suites = []string{"bookworm", "trixie"}

var kernels = map[string]string{"bookworm": "6.1.0-56-amd64", "trixie": "6.12.117+deb13-amd64"}

func scenarios(t *testing.T, suite string, boot int) []string {
	t.Helper()
	out, err := exec.Command("bash", "../test/e2e/guest/rdmad-e2e.sh", "list", suite, fmt.Sprint(boot)).Output()
	if err != nil {
		t.Fatalf("rdmad-e2e.sh list %s %d: %v", suite, boot, err)
	}
	names := strings.Fields(string(out))
	if len(names) == 0 {
		t.Fatalf("%s boot %d has no scenarios", suite, boot)
	}
	return names
}

// console renders a serial log in which every scenario reports verdict(name).
func console(suite string, boot int, names []string, verdict func(string) string) string {
	var b strings.Builder
	b.WriteString("\x1b[2J\x1b[0mSeaBIOS (version 1.16.2)\r\nBooting from ROM...\r\n")
	b.WriteString("[\x1b[0;32m  OK  \x1b[0m] Started rdmad.service.\r\n")
	fmt.Fprintf(&b, "E2E-BEGIN boot=%d suite=%s kernel=%s uptime=20.1\r\n", boot, suite, kernels[suite])
	for _, n := range names {
		switch v := verdict(n); v {
		case "":
		case "FAIL":
			fmt.Fprintf(&b, "E2E %s FAIL 1.50 tos is '0', declared 106\r\n", n)
			fmt.Fprintf(&b, "E2E-LOG %s: tos is '0', declared 106\r\n", n)
		default:
			fmt.Fprintf(&b, "E2E %s %s 0.42 fine detail\r\n", n, v)
		}
	}
	fmt.Fprintf(&b, "E2E-END boot=%d uptime=60.0\r\n[   61.0] reboot: Power down\r\n", boot)
	return b.String()
}

// logs are the consoles of a run: suite -> boot -> text.
type logs map[string]map[int]string

// allPass is a run of both suites in which every scenario passed.
func allPass(t *testing.T) logs {
	l := logs{}
	for _, s := range suites {
		l[s] = map[int]string{}
		for _, boot := range []int{1, 2} {
			l[s][boot] = console(s, boot, scenarios(t, s, boot), func(string) string { return "PASS" })
		}
	}
	return l
}

// runReport writes the consoles as a run leaves them (WORKDIR/SUITE/...)
// and runs `run.sh report WORKDIR [SUITE...]`.
func runReport(t *testing.T, l logs, args ...string) (string, int) {
	t.Helper()
	dir := t.TempDir()
	for suite, boots := range l {
		for boot, text := range boots {
			name := filepath.Join(dir, suite, fmt.Sprintf("serial.boot%d.log", boot))
			if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(name, []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	out, err := exec.Command("bash", append([]string{"../test/e2e/run.sh", "report", dir}, args...)...).CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &exit):
		return string(out), exit.ExitCode()
	}
	t.Fatalf("run.sh report: %v\n%s", err, out)
	return "", -1
}

// row matches a table row; kernel "" matches any kernel column.
func row(suite, kernel string, boot int, name, verdict string) *regexp.Regexp {
	k := `\S+`
	if kernel != "" {
		k = regexp.QuoteMeta(kernel)
	}
	return regexp.MustCompile(fmt.Sprintf(`(?m)^%s\s+%s\s+%d\s+%s\s+%s\s`, suite, k, boot, regexp.QuoteMeta(name), verdict))
}

func TestE2EReportAllPass(t *testing.T) {
	l := allPass(t)
	out, code := runReport(t, l)
	if code != 0 {
		t.Fatalf("exit %d for an all-pass run:\n%s", code, out)
	}
	for _, s := range suites {
		for _, boot := range []int{1, 2} {
			for _, n := range scenarios(t, s, boot) {
				// The kernel column is the guest's own uname -r.
				if !row(s, kernels[s], boot, n, "PASS").MatchString(out) {
					t.Errorf("no PASS row for %s boot %d %s:\n%s", s, boot, n, out)
				}
			}
		}
	}
}

// Each kernel runs the scenarios of the features it has: Soft-iWARP only
// where siw is built (trixie); everything else on both.
func TestE2EScenariosPerKernel(t *testing.T) {
	b, tx := scenarios(t, "bookworm", 1), scenarios(t, "trixie", 1)
	has := func(list []string, name string) bool {
		for _, n := range list {
			if n == name {
				return true
			}
		}
		return false
	}
	for _, n := range b {
		if !has(tx, n) {
			t.Errorf("bookworm scenario %s does not run on trixie", n)
		}
	}
	for _, n := range []string{"siw-link-at-boot", "siw-transport", "siw-roce-na", "siw-hotplug"} {
		if !has(tx, n) || has(b, n) {
			t.Errorf("%s: on trixie %v, on bookworm %v; want trixie only", n, has(tx, n), has(b, n))
		}
	}
	for _, n := range []string{"rdma-monitor", "kernel-events", "rename", "metrics", "netns-busy", "netns-runtime"} {
		if !has(b, n) || !has(tx, n) {
			t.Errorf("%s must run on both kernels", n)
		}
	}
	// The metrics scenario reads the drift of rxe9, which roce-v1-error makes.
	for _, list := range [][]string{b, tx} {
		if slices.Index(list, "metrics") < slices.Index(list, "roce-v1-error") {
			t.Errorf("metrics runs before roce-v1-error: %v", list)
		}
	}
	// The health gate (scenarios/health.sh): verify in boot 1, before PID 1
	// reads rdmad's DefaultLimitMEMLOCK drop-in (a user outside @rdma still
	// has the default limit); doctor's ignored findings after metrics made
	// the textfile; Slurm in the trixie guest, which has slurm-wlm.
	for _, list := range [][]string{b, tx} {
		for _, n := range []string{"doctor-port-states", "verify-member", "verify-nonmember"} {
			if !has(list, n) {
				t.Errorf("%s must run in boot 1 of both kernels: %v", n, list)
			}
		}
		if slices.Index(list, "doctor-port-states") < slices.Index(list, "metrics") || slices.Index(list, "verify-member") > slices.Index(list, "netns-busy") {
			t.Errorf("doctor-port-states must follow metrics, verify precede the netns switch: %v", list)
		}
	}
	// Out-of-band changes (scenarios/drift.sh) on both kernels: inotify on
	// configfs is the kernel's to prove, and so is the contest that follows
	// a fight.
	for _, list := range [][]string{b, tx} {
		for _, n := range []string{"drift-correct", "drift-contested"} {
			if !has(list, n) {
				t.Errorf("%s must run in boot 1 of both kernels: %v", n, list)
			}
		}
	}
	// A capture of the guest replays on both kernels (scenarios/capture.sh).
	for _, list := range [][]string{b, tx} {
		if !has(list, "capture") {
			t.Errorf("capture must run in boot 1 of both kernels: %v", list)
		}
	}
	if !has(scenarios(t, "trixie", 2), "slurm-health") || has(scenarios(t, "bookworm", 2), "slurm-health") {
		t.Error("slurm-health runs in the trixie guest only")
	}

	// Boot 2: the package's lifecycle on both kernels, ending with the purge
	// and a fresh install (nothing of the first install is left to test
	// after them); the playbook only where ansible-core is in the image.
	b2, tx2 := scenarios(t, "bookworm", 2), scenarios(t, "trixie", 2)
	for _, n := range []string{"pkg-upgrade", "pkg-upgrade-prompt", "pkg-purge", "pkg-install"} {
		if !has(b2, n) || !has(tx2, n) {
			t.Errorf("%s must run on both kernels", n)
		}
	}
	for _, list := range [][]string{b2, tx2} {
		if tail := list[len(list)-2:]; tail[0] != "pkg-purge" || tail[1] != "pkg-install" {
			t.Errorf("boot 2 must end with pkg-purge, pkg-install: %v", list)
		}
		if slices.Index(list, "pkg-upgrade") > slices.Index(list, "pkg-upgrade-prompt") {
			t.Errorf("pkg-upgrade-prompt upgrades from the version pkg-upgrade installs: %v", list)
		}
	}
	if !has(b2, "ansible") || has(tx2, "ansible") {
		t.Errorf("ansible: on bookworm %v, on trixie %v; want bookworm only (ansible-core is in its image only)", has(b2, "ansible"), has(tx2, "ansible"))
	}
	image, err := os.ReadFile("../test/e2e/image.sh")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?s)if \[\[ \$suite == bookworm \]\]; then\s+packages\+=\(ansible-core `).Match(image) {
		t.Errorf("test/e2e/image.sh does not add ansible-core to the bookworm image only")
	}
}

// One suite: `make e2e SUITE=trixie` reports that suite only and is not
// failed for the suite it did not run.
func TestE2EReportOneSuite(t *testing.T) {
	l := allPass(t)
	delete(l, "bookworm")
	out, code := runReport(t, l, "trixie")
	if code != 0 {
		t.Fatalf("exit %d for an all-pass trixie run:\n%s", code, out)
	}
	if strings.Contains(out, "bookworm") {
		t.Errorf("bookworm rows in a trixie-only report:\n%s", out)
	}
	// The suite asked for but not run is a failure.
	out, code = runReport(t, l, "bookworm", "trixie")
	if code == 0 || !row("bookworm", "-", 1, "boot", "MISSING").MatchString(out) {
		t.Errorf("exit %d; a suite without consoles must fail with MISSING rows:\n%s", code, out)
	}
}

// E2E-INFO lines (the kernel events each change caused) are shown per suite.
func TestE2EReportShowsObservations(t *testing.T) {
	l := allPass(t)
	l["trixie"][1] = strings.Replace(l["trixie"][1], "E2E-END", "E2E-INFO kernel-events rdma link add | uevent: add (infiniband) infiniband/rxe7 | monitor: [REGISTER] dev 3 rxe7\r\nE2E-END", 1)
	out, code := runReport(t, l)
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	if !regexp.MustCompile(`(?s)trixie boot 1 observations:\n  kernel-events rdma link add \| uevent: add`).MatchString(out) {
		t.Errorf("observation not shown:\n%s", out)
	}
}

func TestE2EReportFailures(t *testing.T) {
	b1 := scenarios(t, "bookworm", 1)
	t1 := scenarios(t, "trixie", 1)
	failing, missing := t1[len(t1)-1], b1[1]
	cases := []struct {
		name   string
		change func(l logs)
		want   *regexp.Regexp
	}{
		{"one scenario fails on one kernel", func(l logs) {
			l["trixie"][1] = console("trixie", 1, t1, func(n string) string {
				if n == failing {
					return "FAIL"
				}
				return "PASS"
			})
		}, row("trixie", "", 1, failing, "FAIL")},
		{"one scenario never reports", func(l logs) {
			l["bookworm"][1] = console("bookworm", 1, b1, func(n string) string {
				if n == missing {
					return ""
				}
				return "PASS"
			})
		}, row("bookworm", "", 1, missing, "MISSING")},
		{"second boot never happened", func(l logs) { delete(l["trixie"], 2) },
			row("trixie", "-", 2, "reboot-boot", "MISSING")},
		{"guest never booted", func(l logs) {
			l["bookworm"] = map[int]string{1: "SeaBIOS\r\nKernel panic - not syncing\r\n"}
		}, regexp.MustCompile(`bookworm boot 1 never reached the scenarios`)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := allPass(t)
			c.change(l)
			out, code := runReport(t, l)
			if code == 0 {
				t.Errorf("exit 0, want failure:\n%s", out)
			}
			if !c.want.MatchString(out) {
				t.Errorf("output lacks %v:\n%s", c.want, out)
			}
			if !strings.Contains(out, "e2e: FAILED") {
				t.Errorf("no loud FAILED line:\n%s", out)
			}
		})
	}
}

// The policy-window scenario's measurements (how long after a
// device's arrival the policy is in force) come back as one table row per
// suite, with the first device of the boot and the hot-adds' percentiles.
func TestE2EReportShowsPolicyWindow(t *testing.T) {
	if !slices.Contains(scenarios(t, "bookworm", 1), "policy-window") || !slices.Contains(scenarios(t, "trixie", 1), "policy-window") {
		t.Fatal("policy-window is not a boot 1 scenario of both suites")
	}
	l := allPass(t)
	line := func(kernel, first, p95 string) string {
		return "E2E-INFO policy-window kernel=" + kernel + " first=" + first + " rdma_cm_at_first=no preload=1.234s n=20 p50=0.081 p95=" + p95 + " max=0.190 samples=0.081,0.075\r\nE2E-END"
	}
	l["bookworm"][1] = strings.Replace(l["bookworm"][1], "E2E-END", line(kernels["bookworm"], "0.212", "0.140"), 1)
	l["trixie"][1] = strings.Replace(l["trixie"][1], "E2E-END", line(kernels["trixie"], "0.455", "0.290"), 1)
	out, code := runReport(t, l)
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	for _, want := range []string{
		`(?m)^suite\s+kernel\s+boot\s+first\s+rdma_cm\s+preload\s+n\s+p50\s+p95\s+max$`,
		`(?m)^bookworm\s+` + regexp.QuoteMeta(kernels["bookworm"]) + `\s+1\s+0\.212\s+no\s+1\.234s\s+20\s+0\.081\s+0\.140\s+0\.190$`,
		`(?m)^trixie\s+` + regexp.QuoteMeta(kernels["trixie"]) + `\s+1\s+0\.455\s+no\s+1\.234s\s+20\s+0\.081\s+0\.290\s+0\.190$`,
	} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("report lacks %s:\n%s", want, out)
		}
	}
}
