package service_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/service"
)

// A persisted call is saved as the last good configuration only once its
// pass succeeded: one the kernel refuses never reaches the saved copy, not
// even for the moment between writing rdmad's drop-in and the rollback (a
// crash there would make it the policy of the next boot whose files do not
// load), and a reload that lands meanwhile (the file watcher sees the
// drop-in) saves nothing either. A call that succeeds is saved.
func TestPersistedCallSavesTheLastGoodOnlyAfterItsPass(t *testing.T) {
	e := newEnv(t, "", func(e *env) {
		e.k.Refuse("mlx5_0/ports/1/default_roce_mode", "IB/RoCE v1", syscall.EIO)
	})
	e.svc.SaveLastGood()
	name := filepath.Join(e.root, config.LastGoodFile)
	saved := e.read(t, config.LastGoodFile)
	first := inodeOf(t, name)

	var during []string
	e.k.BeforeWrite(func(rel, value string) {
		if !strings.HasSuffix(rel, "default_roce_mode") {
			return
		}
		_ = e.svc.Reload() // the watcher's reload of the tentative drop-in
		during = append(during, e.read(t, config.LastGoodFile))
	})
	err := e.svc.SetRoCE(context.Background(), service.RoCEChange{Device: "mlx5_0", Port: 1, Mode: config.RoCEv1, TOS: -1, Persist: true})
	var ae *service.ApplyError
	if !errors.As(err, &ae) {
		t.Fatalf("SetRoCE refused by the kernel = %v, want an ApplyError", err)
	}
	if len(during) == 0 {
		t.Fatal("the refused write was never tried")
	}
	for _, got := range during {
		if got != saved {
			t.Errorf("during the refused call's pass the last good configuration was\n%s\nwant it unchanged:\n%s", got, saved)
		}
	}
	if got := e.read(t, config.LastGoodFile); got != saved || inodeOf(t, name) != first {
		t.Errorf("a refused persisted call rewrote the last good configuration (now %q)", got)
	}

	e.k.BeforeWrite(nil)
	if err := e.svc.SetRoCE(context.Background(), service.RoCEChange{Device: "mlx5_0", Port: 1, TOS: 42, Persist: true}); err != nil {
		t.Fatal(err)
	}
	if got := e.read(t, config.LastGoodFile); !strings.Contains(got, config.PersistedName) {
		t.Errorf("a persisted call that succeeded was not saved as the last good configuration:\n%s", got)
	}
}

func inodeOf(t *testing.T, name string) uint64 {
	t.Helper()
	st, err := os.Stat(name)
	if err != nil {
		t.Fatal(err)
	}
	return st.Sys().(*syscall.Stat_t).Ino
}
