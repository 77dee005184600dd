package main_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
)

// journalProc is an rdmad whose stderr is a file named by JOURNAL_STREAM,
// as systemd sets it up for a unit whose output goes to the journal.
type journalProc struct {
	cmd *exec.Cmd
	log string
}

func startJournaled(t *testing.T, env []string, args ...string) *journalProc {
	t.Helper()
	log := filepath.Join(t.TempDir(), "journal")
	f, err := os.Create(log)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	p := &journalProc{cmd: exec.Command(rdmadBin, args...), log: log}
	p.cmd.Env = append(env, fmt.Sprintf("JOURNAL_STREAM=%d:%d", st.Dev, st.Ino))
	p.cmd.Stderr = f
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
		if t.Failed() {
			t.Logf("rdmad %v log:\n%s", args, p.logs())
		}
	})
	return p
}

func (p *journalProc) logs() string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}

func (p *journalProc) stop(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("rdmad stopped with %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("rdmad did not stop")
	}
}

// The e2e scenario on a fixture host: rdmad boots with a good drop-in,
// the drop-in is made bad, the host "reboots" (the kernel forgets the TOS,
// rdmad starts again). rdmad keeps running, applies the last good TOS, and
// shows the error with file:line in the journal at error priority, in
// rdmactl status, the ConfigError property and rdmactl doctor (a fail).
// Persisted calls are refused; fixing the file clears it all.
func TestBadConfigAtBootAppliesTheLastGoodOne(t *testing.T) {
	addr := privateBus(t)
	root, env, _ := demoHost(t)
	ctl := func(args ...string) (string, error) {
		out, err := exec.Command(rdmactlBin, append([]string{"--bus", addr}, args...)...).CombinedOutput()
		return string(out), err
	}
	tos := func() string { return hosttest.Read(t, root, host.ConfigfsPortPath("mlx5_0", 1, "default_roce_tos")) }

	hosttest.Write(t, root, "etc/rdma/rdmad.d/70-metrics.toml", "[metrics]\ntextfile = \"/var/lib/prometheus/node-exporter/rdmad.prom\"\n")
	prom := func() string {
		b, _ := os.ReadFile(filepath.Join(root, "var/lib/prometheus/node-exporter/rdmad.prom"))
		return string(b)
	}
	first := startJournaled(t, env, "--root", root, "--bus", addr)
	eventually(t, "rdmad answers on the bus", func() bool { _, err := ctl("status"); return err == nil })
	if got := tos(); got != "106" {
		t.Fatalf("tos after the first boot = %s", got)
	}
	first.stop(t)
	if _, err := os.Stat(filepath.Join(root, config.LastGoodFile)); err != nil {
		t.Fatalf("no last good configuration saved: %v", err)
	}

	dropin := filepath.Join(root, "etc/rdma/rdmad.d/50-roce.toml")
	good, err := os.ReadFile(dropin)
	if err != nil {
		t.Fatal(err)
	}
	bad := strings.Replace(string(good), "tos = 106", "tos = 1060", 1)
	badLine := 1 + strings.Count(bad[:strings.Index(bad, "tos = 1060")], "\n")
	where := fmt.Sprintf("%s:%d", dropin, badLine)
	hosttest.Write(t, root, "etc/rdma/rdmad.d/50-roce.toml", bad)
	hosttest.Write(t, root, host.ConfigfsPortPath("mlx5_0", 1, "default_roce_tos"), "0")

	second := startJournaled(t, env, "--root", root, "--bus", addr)
	eventually(t, "rdmad with a bad drop-in answers on the bus", func() bool { _, err := ctl("status"); return err == nil })
	if got := tos(); got != "106" {
		t.Errorf("tos after a boot with a bad drop-in = %s, want the last good 106", got)
	}
	var errLine string
	for _, l := range strings.Split(second.logs(), "\n") {
		if strings.HasPrefix(l, "<3>") && strings.Contains(l, where) {
			errLine = l
		}
	}
	if errLine == "" {
		t.Errorf("no error-priority (<3>) log line names %s:\n%s", where, second.logs())
	}
	if !strings.Contains(second.logs(), "<6>level=INFO") {
		t.Errorf("info lines lack their priority prefix:\n%s", second.logs())
	}
	eventually(t, "rdmad_config_error 1 in the textfile of the last good configuration", func() bool {
		return strings.Contains(prom(), "\nrdmad_config_error 1\n")
	})
	out, err := ctl("-o", "json", "status")
	var st status
	if err != nil || json.Unmarshal([]byte(out), &st) != nil || !strings.Contains(st.ConfigError, where) {
		t.Errorf("status config_error = %q (%v), want one naming %s", st.ConfigError, err, where)
	}
	out, err = ctl("doctor")
	if err == nil || !strings.Contains(out, "fail") || !strings.Contains(out, where) {
		t.Errorf("doctor (err %v) does not fail naming %s:\n%s", err, where, out)
	}
	out, err = ctl("roce", "set", "mlx5_0/1", "--tos", "32", "--persist")
	if err == nil || !strings.Contains(out, "persist") {
		t.Errorf("persisted call while the files do not load: err %v\n%s", err, out)
	}
	if out, err := ctl("roce", "set", "mlx5_0/1", "--tos", "32"); err != nil || tos() != "32" {
		t.Errorf("runtime call while the files do not load: %v, tos %s\n%s", err, tos(), out)
	}

	hosttest.Write(t, root, "etc/rdma/rdmad.d/50-roce.toml", string(good))
	eventually(t, "the fixed file clears the error", func() bool {
		out, err := ctl("-o", "json", "status")
		var st status
		return err == nil && json.Unmarshal([]byte(out), &st) == nil && st.ConfigError == ""
	})
	if out, err := ctl("roce", "set", "mlx5_0/1", "--tos", "40", "--persist"); err != nil {
		t.Errorf("persisted call after the fix: %v\n%s", err, out)
	}
	second.stop(t)
}

// rdmad --check-config: exit 0 or 1 with every error and its file:line,
// --with/--as check a file as if installed; nothing is written, no bus.
func TestCheckConfig(t *testing.T) {
	root, env, _ := demoHost(t)
	before := snapshot(t, root)
	out, errOut, code := rdmad(t, env, "--root", root, "--check-config", "--bus", "unix:path=/nonexistent")
	if code != 0 || !strings.Contains(out, "50-roce.toml") {
		t.Errorf("good configuration: exit %d\n%s%s", code, out, errOut)
	}
	bad := filepath.Join(t.TempDir(), "tmpXYZ")
	if err := os.WriteFile(bad, []byte("[[roce]]\ndevice = \"x\"\ntos = 300\nmode = \"v3\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut, code = rdmad(t, env, "--root", root, "--check-config", "--with", bad, "--as", "50-roce.toml")
	as := filepath.Join(root, "etc/rdma/rdmad.d/50-roce.toml")
	if code != 1 || !strings.Contains(errOut, as+":3") || !strings.Contains(errOut, as+":4") {
		t.Errorf("bad file --as 50-roce.toml: exit %d, want 1 naming %s:3 and :4\n%s%s", code, as, out, errOut)
	}
	if _, errOut, code = rdmad(t, env, "--root", root, "--check-config", "--with", bad); code != 2 {
		t.Errorf("--with a file not named *.toml and no --as: exit %d, want 2 (usage)\n%s", code, errOut)
	}
	// A typo in a validate command: the file to check does not exist.
	missing := filepath.Join(t.TempDir(), "nonexistent.toml")
	for _, args := range [][]string{{"--with", missing}, {"--with", missing, "--as", "50-roce.toml"}} {
		out, errOut, code := rdmad(t, env, append([]string{"--root", root, "--check-config"}, args...)...)
		if code != 1 || !strings.Contains(errOut, missing) || strings.Contains(out, "loads") {
			t.Errorf("%v: exit %d, want 1 naming %s\n%s%s", args, code, missing, out, errOut)
		}
	}
	hosttest.Write(t, root, "etc/rdma/rdmad.d/70-x.toml", "bogus = 1\n")
	if _, errOut, code = rdmad(t, env, "--root", root, "--check-config"); code != 1 || !strings.Contains(errOut, "70-x.toml:1") {
		t.Errorf("bad drop-in: exit %d\n%s", code, errOut)
	}
	if err := os.Remove(filepath.Join(root, "etc/rdma/rdmad.d/70-x.toml")); err != nil {
		t.Fatal(err)
	}
	if after := snapshot(t, root); after != before {
		t.Errorf("--check-config changed the host")
	}
}
