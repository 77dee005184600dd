package main_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rdmad/rdmad/dbusapi"
	"github.com/rdmad/rdmad/test/bustest"
	"github.com/rdmad/rdmad/test/livetest"
	"github.com/rdmad/rdmad/test/testdeps"
)

var bins livetest.Binaries

func TestMain(m *testing.M) { livetest.Main(m, &bins) }

// fakeSSH puts an ssh first in PATH that records its arguments and, as
// sshd would run the remote command on the host, runs systemd-stdio-bridge
// against the test's private bus (it ignores the remote command's own
// --bus-path: the "host" here is this machine). exitWith, when not "",
// makes it fail as ssh does when the host cannot be reached.
func fakeSSH(t *testing.T, addr, exitWith string) (env []string, argsLog string) {
	t.Helper()
	bridge := testdeps.Tool(t, "systemd-stdio-bridge", "systemd")
	dir := t.TempDir()
	argsLog = filepath.Join(dir, "ssh.args")
	script := "#!/bin/sh\nprintf '%s\\n' \"$@\" > " + argsLog + "\n"
	if exitWith != "" {
		script += "echo '" + exitWith + "' >&2\nexit 255\n"
	} else {
		script += "exec " + bridge + " --bus-path='" + addr + "'\n"
	}
	if err := os.WriteFile(filepath.Join(dir, "ssh"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH")), argsLog
}

func rdmactl(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(bins.Rdmactl, args...)
	cmd.Env = env
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, out.String(), errb.String()
}

// rdmactl -H runs any command against the rdmad of another host through
// ssh and systemd-stdio-bridge, as hostnamectl -H does: reads, JSON and
// changes, over a real bridge to a real rdmad on a real dbus-daemon.
func TestRemoteHost(t *testing.T) {
	addr := bustest.Start(t)
	root, denv := livetest.DemoHost(t)
	livetest.Start(t, bins, addr, root, denv)
	env, argsLog := fakeSSH(t, addr, "")

	code, out, errs := rdmactl(t, env, "-H", "admin@node7:2222", "status")
	if code != 0 || !strings.HasPrefix(out, "rdmad ") || !strings.Contains(out, "mlx5_0/1") {
		t.Fatalf("-H status: exit %d\n%s%s", code, out, errs)
	}
	args, err := os.ReadFile(argsLog)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Fields(string(args)); strings.Join(got, " ") != "-xT -l admin -p 2222 -- node7 systemd-stdio-bridge" {
		t.Errorf("ssh ran with %q", got)
	}

	code, out, errs = rdmactl(t, env, "-H", "node7", "-j", "device", "list")
	var devs []dbusapi.Device
	if code != 0 || json.Unmarshal([]byte(out), &devs) != nil || len(devs) != 4 {
		t.Fatalf("-H -j device list: exit %d\n%s%s", code, out, errs)
	}
	if args, _ := os.ReadFile(argsLog); strings.Join(strings.Fields(string(args)), " ") != "-xT -- node7 systemd-stdio-bridge" {
		t.Errorf("ssh ran with %q", args)
	}

	// A change over -H reaches the remote rdmad (the test runs as root,
	// whom rdmad allows).
	if code, out, errs := rdmactl(t, env, "-H", "node7", "roce", "set", "mlx5_0/1", "--tos", "42"); code != 0 {
		t.Fatalf("-H roce set: exit %d\n%s%s", code, out, errs)
	}
	tos, err := os.ReadFile(filepath.Join(root, "sys/kernel/config/rdma_cm/mlx5_0/ports/1/default_roce_tos"))
	if err != nil || strings.TrimSpace(string(tos)) != "42" {
		t.Errorf("TOS after rdmactl -H roce set: %q %v", tos, err)
	}
	if code, out, _ := rdmactl(t, env, "--bus", addr, "-j", "roce", "show", "mlx5_0/1"); code != 0 || !strings.Contains(out, `"tos":42`) {
		t.Errorf("local roce show after the remote change: %s", out)
	}
}

// When ssh cannot reach the host, its own message reaches the user, then
// one line saying what to check; exit 1.
func TestRemoteHostUnreachable(t *testing.T) {
	env, _ := fakeSSH(t, "unix:path=/nonexistent", "ssh: connect to host node7 port 22: Connection refused\033]0;pwned\007\r")
	code, out, errs := rdmactl(t, env, "-H", "root@node7:2222", "status")
	if code != 1 || out != "" || !strings.Contains(errs, "ssh: connect to host node7 port 22: Connection refused\\x1b]0;pwned\\x07\n") ||
		!strings.HasSuffix(errs, "rdmactl: cannot reach the bus of root@node7:2222 over ssh: check that ssh -xT -l root -p 2222 -- node7 systemd-stdio-bridge works (ssh access, systemd on the host)\n") {
		t.Errorf("exit %d\n%s%s", code, out, errs)
	}
	if code, _, errs := rdmactl(t, env, "-H", "-oProxyCommand=x", "status"); code != 2 || !strings.Contains(errs, "want [USER@]HOST[:PORT]") {
		t.Errorf("-H with an option for a host: exit %d %s", code, errs)
	}
}
