package service_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rdmad/rdmad/daemon/compose"
	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/daemon/service"
)

// boot builds a daemon service on root, as rdmad does at start: load, save
// the last good configuration (after the instance lock), one full pass.
func boot(t *testing.T, root string) *service.Service {
	t.Helper()
	h := hosttest.NewKernel(root).Host()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	svc, err := service.New(service.Options{Host: h, Parts: compose.Parts(compose.Kernel{Modules: &hosttest.Modprobe{}}), Log: log})
	if err != nil {
		t.Fatalf("a daemon must start whatever its files say: %v", err)
	}
	svc.SaveLastGood()
	svc.ReconcileNow(context.Background())
	return svc
}

// A drop-in made bad between two boots: the second boot applies the last
// configuration that loaded (TOS 106, as the first boot saved it), with
// file:line of the saved copy, and shows the error. Persisted calls are
// refused, runtime ones work; fixing the file and reloading clears the
// error and saves the new configuration.
func TestBadConfigAtStartAppliesTheLastGoodOne(t *testing.T) {
	root := hosttest.Copy(t, "mlx5")
	hosttest.Write(t, root, mainFile, "[modules]\nenable = false\n")
	dropin := "etc/rdma/rdmad.d/50-roce.toml"
	hosttest.Write(t, root, dropin, "# site policy\n[[roce]]\ndevice = \"mlx5_*\"\ntos = 106\n")
	first := boot(t, root)
	if err := first.ConfigError(); err != nil {
		t.Fatal(err)
	}
	saved := hosttest.Read(t, root, config.LastGoodFile)
	if !strings.HasPrefix(saved, config.LastGoodHeader) {
		t.Fatalf("last good configuration not saved: %q", saved)
	}

	// Reboot: the kernel forgot the TOS, and the drop-in is now bad.
	hosttest.Write(t, root, host.ConfigfsPortPath("mlx5_0", 1, "default_roce_tos"), "0")
	hosttest.Write(t, root, dropin, "[[roce]]\ndevice = \"mlx5_*\"\ntos = 106\nmode = \"v3\"\n")
	svc := boot(t, root)
	err := svc.ConfigError()
	if err == nil || !strings.Contains(err.Error(), filepath.Join(root, dropin)+":4") {
		t.Fatalf("config error = %v, want one naming %s:4", err, dropin)
	}
	if got := hosttest.Read(t, root, host.ConfigfsPortPath("mlx5_0", 1, "default_roce_tos")); got != "106" {
		t.Errorf("tos after a boot with a bad drop-in = %s, want the last good 106", got)
	}
	pol := svc.PolicyInForce()
	if len(pol.RoCE) != 1 || pol.RoCE[0].Source.String() != filepath.Join(root, dropin)+":2" {
		t.Errorf("last good rule = %+v, want the saved copy's position %s:2", pol.RoCE, dropin)
	}
	if hosttest.Read(t, root, config.LastGoodFile) != saved {
		t.Error("a configuration that does not load replaced the last good one")
	}

	ctx := context.Background()
	var ce *service.ConfigError
	err = svc.SetRoCE(ctx, service.RoCEChange{Device: "mlx5_0", Port: 1, TOS: 32, Persist: true})
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "persist") {
		t.Errorf("persisted call while the files do not load: %v, want a config error", err)
	}
	if _, err := os.Stat(filepath.Join(root, config.DropInDir, config.PersistedName)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused persisted call wrote rdmad's drop-in (%v)", err)
	}
	if err := svc.SetRoCE(ctx, service.RoCEChange{Device: "mlx5_0", Port: 1, TOS: 32}); err != nil {
		t.Errorf("runtime call while the files do not load: %v", err)
	}

	hosttest.Write(t, root, dropin, "[[roce]]\ndevice = \"mlx5_*\"\ntos = 64\n")
	if err := svc.Reload(); err != nil {
		t.Fatal(err)
	}
	if err := svc.ConfigError(); err != nil {
		t.Errorf("error after the fix: %v", err)
	}
	if got := hosttest.Read(t, root, config.LastGoodFile); got == saved || !strings.Contains(got, "\"name\": \""+filepath.Join(root, dropin)) {
		t.Errorf("the fixed configuration was not saved as the last good one:\n%s", got)
	}
}

// With no last good configuration, a daemon whose files do not load starts
// and applies nothing declared.
func TestBadConfigAtFirstStartAppliesNothing(t *testing.T) {
	root := hosttest.Copy(t, "mlx5")
	hosttest.Write(t, root, host.ConfigfsPortPath("mlx5_0", 1, "default_roce_tos"), "0")
	hosttest.Write(t, root, mainFile, "[[roce]]\ndevice = \"mlx5_*\"\ntos = 106\nbogus = 1\n")
	svc := boot(t, root)
	if err := svc.ConfigError(); err == nil || !strings.Contains(err.Error(), ":4") {
		t.Fatalf("config error = %v", err)
	}
	if got := hosttest.Read(t, root, host.ConfigfsPortPath("mlx5_0", 1, "default_roce_tos")); got != "0" {
		t.Errorf("tos = %s: a policy was applied from files that do not load", got)
	}
	if pol := svc.PolicyInForce(); len(pol.Files) != 0 || pol.Modules.Enable {
		t.Errorf("policy in force = %+v, want nothing declared", pol)
	}
	if _, err := os.Stat(filepath.Join(root, config.LastGoodFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("files that do not load were saved as the last good configuration (%v)", err)
	}
}

// rdmad --once is a tool: a bad configuration is still its error.
func TestOneShotRefusesABadConfig(t *testing.T) {
	root := hosttest.Copy(t, "mlx5")
	hosttest.Write(t, root, mainFile, "bogus = 1\n")
	_, err := service.New(service.Options{Host: host.New(root), OneShot: true, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err == nil {
		t.Fatal("--once accepted a configuration that does not load")
	}
}

// A drop-in another user can change is refused exactly as a bad value:
// file and reason, the last good policy stays in force. Under --root the
// group bits are not judged (clones made under umask 002).
func TestUntrustedDropInIsRefusedLikeABadValue(t *testing.T) {
	root := hosttest.Copy(t, "mlx5")
	hosttest.Write(t, root, mainFile, "[modules]\nenable = false\n")
	dropin := "etc/rdma/rdmad.d/50-roce.toml"
	hosttest.Write(t, root, dropin, "[[roce]]\ndevice = \"mlx5_*\"\ntos = 106\n")
	svc := boot(t, root)
	name := filepath.Join(root, dropin)
	hosttest.Write(t, root, dropin, "[[roce]]\ndevice = \"mlx5_*\"\ntos = 7\n")
	if err := os.Chmod(name, 0o666); err != nil {
		t.Fatal(err)
	}
	err := svc.Reload()
	if err == nil || !errors.Is(err, host.ErrUntrusted) || !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), "writable by others") {
		t.Fatalf("world-writable drop-in: %v", err)
	}
	if pol := svc.PolicyInForce(); len(pol.RoCE) != 1 || *pol.RoCE[0].TOS != 106 {
		t.Errorf("policy in force changed: %+v", pol.RoCE)
	}
	if err := os.Chmod(name, 0o664); err != nil {
		t.Fatal(err)
	}
	if err := svc.Reload(); err != nil {
		t.Errorf("group-writable drop-in under --root: %v", err)
	}
	if err := os.Chmod(filepath.Dir(name), 0o1777); err != nil {
		t.Fatal(err)
	}
	if err := svc.Reload(); err == nil || !strings.Contains(err.Error(), filepath.Dir(name)) {
		t.Errorf("world-writable rdmad.d: %v", err)
	}
}
