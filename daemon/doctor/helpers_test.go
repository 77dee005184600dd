package doctor_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/rdmad/rdmad/daemon/compose"
	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/dcb"
	"github.com/rdmad/rdmad/daemon/dcb/dcbtest"
	"github.com/rdmad/rdmad/daemon/doctor"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/daemon/netns"
	"github.com/rdmad/rdmad/daemon/reconcile"
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

// dcbKernel gives the host's netdevs a DCB kernel (the qos part's).
type dcbKernel struct{ k dcb.Kernel }

func withDCB(k *dcbtest.Fake) dcbKernel { return dcbKernel{k.Kernel()} }

// withNetns gives the netns part its kernel (the running RDMA netns mode
// over netlink); without it the part knows the mode from sysfs only.
type withNetns struct{ k netns.Kernel }

// noNetlink is RDMA netlink that tells nothing.
type noNetlink struct{}

func (noNetlink) Mode() (config.NetnsMode, error) { return "", errors.New("no RDMA netlink here") }
func (noNetlink) SetMode(config.NetnsMode) error  { return errors.New("no RDMA netlink here") }

// bare leaves doctor without a state: it reads the host's devices itself
// and judges no setting.
type bare struct{}

// afterPass judges the state a running rdmad has after its pass through
// the kernel-like fixture k, which may refuse writes (k.Refuse): what the
// daemon hands doctor, failures and all.
type afterPass struct{ k *hosttest.Kernel }

// beforePass runs on afterPass's reconciler before its pass: a hold, as
// HoldCorrections makes over the bus.
type beforePass func(*reconcile.Reconciler)

// diagnose runs doctor on root with its own configuration unless an
// option (a func(*doctor.Input), or withDCB) changes the input. Unless an
// option gives one, the state doctor judges is what rdmad's parts see of
// the host as it is (reconcile.Observe: nothing written), with their
// checks, as a running rdmad hands it over.
func diagnose(t *testing.T, root string, opts ...any) []doctor.Finding {
	t.Helper()
	in := doctor.Input{Host: host.New(root), Policy: policyOf(t, root)}
	var k dcb.Kernel
	var nk netns.Kernel = noNetlink{}
	var pass *hosttest.Kernel
	var before beforePass
	noState := false
	for _, o := range opts {
		switch o := o.(type) {
		case func(*doctor.Input):
			o(&in)
		case dcbKernel:
			k = o.k
		case bare:
			noState = true
		case withNetns:
			nk = o.k
		case afterPass:
			pass = o.k
		case beforePass:
			before = o
		default:
			t.Fatalf("diagnose: option %T", o)
		}
	}
	switch {
	case pass != nil:
		in.State, in.Checks = passed(pass, in.Policy, k, nk, before)
	case before != nil:
		t.Fatal("diagnose: beforePass without afterPass")
	case in.State == nil && in.Devices == nil && !noState:
		in.State, in.Checks = observe(in.Host, in.Policy, k, nk)
	}
	return doctor.Diagnose(context.Background(), in)
}

// passed is the state after a pass of rdmad's parts through the
// kernel-like fixture k, and their checks; before, if any, runs on the
// reconciler first.
func passed(k *hosttest.Kernel, pol *config.Policy, d dcb.Kernel, nk netns.Kernel, before beforePass) (*reconcile.State, []reconcile.Checker) {
	h := k.Host()
	p := compose.Parts(compose.Kernel{Modules: &hosttest.Modprobe{Root: h.Root}, DCB: d, Netns: nk})(h, true, func() {})
	r := reconcile.New(reconcile.Options{Host: h, Log: slog.New(slog.DiscardHandler), Early: p.Early, HostParts: p.Host, DeviceParts: p.Device, Detail: host.DetailFull})
	if before != nil {
		before(r)
	}
	r.Pass(context.Background(), pol, reconcile.Scope{Full: true})
	st := r.Snapshot()
	return &st, r.Checkers()
}

// observe is what the parts of a running rdmad record of the host, read
// only, and their checks.
func observe(h *host.Host, pol *config.Policy, k dcb.Kernel, nk netns.Kernel) (*reconcile.State, []reconcile.Checker) {
	in := compose.HostInput(context.Background(), h, pol, compose.Kernel{Modules: &hosttest.Modprobe{}, DCB: k, Netns: nk})
	return in.State, in.Checks
}

func withPolicy(p *config.Policy) func(*doctor.Input) {
	return func(in *doctor.Input) { in.Policy = p }
}

// problems lists the findings that are not ok as "severity id subject".
func problems(fs []doctor.Finding) []string {
	out := []string{}
	for _, f := range fs {
		if f.Severity != doctor.SeverityOK {
			out = append(out, fmt.Sprintf("%s %s %s", f.Severity, f.ID, f.Subject))
		}
	}
	sort.Strings(out)
	return out
}

// find returns the finding with id about subject ("host", "rxe0/1"...).
func find(fs []doctor.Finding, id, subject string) *doctor.Finding {
	for i := range fs {
		if fs[i].ID == id && fs[i].Subject.String() == subject {
			return &fs[i]
		}
	}
	return nil
}

// must returns the finding or fails the test, showing what there is.
func must(t *testing.T, fs []doctor.Finding, id, subject string) doctor.Finding {
	t.Helper()
	f := find(fs, id, subject)
	if f == nil {
		t.Fatalf("no finding %s about %s in:\n%s", id, subject, dump(fs))
	}
	return *f
}

// mustFix checks severity and that finding and fix say the given things.
func mustFix(t *testing.T, fs []doctor.Finding, id, subject string, sev doctor.Severity, inFinding, inFix string) doctor.Finding {
	t.Helper()
	f := must(t, fs, id, subject)
	if f.Severity != sev || !strings.Contains(f.Finding, inFinding) || !strings.Contains(f.Fix, inFix) {
		t.Errorf("%s %s: got %s %q fix %q; want %s, finding with %q, fix with %q", id, subject, f.Severity, f.Finding, f.Fix, sev, inFinding, inFix)
	}
	return f
}

// clean fails when the host has any finding that is not ok.
func clean(t *testing.T, fs []doctor.Finding) {
	t.Helper()
	if p := problems(fs); len(p) > 0 {
		t.Errorf("unexpected problems %v in:\n%s", p, dump(fs))
	}
}

func dump(fs []doctor.Finding) string {
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
	hosttest.Touch(t, root, rel, when)
}

func remove(t *testing.T, root, rel string) {
	t.Helper()
	hosttest.Remove(t, root, rel)
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
