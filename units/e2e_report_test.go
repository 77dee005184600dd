package units

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The e2e host side decides pass/fail from the guest's serial console. These
// tests feed `test/e2e/run.sh report DIR` consoles as qemu writes them (CRLF,
// colour codes, systemd status lines) and check its verdict.

func scenarios(t *testing.T, boot int) []string {
	t.Helper()
	out, err := exec.Command("bash", "../test/e2e/guest/rdmad-e2e.sh", "list", fmt.Sprint(boot)).Output()
	if err != nil {
		t.Fatalf("rdmad-e2e.sh list %d: %v", boot, err)
	}
	names := strings.Fields(string(out))
	if len(names) == 0 {
		t.Fatalf("boot %d has no scenarios", boot)
	}
	return names
}

// console renders a serial log in which every scenario reports verdict(name).
func console(boot int, names []string, verdict func(string) string) string {
	var b strings.Builder
	b.WriteString("\x1b[2J\x1b[0mSeaBIOS (version 1.16.2)\r\nBooting from ROM...\r\n")
	b.WriteString("[\x1b[0;32m  OK  \x1b[0m] Started rdmad.service.\r\n")
	fmt.Fprintf(&b, "E2E-BEGIN boot=%d uptime=20.1\r\n", boot)
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

func runReport(t *testing.T, logs map[int]string) (string, int) {
	t.Helper()
	dir := t.TempDir()
	for boot, text := range logs {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("serial.boot%d.log", boot)), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, err := exec.Command("bash", "../test/e2e/run.sh", "report", dir).CombinedOutput()
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

func row(boot int, name, verdict string) *regexp.Regexp {
	return regexp.MustCompile(fmt.Sprintf(`(?m)^%d\s+%s\s+%s\s`, boot, regexp.QuoteMeta(name), verdict))
}

func TestE2EReportAllPass(t *testing.T) {
	b1, b2 := scenarios(t, 1), scenarios(t, 2)
	pass := func(string) string { return "PASS" }
	out, code := runReport(t, map[int]string{1: console(1, b1, pass), 2: console(2, b2, pass)})
	if code != 0 {
		t.Fatalf("exit %d for an all-pass run:\n%s", code, out)
	}
	for boot, names := range map[int][]string{1: b1, 2: b2} {
		for _, n := range names {
			if !row(boot, n, "PASS").MatchString(out) {
				t.Errorf("no PASS row for boot %d %s:\n%s", boot, n, out)
			}
		}
	}
}

func TestE2EReportFailures(t *testing.T) {
	b1, b2 := scenarios(t, 1), scenarios(t, 2)
	pass := func(string) string { return "PASS" }
	failing, missing := b1[len(b1)-1], b1[1]
	cases := []struct {
		name string
		logs map[int]string
		want *regexp.Regexp
	}{
		{"one scenario fails", map[int]string{
			1: console(1, b1, func(n string) string {
				if n == failing {
					return "FAIL"
				}
				return "PASS"
			}),
			2: console(2, b2, pass)}, row(1, failing, "FAIL")},
		{"one scenario never reports", map[int]string{
			1: console(1, b1, func(n string) string {
				if n == missing {
					return ""
				}
				return "PASS"
			}),
			2: console(2, b2, pass)}, row(1, missing, "MISSING")},
		{"second boot never happened", map[int]string{1: console(1, b1, pass)}, row(2, b2[0], "MISSING")},
		{"guest never booted", map[int]string{1: "SeaBIOS\r\nKernel panic - not syncing\r\n"},
			regexp.MustCompile(`boot 1 never reached the scenarios`)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, code := runReport(t, c.logs)
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
