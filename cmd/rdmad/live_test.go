package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/test/bustest"
	"github.com/rdmad/rdmad/test/livetest"
)

// privateBus starts a dbus-daemon with the test bus configuration.
func privateBus(t *testing.T) string { return bustest.Start(t) }

// eventually polls cond until it holds; the deadline only guards a hang.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type status struct {
	ConfigError string `json:"config_error"`
}

// TestLiveConfigEdits runs the real rdmad and rdmactl on a private bus: a
// rename-replace edit of a drop-in is applied with no command to rdmad, and
// an edit with a syntax error leaves the previous policy in force and shows
// the error, with its file and line, in `rdmactl status`.
func TestLiveConfigEdits(t *testing.T) {
	addr := privateBus(t)
	root, env, _ := demoHost(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	daemon := exec.CommandContext(ctx, rdmadBin, "--root", root, "--bus", addr)
	daemon.Env = env
	var logs strings.Builder
	daemon.Stderr = &logs
	if err := daemon.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if t.Failed() {
			t.Logf("rdmad log:\n%s", logs.String())
		}
	}()
	ctl := func(args ...string) (string, error) {
		out, err := exec.Command(rdmactlBin, append([]string{"--bus", addr}, args...)...).Output()
		return string(out), err
	}
	eventually(t, "rdmad answers on the bus", func() bool { _, err := ctl("status"); return err == nil })
	tos := func() string { return hosttest.Read(t, root, host.ConfigfsPortPath("mlx5_0", 1, "default_roce_tos")) }
	if got := tos(); got != "106" {
		t.Fatalf("tos at start = %s", got)
	}

	// An editor's save: write a temp file, rename it over the drop-in.
	dropin := filepath.Join(root, "etc/rdma/rdmad.d/50-roce.toml")
	replace := func(content string) {
		tmp := dropin + ".swp"
		if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, dropin); err != nil {
			t.Fatal(err)
		}
	}
	replace("[[roce]]\ndevice = \"mlx5_*\"\ntos = 77\n")
	eventually(t, "the edited TOS reaches configfs", func() bool { return tos() == "77" })

	replace("[[roce]]\ndevice = \"mlx5_*\"\ntos = 78\nmode = \n")
	eventually(t, "rdmactl status shows the config error", func() bool {
		out, err := ctl("-o", "json", "status")
		var st status
		return err == nil && json.Unmarshal([]byte(out), &st) == nil && strings.Contains(st.ConfigError, "50-roce.toml:4")
	})
	if out, _ := ctl("status"); !strings.Contains(out, "policy in force: last good configuration saved ") {
		t.Errorf("human status does not say the last good configuration is in force:\n%s", out)
	}
	if got := tos(); got != "77" {
		t.Errorf("tos after a broken edit = %s, want the last good 77", got)
	}

	if err := daemon.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := daemon.Wait(); err != nil {
		t.Errorf("rdmad did not stop cleanly on SIGTERM: %v", err)
	}
}

// TestLiveOnePassPerCall: a D-Bus Reload and a persisted SetRoCE each cost
// one pass, visible as one "reconciled" line in the --verbose log, also
// after the file watcher has seen rdmad's own drop-in write.
func TestLiveOnePassPerCall(t *testing.T) {
	addr := privateBus(t)
	root, env, _ := demoHost(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	daemon := exec.CommandContext(ctx, rdmadBin, "--root", root, "--bus", addr, "--verbose")
	daemon.Env = env
	logs := &livetest.SyncBuffer{}
	daemon.Stderr = logs
	if err := daemon.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if t.Failed() {
			t.Logf("rdmad log:\n%s", logs.String())
		}
	}()
	ctl := func(args ...string) error {
		out, err := exec.Command(rdmactlBin, append([]string{"--bus", addr}, args...)...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("rdmactl %v: %v: %s", args, err, out)
		}
		return nil
	}
	eventually(t, "rdmad answers on the bus", func() bool { return ctl("status") == nil })
	passes := func() int { return strings.Count(logs.String(), "msg=reconciled") }
	// Quiet: wait until no pass has run for a while (start-up, background
	// module loads).
	settle := func() int {
		n := passes()
		for {
			time.Sleep(600 * time.Millisecond) // longer than the watcher's debounce
			if m := passes(); m == n {
				return n
			} else {
				n = m
			}
		}
	}
	for _, call := range [][]string{
		{"reload"},
		{"roce", "set", "mlx5_0/1", "--tos", "9", "--persist"},
		{"link", "list"}, // reading: no pass at all
	} {
		before := settle()
		if err := ctl(call...); err != nil {
			t.Fatal(err)
		}
		want := 1
		if call[0] == "link" {
			want = 0
		}
		if got := settle() - before; got != want {
			t.Errorf("rdmactl %v ran %d passes, want %d", call, got, want)
		}
	}
}
