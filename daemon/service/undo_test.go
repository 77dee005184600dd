package service_test

import (
	"context"
	"errors"
	"syscall"
	"testing"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/service"
)

// A persisted call that the kernel refuses leaves the runtime overlay as
// it found it: the runtime TOS the call would have replaced (persisting a
// field forgets its runtime value) is declared and set again.
func TestRefusedPersistedCallKeepsTheRuntimeDeclaration(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, "", func(e *env) {
		e.k.Refuse("mlx5_0/ports/1/default_roce_mode", "IB/RoCE v1", syscall.EIO)
	})
	if err := e.svc.SetRoCE(ctx, service.RoCEChange{Device: "mlx5_0", Port: 1, TOS: 77}); err != nil {
		t.Fatal(err)
	}
	err := e.svc.SetRoCE(ctx, service.RoCEChange{Device: "mlx5_0", Port: 1, Mode: config.RoCEv1, TOS: 96, Persist: true})
	var ae *service.ApplyError
	if !errors.As(err, &ae) {
		t.Fatalf("persisted SetRoCE the kernel refuses: %v, want an ApplyError", err)
	}
	d := e.svc.PolicyInForce().RoCEFor(config.Target{Name: "mlx5_0"}, 1)
	if d.TOS == nil || *d.TOS != 77 || d.TOSSource.File != config.RuntimeFile {
		t.Errorf("after the refused persisted call: tos %v from %s, want the runtime 77 again", d.TOS, d.TOSSource)
	}
	if got := e.port(t, "mlx5_0", 1, "default_roce_tos"); got != "77" {
		t.Errorf("configfs tos = %q, want 77", got)
	}
	if got := e.persisted(); got != "<none>" {
		t.Errorf("drop-in after the refused call: %q", got)
	}
}
