package cli_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/godbus/dbus/v5"

	"github.com/rdmad/rdmad/cmd/rdmactl/internal/cli"
	"github.com/rdmad/rdmad/daemon/bus"
	"github.com/rdmad/rdmad/daemon/compose"
	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/doctor"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/dbusapi"
	"github.com/rdmad/rdmad/test/bustest"
)

// manager serves org.rdmad1.Manager.Diagnose on a private bus the way the
// daemon does: doctor.Diagnose on a fixture host, encoded by dbusapi.
// (The daemon's own server is tested against the contract elsewhere.)
type manager struct{ doc string }

func (m *manager) Diagnose() (string, *dbus.Error) { return m.doc, nil }

type oldManager struct{}

func (oldManager) Describe() (string, *dbus.Error) { return "{}", nil }

// serve owns org.rdmad1 on a new private bus with obj at /org/rdmad1.
func serve(t *testing.T, obj any) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "rdmactl-doctor-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	addr := bustest.Start(t)
	conn, err := dbus.Connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if err := conn.Export(obj, dbusapi.RootPath, dbusapi.ManagerIface); err != nil {
		t.Fatal(err)
	}
	if reply, err := conn.RequestName(dbusapi.BusName, dbus.NameFlagDoNotQueue); err != nil || reply != dbus.RequestNameReplyPrimaryOwner {
		t.Fatalf("own %s: %v %v", dbusapi.BusName, reply, err)
	}
	return addr
}

func findingsOf(t *testing.T, fixture string) string {
	t.Helper()
	root := hosttest.Copy(t, fixture)
	pol, err := config.Load(host.Files{}, filepath.Join(root, config.MainFile))
	if err != nil {
		t.Fatal(err)
	}
	in := compose.HostInput(context.Background(), host.New(root), pol, compose.Kernel{Modules: &hosttest.Modprobe{}, Netns: netnsFromSysfs{}})
	doc, err := dbusapi.EncodeFindings(bus.Findings(doctor.Diagnose(context.Background(), in)))
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

// netnsFromSysfs is RDMA netlink that tells nothing: the netns part reads
// the running mode from sysfs.
type netnsFromSysfs struct{}

func (netnsFromSysfs) Mode() (config.NetnsMode, error) { return "", errors.New("no RDMA netlink") }
func (netnsFromSysfs) SetMode(config.NetnsMode) error  { return errors.New("no RDMA netlink") }

func rdmactl(addr string, args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = cli.Main(append([]string{"--bus", addr}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

func TestDoctorHealthyHost(t *testing.T) {
	addr := serve(t, &manager{doc: findingsOf(t, "rxe-ready")})
	code, out, errs := rdmactl(addr, "doctor")
	if code != cli.ExitOK || errs != "" {
		t.Fatalf("exit %d, stderr %q\n%s", code, errs, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if f := strings.Fields(lines[0]); strings.Join(f, " ") != "SEVERITY SUBJECT FINDING" {
		t.Errorf("header = %q", lines[0])
	}
	if !strings.Contains(out, "ok        rxe0/1     rxe0/1: ACTIVE, LinkUp") {
		t.Errorf("port row missing or misaligned:\n%s", out)
	}
	if last := lines[len(lines)-1]; last != "12 ok, 0 warn, 0 fail" {
		t.Errorf("summary = %q\n%s", last, out)
	}
}

func TestDoctorFailingHostExitsOne(t *testing.T) {
	doc := findingsOf(t, "sparse")
	addr := serve(t, &manager{doc: doc})
	code, out, errs := rdmactl(addr, "doctor")
	if code != cli.ExitFailure {
		t.Fatalf("exit %d, want 1", code)
	}
	if !strings.Contains(errs, "doctor: 2 of ") || !strings.Contains(errs, "findings fail") {
		t.Errorf("stderr = %q", errs)
	}
	for _, want := range []string{
		"warn      bnxt_re0/1  bnxt_re0/1 is not ACTIVE: state DOWN, physical state unknown\n" +
			"                      fix: rdma link show bnxt_re0/1; journalctl -k -g bnxt_re0\n",
		"warn      host        RDMA users get memlock 8 MiB at login",
		"ok        host        NFS over RDMA is not enabled on this host ([nfsd] rdma in /etc/nfs.conf)\nok ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}

	// -o json prints the document exactly as Diagnose returned it, and the
	// exit status still says whether something fails.
	code, out, _ = rdmactl(addr, "-o", "json", "doctor")
	if code != cli.ExitFailure || out != doc+"\n" {
		t.Errorf("-o json: exit %d, output differs from the document:\n%s", code, out)
	}
}

func TestDoctorWarningsAloneExitZero(t *testing.T) {
	doc, err := dbusapi.EncodeFindings([]dbusapi.Finding{
		{ID: "roce-modes-mixed", Subject: dbusapi.Subject{Kind: "host"}, Severity: dbusapi.SeverityWarn, Finding: "mixed", Fix: "x"},
	})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, &manager{doc: doc})
	if code, out, errs := rdmactl(addr, "doctor"); code != cli.ExitOK || !strings.Contains(out, "0 ok, 1 warn, 0 fail") {
		t.Errorf("exit %d %q\n%s", code, errs, out)
	}
}

// An ignored finding is listed with what it was and the entry that
// ignores it, counted apart, and fails nothing.
func TestDoctorIgnoredFindings(t *testing.T) {
	doc, err := dbusapi.EncodeFindings([]dbusapi.Finding{
		{ID: "port-no-sm", Subject: dbusapi.Subject{Kind: "port", Device: "mlx4_0", Port: 1}, Severity: dbusapi.SeverityIgnored,
			Finding: "mlx4_0/1: link up but no subnet manager", Fix: "systemctl enable --now opensm", Scope: dbusapi.ScopeHost,
			IgnoredSeverity: dbusapi.SeverityFail, IgnoredBy: "/etc/rdma/rdmad.d/50-site.toml:2"},
		{ID: "config-loaded", Subject: dbusapi.Subject{Kind: "host"}, Severity: dbusapi.SeverityOK, Finding: "configuration in force", Scope: dbusapi.ScopePolicy},
	})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, &manager{doc: doc})
	code, out, errs := rdmactl(addr, "doctor")
	if code != cli.ExitOK || errs != "" {
		t.Fatalf("exit %d, %q\n%s", code, errs, out)
	}
	for _, want := range []string{
		"ignored   mlx4_0/1  mlx4_0/1: link up but no subnet manager\n" +
			"                    fail, ignored by /etc/rdma/rdmad.d/50-site.toml:2\n" +
			"                    fix: systemctl enable --now opensm\n",
		"\n1 ok, 0 warn, 0 fail, 1 ignored\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if code, _, _ := rdmactl(addr, "doctor", "--quiet"); code != cli.ExitOK {
		t.Errorf("--quiet: exit %d", code)
	}
}

// --scope policy keeps the findings about the configuration and its
// declared settings: a pod that sees no /dev/infiniband passes when the
// policy is in force, and fails when a declared setting does not hold.
func TestDoctorScopePolicy(t *testing.T) {
	fs := []dbusapi.Finding{
		{ID: "config-loaded", Subject: dbusapi.Subject{Kind: "host"}, Severity: dbusapi.SeverityOK, Finding: "configuration in force", Scope: dbusapi.ScopePolicy},
		{ID: "rdma-cm-device-missing", Subject: dbusapi.Subject{Kind: "host"}, Severity: dbusapi.SeverityFail, Finding: "/dev/infiniband/rdma_cm is missing", Fix: "udevadm trigger", Scope: dbusapi.ScopeHost},
	}
	doc, _ := dbusapi.EncodeFindings(fs)
	addr := serve(t, &manager{doc: doc})
	if code, out, errs := rdmactl(addr, "doctor", "--quiet", "--scope", "policy"); code != cli.ExitOK || out != "" {
		t.Errorf("policy in force: exit %d %q %q", code, out, errs)
	}
	code, out, _ := rdmactl(addr, "-j", "doctor", "--scope", "policy")
	if code != cli.ExitOK || strings.Contains(out, "rdma-cm-device-missing") || !strings.Contains(out, `"id":"config-loaded"`) {
		t.Errorf("-j --scope policy: exit %d\n%s", code, out)
	}
	if code, _, _ := rdmactl(addr, "doctor", "--quiet"); code != cli.ExitFailure {
		t.Errorf("without --scope the host's failure counts: exit %d", code)
	}
	fs = append(fs, dbusapi.Finding{ID: "roce-tos-differs", Subject: dbusapi.Subject{Kind: "port", Device: "mlx5_0", Port: 1}, Severity: dbusapi.SeverityFail, Finding: "TOS is 0, declared 106", Scope: dbusapi.ScopePolicy})
	doc, _ = dbusapi.EncodeFindings(fs)
	addr = serve(t, &manager{doc: doc})
	if code, _, _ := rdmactl(addr, "doctor", "--quiet", "--scope", "policy"); code != cli.ExitFailure {
		t.Errorf("a declared setting that does not hold: exit %d", code)
	}
	// An rdmad that tells no scope is not taken as passing.
	for i := range fs {
		fs[i].Scope = ""
	}
	doc, _ = dbusapi.EncodeFindings(fs[:1])
	addr = serve(t, &manager{doc: doc})
	if code, _, errs := rdmactl(addr, "doctor", "--scope", "policy"); code != cli.ExitFailure || !strings.Contains(errs, "does not tell the scope") {
		t.Errorf("older rdmad: exit %d %q", code, errs)
	}
	if code, _, errs := rdmactl(addr, "doctor", "--scope", "ports"); code != cli.ExitUsage || !strings.Contains(errs, `the only scope is "policy"`) {
		t.Errorf("--scope ports: exit %d %q", code, errs)
	}
}

func TestDoctorAgainstAnOlderOrBrokenDaemon(t *testing.T) {
	addr := serve(t, oldManager{})
	code, _, errs := rdmactl(addr, "doctor")
	if code != cli.ExitFailure || !strings.Contains(errs, "has no Diagnose method") {
		t.Errorf("older rdmad: exit %d, %q", code, errs)
	}
	addr = serve(t, &manager{doc: `{"not": "findings"}`})
	code, _, errs = rdmactl(addr, "doctor")
	if code != cli.ExitFailure || !strings.Contains(errs, "rdmad's Diagnose answer is not a document this rdmactl reads") {
		t.Errorf("garbage: exit %d, %q", code, errs)
	}
	if code, _, errs := rdmactl(addr, "doctor", "extra"); code != cli.ExitUsage {
		t.Errorf("doctor extra: exit %d, %q", code, errs)
	}
}

// doctor --lines: one line per finding, five tab-separated fields, even
// when a host's text carries tabs and newlines; exit 1 with the failing
// line on standard output when a finding fails, nothing on standard
// output when rdmad does not answer.
func TestDoctorLinesForScripts(t *testing.T) {
	findings := []dbusapi.Finding{
		{ID: "port-active", Subject: dbusapi.Subject{Kind: "port", Device: "mlx5_0", Port: 1}, Severity: dbusapi.SeverityOK, Finding: "ACTIVE"},
		{ID: "link-missing", Subject: dbusapi.Subject{Kind: "link", Link: "rxe\t0"}, Severity: dbusapi.SeverityFail,
			Finding: "rxe0 is\nmissing\tnow", Fix: "rdmactl link add"},
	}
	doc, err := dbusapi.EncodeFindings(findings)
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, &manager{doc: doc})
	code, out, _ := rdmactl(addr, "doctor", "--lines")
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if code != 1 || len(lines) != 2 {
		t.Fatalf("exit %d, %d lines:\n%s", code, len(lines), out)
	}
	for _, l := range lines {
		if n := len(strings.Split(l, "\t")); n != 5 {
			t.Errorf("%d fields in %q", n, l)
		}
	}
	if lines[1] != `fail	link-missing	link rxe\x090	rxe0 is\x0amissing\x09now	rdmactl link add` {
		t.Errorf("the failing line: %q", lines[1])
	}
	code, out, errs := rdmactl("unix:path=/nonexistent/bus", "doctor", "--lines")
	if code != 1 || out != "" || errs == "" {
		t.Errorf("no rdmad: exit %d, stdout %q, stderr %q", code, out, errs)
	}
}
