package service_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/daemon/service"
)

// A persisted call reads rdmad's drop-in as a reload does: one another
// user could change (here writable by others, changed since the last
// reload) is refused, not merged into the new drop-in and rewritten as
// rdmad's own.
func TestPersistedCallsTrustTheDropInAsReloadDoes(t *testing.T) {
	e := newEnv(t, "", nil)
	dropIn := filepath.Join(config.DropInDir, config.PersistedName)
	tampered := config.PersistedHeader + "[[roce]]\ndevice = \"mlx5_1\"\nport = 1\ntos = 1\n"
	hosttest.Write(t, e.root, dropIn, tampered)
	if err := os.Chmod(filepath.Join(e.root, dropIn), 0o666); err != nil {
		t.Fatal(err)
	}
	for name, call := range map[string]func() error{
		"SetRoCE": func() error {
			return e.svc.SetRoCE(context.Background(), service.RoCEChange{Device: "mlx5_0", Port: 1, TOS: 7, Persist: true})
		},
		"Withdraw": func() error {
			return e.svc.Withdraw(context.Background(), service.Withdrawal{Kind: service.WithdrawRoCE, Name: "mlx5_1", Port: 1, Persist: true})
		},
	} {
		err := call()
		if !errors.Is(err, host.ErrUntrusted) {
			t.Errorf("%s with a drop-in writable by others: %v, want it refused as untrusted", name, err)
		}
		if got := e.persisted(); got != tampered {
			t.Errorf("%s rewrote the untrusted drop-in:\n%s", name, got)
		}
	}
	if got := e.port(t, "mlx5_0", 1, "default_roce_tos"); got == "7" {
		t.Errorf("the refused call reached the kernel")
	}
}
