package doctor_test

import (
	"testing"
	"time"

	"github.com/rdmad/rdmad/daemon/doctor"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/daemon/reconcile"
)

// A hold on settings of a port (HoldCorrections, as rdmactl qualify makes
// over the bus) is a warning corrections-held on that port, naming the
// held settings and the holder; a held declared setting that differs is
// said there, with its value, declaration and source, and is not a
// failing SETTING-differs of its own. A hold under which everything holds
// says only the hold.
func TestCorrectionsHeld(t *testing.T) {
	root := hosttest.Copy(t, "mlx5")
	k := hosttest.NewKernel(root)
	// Both ports are at RoCE v2, TOS 0: the declared TOS differs on both.
	pol := parsePolicy(t, "[[roce]]\ndevice = \"*\"\nmode = \"v2\"\ntos = 106\n")
	since := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	hold := beforePass(func(r *reconcile.Reconciler) {
		for _, h := range []struct {
			port     reconcile.Subject
			settings []string
			holder   string
		}{
			{reconcile.PortSubject("mlx5_0", 1), []string{"roce_mode", "roce_tos"}, "the bus name :1.42 (uid 0), pid 4242"},
			{reconcile.PortSubject("mlx5_1", 1), []string{"roce_mode"}, "the bus name :1.43 (uid 0), pid 4343"},
		} {
			var settings []*reconcile.Setting
			for _, n := range h.settings {
				s, ok := r.PortSetting(n)
				if !ok {
					t.Fatalf("no port setting %s", n)
				}
				settings = append(settings, s)
			}
			if err := r.HoldCorrections(reconcile.Hold{Subject: h.port, Settings: settings, Holder: h.holder, Since: since}); err != nil {
				t.Fatal(err)
			}
		}
	})
	fs := diagnose(t, root, withPolicy(pol), afterPass{k}, hold)
	const fix = "wait for the holder to finish (rdmactl qualify puts every value back and releases its hold); the hold ends when the holder leaves the bus, and rdmad then reads the port again"
	for _, want := range []doctor.Finding{
		{ID: "corrections-held", Subject: reconcile.PortSubject("mlx5_0", 1), Severity: doctor.SeverityWarn,
			Finding: "mlx5_0/1: rdmad does not correct roce_mode, roce_tos: held by the bus name :1.42 (uid 0), pid 4242 since 2026-11-29 10:00:00 (RoCE TOS is 0, declared 106 at /etc/rdma/rdmad.toml:1)",
			Fix:     fix},
		// The held mode holds: nothing to say of it but the hold.
		{ID: "corrections-held", Subject: reconcile.PortSubject("mlx5_1", 1), Severity: doctor.SeverityWarn,
			Finding: "mlx5_1/1: rdmad does not correct roce_mode: held by the bus name :1.43 (uid 0), pid 4343 since 2026-11-29 10:00:00",
			Fix:     fix},
	} {
		f := must(t, fs, want.ID, want.Subject.String())
		if f.Subject != want.Subject || f.Severity != want.Severity || f.Finding != want.Finding || f.Fix != want.Fix {
			t.Errorf("%s %s:\n got %s %q\n fix %q\nwant %s %q\n fix %q", want.ID, want.Subject, f.Severity, f.Finding, f.Fix, want.Severity, want.Finding, want.Fix)
		}
	}
	// The held TOS is the hold's finding; mlx5_1's TOS, not held, is
	// corrected by the pass.
	if f := find(fs, "roce-tos-differs", "mlx5_0/1"); f != nil {
		t.Errorf("a held setting is also a failing finding: %+v", f)
	}
	if got := hosttest.Read(t, root, "sys/kernel/config/rdma_cm/mlx5_0/ports/1/default_roce_tos"); got != "0" {
		t.Errorf("the held TOS was written: %q", got)
	}
	mustFix(t, fs, "policy-applied", "mlx5_1/1", doctor.SeverityOK, "RoCE TOS 106", "")
}
