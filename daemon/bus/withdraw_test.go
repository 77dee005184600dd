package bus_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/test/bustest"
)

// rdmactl ... unset hands a setting back to the files, through the real
// rdmactl on a real bus: a runtime value over a persisted one over a
// file's, withdrawn layer by layer.
func TestUnsetHandsBackToTheFiles(t *testing.T) {
	e := newAuthEnv(t, bustest.Start, defaultAuth)
	tosFile := "sys/kernel/config/rdma_cm/mlx5_0/ports/1/default_roce_tos"
	dropIn := filepath.Join(e.root, config.DropInDir, config.PersistedName)
	run := func(want int, args ...string) string {
		t.Helper()
		code, out, errs := rdmactl(t, e.addr, args...)
		if code != want {
			t.Fatalf("rdmactl %s: exit %d, want %d: %s%s", strings.Join(args, " "), code, want, out, errs)
		}
		return errs
	}
	tos := func(want string) {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(e.root, tosFile))
		if got := strings.TrimSpace(string(b)); err != nil || got != want {
			t.Errorf("TOS %s, want %s", got, want)
		}
	}
	tos("106") // rdmad.toml
	run(0, "roce", "set", "mlx5_0/1", "--tos", "8", "--persist")
	run(0, "roce", "set", "mlx5_0/1", "--tos", "9")
	tos("9")
	run(0, "roce", "unset", "mlx5_0/1")
	tos("8") // the drop-in decides
	if errs := run(1, "roce", "unset", "mlx5_0/1"); !strings.Contains(errs, "rdmad's drop-in") || !strings.Contains(errs, "withdraw it with persist") {
		t.Errorf("a runtime unset of what the drop-in declares: %s", errs)
	}
	run(0, "roce", "unset", "mlx5_0/1", "--persist")
	tos("106") // the administrator's file decides again
	if data, err := os.ReadFile(dropIn); err != nil || strings.Contains(string(data), `device = "mlx5_0"`) {
		t.Errorf("the drop-in still declares mlx5_0: %q %v", data, err)
	}
	// Every port's setting, withdrawn from one port: the others keep it.
	run(0, "roce", "set", "mlx5_0", "--mode", "v1")
	run(0, "roce", "unset", "mlx5_0/1")
	if o := e.d.svc.RuntimeOverlay(); len(o.RoCE) != 0 {
		// mlx5_0 has one port: nothing is left for the others.
		t.Errorf("overlay after withdrawing mlx5_0's only port: %+v", o.RoCE)
	}
	// Nothing declared over D-Bus for a device that exists: nothing to do.
	run(0, "roce", "unset", "mlx5_0")
	if errs := run(1, "roce", "unset", "mlx9_0"); !strings.Contains(errs, `no RDMA device "mlx9_0"`) {
		t.Errorf("unset of a device that is nowhere: %s", errs)
	}

	// A link of the files deleted at runtime comes back when the deletion
	// is withdrawn.
	run(0, "link", "del", "rxe0")
	calls := len(e.links.Calls())
	run(0, "link", "unset", "rxe0")
	if got := e.links.Calls()[calls:]; !slices.Equal(got, []string{"add rxe0 rxe ens1f0np0"}) {
		t.Errorf("kernel calls after link unset: %q", got)
	}
	if errs := run(1, "link", "unset", "rxe7"); !strings.Contains(errs, `no link "rxe7" is declared`) {
		t.Errorf("unset of an undeclared link: %s", errs)
	}

	// QoS and netns: runtime, then persisted.
	run(0, "qos", "set", "mlx5_0/1", "--trust", "dscp")
	run(0, "qos", "unset", "mlx5_0")
	run(0, "netns", "set", "exclusive")
	run(0, "netns", "unset")
	if o := e.d.svc.RuntimeOverlay(); !o.Empty() {
		t.Errorf("overlay after every unset: %+v", o)
	}
	run(0, "netns", "unset", "--persist") // the drop-in's [netns]
	run(0, "link", "unset", "rxe1", "--persist")
	run(0, "roce", "unset", "mlx5_1", "--persist")
	if _, err := os.Stat(dropIn); !os.IsNotExist(err) {
		data, _ := os.ReadFile(dropIn)
		t.Errorf("the drop-in is left with nothing to say: %q", data)
	}

	// [api] changes = "none" refuses a set, never an unset: a change made
	// before can be taken back.
	run(0, "link", "del", "rxe0")
	hosttest.Write(t, e.root, config.MainFile, authConfig+"\n[api]\nchanges = \"none\"\n")
	run(0, "reload")
	if errs := run(1, "roce", "set", "mlx5_0/1", "--tos", "5"); !strings.Contains(errs, `not allowed on this host: `+filepath.Join(e.root, config.MainFile)) {
		t.Errorf("set under [api] changes = none: %s", errs)
	}
	run(0, "link", "unset", "rxe0")
	if o := e.d.svc.RuntimeOverlay(); !o.Empty() {
		t.Errorf("overlay after link unset under [api] changes = none: %+v", o)
	}
}
