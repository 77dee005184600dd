package main_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/test/bustest"
	"github.com/rdmad/rdmad/test/testdeps"
)

// The bus daemon goes away: rdmad says so at error priority and in
// STATUS=, keeps applying its policy (an edit made meanwhile is applied),
// and when a bus listens at the same address again it takes its name
// back and serves its objects as before, with what changed meanwhile.
func TestBusLostAndBack(t *testing.T) {
	t.Parallel() // a bus and a host of its own; the test mostly waits
	testdeps.Tool(t, "dbus-daemon", "dbus-daemon")
	dir := bustest.PublicDir(t)
	addr, stopBus, err := bustest.Run(dir)
	if err != nil {
		t.Fatal(err)
	}
	addr, _, _ = strings.Cut(addr, ",guid=") // the next bus has another guid
	defer func() { stopBus() }()
	root, env, _ := demoHost(t)
	const prom = "/run/metrics/rdmad.prom"
	hosttest.Write(t, root, "etc/rdma/rdmad.d/40-metrics.toml", "[metrics]\ntextfile = \""+prom+"\"\n")
	// connected is rdmad_dbus_connected in the textfile ("" : no sample).
	connected := func() string {
		data, _ := os.ReadFile(filepath.Join(root, prom))
		for _, l := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(l, "rdmad_dbus_connected "); ok {
				return v
			}
		}
		return ""
	}
	sock, notes := notifySocket(t)
	p := startJournaled(t, append(env, "NOTIFY_SOCKET="+sock), "--root", root, "--bus", addr)
	ctl := func(args ...string) (string, error) {
		out, err := exec.Command(rdmactlBin, append([]string{"--bus", addr}, args...)...).CombinedOutput()
		return string(out), err
	}
	eventually(t, "rdmad answers on the bus", func() bool { _, err := ctl("status"); return err == nil })
	lastStatus := func() string {
		var last string
		for _, n := range notes() {
			for _, l := range strings.Split(n.text, "\n") {
				if s, ok := strings.CutPrefix(l, "STATUS="); ok {
					last = s
				}
			}
		}
		return last
	}
	tos := func() string { return hosttest.Read(t, root, host.ConfigfsPortPath("mlx5_0", 1, "default_roce_tos")) }
	eventually(t, "the textfile says rdmad is on the bus", func() bool { return connected() == "1" })

	stopBus()
	eventually(t, "an error-priority line about the lost bus", func() bool {
		for _, l := range strings.Split(p.logs(), "\n") {
			if strings.HasPrefix(l, "<3>") && strings.Contains(l, "D-Bus") {
				return true
			}
		}
		return false
	})
	eventually(t, "STATUS= says the bus is lost", func() bool { return strings.Contains(lastStatus(), "D-Bus connection lost") })
	eventually(t, "the textfile says rdmad is off the bus", func() bool { return connected() == "0" })
	hosttest.Write(t, root, "etc/rdma/rdmad.d/50-roce.toml", "[[roce]]\ndriver = \"mlx5_core\"\ntos = 77\n")
	eventually(t, "the edit made while the bus is gone is applied", func() bool { return tos() == "77" })
	if p.cmd.ProcessState != nil {
		t.Fatal("rdmad exited when the bus went away")
	}

	time.Sleep(1500 * time.Millisecond) // a reconnect or two fail meanwhile
	_, stopBus, err = bustest.Run(dir)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "rdmad answers on the new bus", func() bool { _, err := ctl("status"); return err == nil })
	if out, err := ctl("roce", "show", "mlx5_0/1"); err != nil || !strings.Contains(out, "77") {
		t.Errorf("roce show on the new bus: %v\n%s", err, out)
	}
	eventually(t, "STATUS= no longer says the bus is lost", func() bool { return !strings.Contains(lastStatus(), "D-Bus connection lost") })
	eventually(t, "the textfile says rdmad is on the bus again", func() bool { return connected() == "1" })
	if out, err := ctl("roce", "set", "mlx5_0/1", "--tos", "12"); err != nil || tos() != "12" {
		t.Errorf("a call on the new bus: %v, tos %s\n%s", err, tos(), out)
	}
	p.stop(t)
}
