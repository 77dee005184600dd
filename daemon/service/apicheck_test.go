package service_test

import (
	"context"
	"errors"
	"testing"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/daemon/service"
)

// The bus checks [api] changes before it asks polkit, and the files may be
// reloaded while the caller answers: the service checks again at commit,
// under the lock that orders it after the reload, so a call the files in
// force refuse changes nothing. Withdraw stays allowed: it hands the host
// back to the files.
func TestCommitChecksAPIChangesInForce(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, "", nil)
	if err := e.svc.SetRoCE(ctx, service.RoCEChange{Device: "mlx5_0", TOS: 77}); err != nil {
		t.Fatalf("SetRoCE before [api] changes: %v", err)
	}
	reload := func(changes string) {
		t.Helper()
		hosttest.Write(t, e.root, mainFile, "[modules]\nenable = false\n\n[api]\nchanges = \""+changes+"\"\n")
		if err := e.svc.Reload(); err != nil {
			t.Fatalf("reload with [api] changes = %q: %v", changes, err)
		}
	}
	refused := func(what string, persist bool, err error, changes config.APIChanges) {
		t.Helper()
		var na *config.NotAllowedError
		if !errors.As(err, &na) || na.Changes != changes || na.Persist != persist {
			t.Errorf("%s under [api] changes = %q: %v, want a NotAllowedError (persist %v)", what, changes, err, persist)
		}
	}

	reload("runtime")
	err := e.svc.SetRoCE(ctx, service.RoCEChange{Device: "mlx5_0", TOS: 96, Persist: true})
	refused("persisted SetRoCE", true, err, config.APIChangesRuntime)
	if got := e.persisted(); got != "<none>" {
		t.Errorf("a refused persisted call wrote the drop-in: %q", got)
	}
	if got := e.port(t, "mlx5_0", 1, "default_roce_tos"); got != "77" {
		t.Errorf("tos after a refused persisted call = %q, want 77 kept", got)
	}
	if err := e.svc.SetRoCE(ctx, service.RoCEChange{Device: "mlx5_0", TOS: 80}); err != nil {
		t.Errorf("runtime SetRoCE under [api] changes = runtime: %v", err)
	}

	reload("none")
	err = e.svc.SetRoCE(ctx, service.RoCEChange{Device: "mlx5_0", TOS: 88})
	refused("runtime SetRoCE", false, err, config.APIChangesNone)
	if got := e.port(t, "mlx5_0", 1, "default_roce_tos"); got != "80" {
		t.Errorf("tos after a refused runtime call = %q, want 80 kept", got)
	}
	if d := e.svc.PolicyInForce().RoCEFor(config.Target{Name: "mlx5_0"}, 1); d.TOS == nil || *d.TOS != 80 {
		t.Errorf("a refused runtime call changed the declaration: %+v, want tos 80", d)
	}
	if err := e.svc.Withdraw(ctx, service.Withdrawal{Kind: service.WithdrawRoCE, Name: "mlx5_0"}); err != nil {
		t.Errorf("Withdraw under [api] changes = none: %v, want it allowed", err)
	}
	if ov := e.svc.RuntimeOverlay(); !ov.Empty() {
		t.Errorf("Withdraw left the runtime declaration: %+v", ov)
	}
}
