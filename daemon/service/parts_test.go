package service_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rdmad/rdmad/daemon/compose"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/daemon/links/linkstest"
	"github.com/rdmad/rdmad/daemon/reconcile"
	"github.com/rdmad/rdmad/daemon/service"
)

// TestDeclaredLinkConfiguredInSamePass checks the part order: the Early
// links part creates rxe0, and the RoCE part configures it in that pass.
func TestDeclaredLinkConfiguredInSamePass(t *testing.T) {
	root := t.TempDir()
	files := map[string]string{
		"etc/rdma/rdmad.toml": "[modules]\nenable = false\n\n[[link]]\nname = \"rxe0\"\ntype = \"rxe\"\nnetdev = \"eth1\"\n\n[[roce]]\ndevice = \"rxe0\"\ntos = 5\n",
		"proc/modules":        "rdma_rxe 1 0 - Live 0x0\nib_core 1 0 - Live 0x0\n",
		host.ConfigfsPortPath("rxe0", 1, "default_roce_mode"): "RoCE v2\n",
		host.ConfigfsPortPath("rxe0", 1, "default_roce_tos"):  "0\n",
	}
	for rel, data := range files {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	h := host.New(root)
	if err := linkstest.AddNetdev(h, "eth1"); err != nil {
		t.Fatal(err)
	}
	nl := &linkstest.Netlink{Host: h}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	svc, err := service.New(service.Options{Host: h, Parts: compose.Parts(compose.Kernel{Modules: &hosttest.Modprobe{}, Links: nl}), Log: log})
	if err != nil {
		t.Fatal(err)
	}
	rep := svc.ReconcileNow(context.Background())
	if rep.Failed() {
		var b strings.Builder
		reconcile.WriteReport(&b, rep)
		t.Fatalf("pass failed:\n%s", b.String())
	}
	if got := strings.Join(nl.Calls(), ","); got != "add rxe0 rxe eth1" {
		t.Errorf("netlink calls %q", got)
	}
	if _, ok := svc.Reconciler().Device("rxe0"); !ok {
		t.Fatal("rxe0 not in state after the pass that created it")
	}
	if tos, _ := h.ReadString(host.ConfigfsPortPath("rxe0", 1, "default_roce_tos")); strings.TrimSpace(tos) != "5" {
		t.Errorf("tos = %q, want 5 in the same pass", tos)
	}

	// DeleteLink through RDMA netlink: the device goes and, being dropped
	// from the policy in force, is not recreated by the next pass.
	if err := svc.DeleteLink(context.Background(), "rxe0", false); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(nl.Calls(), ","); got != "add rxe0 rxe eth1,del rxe0" {
		t.Errorf("netlink calls after delete %q", got)
	}
	svc.ReconcileNow(context.Background())
	if h.Exists(host.ClassInfiniband + "/rxe0") {
		t.Error("deleted link was recreated by the next pass")
	}
}
