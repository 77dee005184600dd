package doctor_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/doctor"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/dbusapi"
)

// policyOf loads the configuration of a host tree (none: defaults).
func policyOf(t *testing.T, root string) *config.Policy {
	t.Helper()
	p, err := config.Load(host.Files{}, filepath.Join(root, config.MainFile))
	if err != nil {
		t.Fatalf("load policy of %s: %v", root, err)
	}
	return p
}

// parsePolicy is a policy from TOML text.
func parsePolicy(t *testing.T, text string) *config.Policy {
	t.Helper()
	p, err := config.Parse("/etc/rdma/rdmad.toml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// diagnose runs doctor on root with its own configuration unless edit
// changes the input.
func diagnose(t *testing.T, root string, edit ...func(*doctor.Input)) []dbusapi.Finding {
	t.Helper()
	in := doctor.Input{Host: host.New(root), Policy: policyOf(t, root)}
	for _, e := range edit {
		e(&in)
	}
	return doctor.Diagnose(context.Background(), in)
}

func withPolicy(p *config.Policy) func(*doctor.Input) {
	return func(in *doctor.Input) { in.Policy = p }
}

// problems lists the findings that are not ok as "severity id subject".
func problems(fs []dbusapi.Finding) []string {
	out := []string{}
	for _, f := range fs {
		if f.Severity != dbusapi.SeverityOK {
			out = append(out, fmt.Sprintf("%s %s %s", f.Severity, f.ID, f.Subject))
		}
	}
	sort.Strings(out)
	return out
}

// find returns the finding with id about subject ("host", "rxe0/1"...).
func find(fs []dbusapi.Finding, id, subject string) *dbusapi.Finding {
	for i := range fs {
		if fs[i].ID == id && fs[i].Subject.String() == subject {
			return &fs[i]
		}
	}
	return nil
}

// must returns the finding or fails the test, showing what there is.
func must(t *testing.T, fs []dbusapi.Finding, id, subject string) dbusapi.Finding {
	t.Helper()
	f := find(fs, id, subject)
	if f == nil {
		t.Fatalf("no finding %s about %s in:\n%s", id, subject, dump(fs))
	}
	return *f
}

// mustFix checks severity and that finding and fix say the given things.
func mustFix(t *testing.T, fs []dbusapi.Finding, id, subject string, sev dbusapi.Severity, inFinding, inFix string) dbusapi.Finding {
	t.Helper()
	f := must(t, fs, id, subject)
	if f.Severity != sev || !strings.Contains(f.Finding, inFinding) || !strings.Contains(f.Fix, inFix) {
		t.Errorf("%s %s: got %s %q fix %q; want %s, finding with %q, fix with %q", id, subject, f.Severity, f.Finding, f.Fix, sev, inFinding, inFix)
	}
	return f
}

// clean fails when the host has any finding that is not ok.
func clean(t *testing.T, fs []dbusapi.Finding) {
	t.Helper()
	if p := problems(fs); len(p) > 0 {
		t.Errorf("unexpected problems %v in:\n%s", p, dump(fs))
	}
}

func dump(fs []dbusapi.Finding) string {
	var b strings.Builder
	for _, f := range fs {
		fmt.Fprintf(&b, "  %-4s %-24s %-10s %s | %s\n", f.Severity, f.ID, f.Subject, f.Finding, f.Fix)
	}
	return b.String()
}

// readyIB copies the healthy InfiniBand host and makes its initramfs newer
// than its modprobe.d option, as after update-initramfs (git keeps no file
// times).
func readyIB(t *testing.T) string {
	t.Helper()
	root := hosttest.Copy(t, "ib-ready")
	touch(t, root, "etc/modprobe.d/rdmad-netns.conf", time.Now().Add(-time.Hour))
	touch(t, root, "boot/initrd.img-6.1.0-28-amd64", time.Now())
	return root
}

func touch(t *testing.T, root, rel string, when time.Time) {
	t.Helper()
	if err := os.Chtimes(filepath.Join(root, rel), when, when); err != nil {
		t.Fatal(err)
	}
}

func remove(t *testing.T, root, rel string) {
	t.Helper()
	if err := os.RemoveAll(filepath.Join(root, rel)); err != nil {
		t.Fatal(err)
	}
}

// setPort writes sysfs attributes of a fixture port.
func setPort(t *testing.T, root, dev string, port int, attrs map[string]string) {
	t.Helper()
	for k, v := range attrs {
		hosttest.Write(t, root, fmt.Sprintf("sys/class/infiniband/%s/ports/%d/%s", dev, port, k), v+"\n")
	}
}

// symlink makes rel under root a link to target, creating parents.
func symlink(target, root, rel string) error {
	p := filepath.Join(root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return os.Symlink(target, p)
}
