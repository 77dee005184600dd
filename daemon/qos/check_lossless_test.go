package qos_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/dcb"
	"github.com/rdmad/rdmad/daemon/dcb/dcbtest"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/reconcile"
	"github.com/rdmad/rdmad/daemon/roce"
)

// lossless is the roce-lossless note of mlx5_0/1 after a pass of the RoCE
// and QoS parts under pol.
func (e *lossEnv) lossless(t *testing.T, pol *config.Policy) reconcile.Note {
	t.Helper()
	h := e.kern.Host()
	r := reconcile.New(reconcile.Options{Host: h, Log: slog.New(slog.DiscardHandler), Detail: host.DetailFull,
		DeviceParts: []reconcile.DevicePart{&roce.Part{Host: h}, e.part}})
	r.Pass(context.Background(), pol, reconcile.Scope{Full: true})
	st := r.Snapshot()
	for _, n := range e.part.Check(context.Background(), &reconcile.CheckInput{Host: h, Policy: pol, State: &st}) {
		if n.ID == "roce-lossless" && n.Subject.String() == "mlx5_0/1" {
			return n
		}
	}
	t.Fatal("no roce-lossless note for mlx5_0/1")
	return reconcile.Note{}
}

// TestLosslessChain: TOS -> DSCP -> priority -> PFC on, and past it
// global pause off, ECN on every PFC priority, and the headroom declared.
func TestLosslessChain(t *testing.T) {
	e := newLossEnv(t, "mlx5-ofed")
	base := "[[roce]]\ndevice = \"mlx5_0\"\ntos = 106\n[[qos]]\ndevice = \"mlx5_0\"\ntrust = \"dscp\"\npfc = [3]\n"

	// PFC on 3, but pause on, ECN on for every priority (3 included) and
	// no headroom declared.
	n := e.lossless(t, policy(t, base))
	if n.Severity != reconcile.SeverityWarn || !strings.Contains(n.Finding, "global pause is on on ens1f0np0") ||
		!strings.Contains(n.Finding, "no cable_length or buffer_size declared") || strings.Contains(n.Finding, "ECN is off") {
		t.Errorf("pause on, no headroom: %+v", n)
	}
	if !strings.Contains(n.Fix, "pause = false") || !strings.Contains(n.Fix, "cable_length = <metres>") {
		t.Errorf("fix: %s", n.Fix)
	}
	// ECN off for the PFC priority.
	n = e.lossless(t, policy(t, base+"pause = false\necn = [5]\ncable_length = 10\nbuffer_size = [\"128K\",\"128K\",0,0,0,0,0,0]\n"))
	if n.Severity != reconcile.SeverityWarn || !strings.Contains(n.Finding, "ECN is off for PFC priorities [3]") || !strings.Contains(n.Fix, "ecn = [3, 5]") {
		t.Errorf("ECN off for 3: %+v", n)
	}
	// A cable length with the firmware owning the buffers does nothing.
	n = e.lossless(t, policy(t, base+"pause = false\necn = [3]\ncable_length = 10\n"))
	if n.Severity != reconcile.SeverityWarn || !strings.Contains(n.Finding, "no effect while the firmware owns the port buffers") {
		t.Errorf("cable length alone: %+v", n)
	}
	// The whole chain.
	n = e.lossless(t, policy(t, base+"pause = false\necn = [3]\ncable_length = 10\nbuffer_size = [\"128K\",\"128K\",0,0,0,0,0,0]\n"))
	if n.Severity != reconcile.SeverityOK || !strings.Contains(n.Finding, "PFC on for 3: lossless (pause off, ECN on, headroom declared)") {
		t.Errorf("whole chain: %+v", n)
	}

	// Upstream: ECN is the firmware's, said in an ok finding.
	u := newLossEnv(t, "mlx5")
	n = u.lossless(t, policy(t, base+"pause = false\ncable_length = 10\nprio_buffer = [0,0,0,1,0,0,0,0]\nbuffer_size = [\"128K\",\"128K\",0,0,0,0,0,0]\n"))
	if n.Severity != reconcile.SeverityOK || !strings.Contains(n.Finding, "ECN per priority is the firmware's") {
		t.Errorf("upstream: %+v", n)
	}
	// A driver without a cable length (no configurable buffers): nothing
	// to declare for the headroom.
	u.dcb.Update("ens1f0np0", func(n *dcbtest.Netdev) { n.PFC.Delay = 0; n.Buffer = nil })
	n = u.lossless(t, policy(t, base+"pause = false\n"))
	if n.Severity != reconcile.SeverityOK || strings.Contains(n.Finding, "headroom") {
		t.Errorf("no configurable buffers: %+v", n)
	}
}

// TestOwnerFixNamesBothSwitches: the qos-owner fix gives the run-time
// switch (host ieee), dcbx = "host" and the persistent firmware one.
func TestOwnerFixNamesBothSwitches(t *testing.T) {
	e := newLossEnv(t, "mlx5")
	e.dcb.Update("ens1f0np0", func(n *dcbtest.Netdev) { n.DCBX = dcb.CapLLDManaged | dcb.CapVerIEEE })
	pol := policy(t, "[[qos]]\ndevice = \"mlx5_0\"\npfc = [3]\n")
	h := e.kern.Host()
	r := reconcile.New(reconcile.Options{Host: h, Log: slog.New(slog.DiscardHandler), Detail: host.DetailFull, DeviceParts: []reconcile.DevicePart{e.part}})
	r.Pass(context.Background(), pol, reconcile.Scope{Full: true})
	st := r.Snapshot()
	for _, n := range e.part.Check(context.Background(), &reconcile.CheckInput{Host: h, Policy: pol, State: &st}) {
		if n.ID != "qos-owner" {
			continue
		}
		for _, w := range []string{"dcb dcbx set dev ens1f0np0 host ieee", `dcbx = "host"`, "LLDP_NB_DCBX_P1=0 LLDP_NB_RX_MODE_P1=0 LLDP_NB_TX_MODE_P1=0", "P2 for port 2", "firmware reset"} {
			if !strings.Contains(n.Fix, w) {
				t.Errorf("qos-owner fix lacks %q: %s", w, n.Fix)
			}
		}
		return
	}
	t.Error("no qos-owner note")
}
