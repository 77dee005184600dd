package service_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
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

// brokenMain is an rdmad.toml that does not load.
const brokenMain = "[modules\n"

// A persisted call whose reload fails (the files on disk stopped loading
// since the last reload) puts rdmad's drop-in back, says the files do not
// load, and logs at error priority that the undo could not reload either:
// the policy in force stays the last good one.
func TestPersistedCallWhoseReloadFailsIsUndoneAndLogged(t *testing.T) {
	e := newEnv(t, "", nil)
	before := e.svc.PolicyInForce().RoCEFor(config.Target{Name: "mlx5_0"}, 1)
	hosttest.Write(t, e.root, mainFile, brokenMain)
	err := e.svc.SetRoCE(context.Background(), service.RoCEChange{Device: "mlx5_0", Port: 1, TOS: 96, Persist: true})
	var ce *service.ConfigError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "rdmad.toml") {
		t.Fatalf("persisted SetRoCE while rdmad.toml does not load: %v, want a ConfigError naming it", err)
	}
	if got := e.persisted(); got != "<none>" {
		t.Errorf("drop-in after the failed reload: %q, want it removed again", got)
	}
	if after := e.svc.PolicyInForce().RoCEFor(config.Target{Name: "mlx5_0"}, 1); !reflect.DeepEqual(after, before) {
		t.Errorf("policy in force after the failed reload: %+v, want the last good %+v", after, before)
	}
	undo := ""
	for _, l := range strings.Split(e.log.String(), "\n") {
		if strings.Contains(l, `msg="could not undo a persisted change after a failed reload"`) {
			undo = l
		}
	}
	if !strings.Contains(undo, "level=ERROR") || !strings.Contains(undo, "rdmad.toml") {
		t.Errorf("the undo's failed reload is not logged at error priority naming the file: %q\nlog:\n%s", undo, e.log)
	}
}

// A persisted call the kernel refuses whose undo cannot reload (the files
// stopped loading while its pass ran) reports the reload's error as the
// undo's, with the drop-in put back.
func TestRefusedPersistedCallReportsAnUndoThatCannotReload(t *testing.T) {
	e := newEnv(t, "", func(e *env) {
		e.k.Refuse("mlx5_0/ports/1/default_roce_mode", "IB/RoCE v1", syscall.EIO)
	})
	main := filepath.Join(e.root, mainFile)
	var broke atomic.Bool
	e.k.BeforeWrite(func(rel, value string) {
		// The pass writes the mode the kernel refuses: an administrator's
		// edit lands now, before the call's undo reloads.
		if strings.HasSuffix(rel, "default_roce_mode") && value == "IB/RoCE v1" && !broke.Swap(true) {
			if err := os.WriteFile(main, []byte(brokenMain), 0o644); err != nil {
				panic(err)
			}
		}
	})
	err := e.svc.SetRoCE(context.Background(), service.RoCEChange{Device: "mlx5_0", Port: 1, Mode: config.RoCEv1, Persist: true})
	var ae *service.ApplyError
	if !errors.As(err, &ae) {
		t.Fatalf("persisted SetRoCE the kernel refuses: %v, want an ApplyError", err)
	}
	if !broke.Load() {
		t.Fatal("the pass never wrote the refused mode")
	}
	if ae.UndoErr == nil || !strings.Contains(ae.UndoErr.Error(), "rdmad.toml") {
		t.Errorf("the undo's failed reload: UndoErr %v, want the reload's error naming rdmad.toml", ae.UndoErr)
	}
	if got := e.persisted(); got != "<none>" {
		t.Errorf("drop-in after the refused call: %q, want it removed again", got)
	}
}
