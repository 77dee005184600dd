// Package clients runs the third-party client examples of docs/examples
// (PyGObject, gdbus, busctl) against the real rdmad on a private dbus-daemon
// serving a fixture host, and checks what they print.
package clients

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/test/bustest"
	"github.com/rdmad/rdmad/test/livetest"
	"github.com/rdmad/rdmad/test/testdeps"
)

var bins livetest.Binaries

func TestMain(m *testing.M) { livetest.Main(m, &bins) }

// lines collects a process's output lines and lets a test wait for one.
type lines struct {
	mu   sync.Mutex
	all  []string
	more chan struct{}
}

func follow(r io.Reader) *lines {
	l := &lines{more: make(chan struct{}, 1)}
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			l.mu.Lock()
			l.all = append(l.all, sc.Text())
			l.mu.Unlock()
			select {
			case l.more <- struct{}{}:
			default:
			}
		}
	}()
	return l
}

func (l *lines) text() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.all, "\n")
}

// await returns the first line after line index from that matches re.
func (l *lines) await(t *testing.T, from int, re string) (string, int) {
	t.Helper()
	rx := regexp.MustCompile(re)
	deadline := time.After(20 * time.Second) // guards a hang only
	for {
		l.mu.Lock()
		for i := from; i < len(l.all); i++ {
			if rx.MatchString(l.all[i]) {
				line := l.all[i]
				l.mu.Unlock()
				return line, i + 1
			}
		}
		l.mu.Unlock()
		select {
		case <-l.more:
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			t.Fatalf("no line matching %q; output so far:\n%s", re, l.text())
		}
	}
}

func ctl(t *testing.T, addr string, args ...string) string {
	t.Helper()
	out, err := exec.Command(bins.Rdmactl, append([]string{"--bus", addr}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("rdmactl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// addDevice makes a second Soft-RoCE device appear on the fixture host, as
// the kernel would show it in sysfs; removeDevice takes it away again.
func addDevice(t *testing.T, root, name string) {
	t.Helper()
	src := filepath.Join(root, "sys/devices/virtual/infiniband/rxe0")
	dst := filepath.Join(root, "sys/devices/virtual/infiniband", name)
	if err := hosttest.CopyTree(src, dst); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../devices/virtual/infiniband/"+name, filepath.Join(root, "sys/class/infiniband", name)); err != nil {
		t.Fatal(err)
	}
}

func removeDevice(t *testing.T, root, name string) {
	t.Helper()
	if err := os.Remove(filepath.Join(root, "sys/class/infiniband", name)); err != nil {
		t.Fatal(err)
	}
}

// TestPythonWatchExample runs docs/examples/rdmad-watch.py: it lists what
// GetManagedObjects returns, then prints the PropertiesChanged of a RoCE
// change made with rdmactl, and InterfacesAdded/Removed when a device comes
// and goes.
func TestPythonWatchExample(t *testing.T) {
	testdeps.Python3(t, "python3-gi (PyGObject)", "gi")
	if err := exec.Command("/usr/bin/python3", "-c", "import gi; gi.require_version('Gio', '2.0'); from gi.repository import Gio").Run(); err != nil {
		testdeps.Missing(t, "Gio 2.0 of PyGObject", "python3-gi", err)
	}
	addr := bustest.Start(t)
	root, env := livetest.DemoHost(t)
	livetest.Start(t, bins, addr, root, env)

	script := filepath.Join(hosttest.RepoRoot(), "docs/examples/rdmad-watch.py")
	once, err := exec.Command(script, "--address", addr, "--once").CombinedOutput()
	if err != nil {
		t.Fatalf("rdmad-watch.py --once: %v\n%s", err, once)
	}
	for _, want := range []string{
		`(?m)^rdmad \S+ last_result=ok config_error=none$`,
		`(?m)^device mlx5_0 driver=mlx5_core pci=0000:3b:00\.0 ports=1$`,
		`(?m)^port mlx5_0/1 state=ACTIVE link_layer=Ethernet roce_mode=RoCE v2 roce_tos=0$`,
		`(?m)^port mlx4_0/1 state=ACTIVE link_layer=InfiniBand `,
		`(?m)^device rxe0 `,
	} {
		if !regexp.MustCompile(want).Match(once) {
			t.Errorf("--once output lacks %s:\n%s", want, once)
		}
	}

	cmd := exec.Command(script, "--address", addr)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	out := follow(stdout)
	stopped := false
	defer func() {
		if !stopped {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}()
	_, next := out.await(t, 0, `^watching$`)

	ctl(t, addr, "roce", "set", "mlx5_0/1", "--tos", "42")
	line, next := out.await(t, next, `^changed mlx5_0/1 org\.rdmad1\.Port `)
	if !strings.Contains(line, "RoCETOS=42") {
		t.Errorf("PropertiesChanged line lacks RoCETOS=42: %q", line)
	}

	addDevice(t, root, "rxe1")
	ctl(t, addr, "reload") // a full pass, as after lost events
	_, next = out.await(t, next, `^added device rxe1 `)
	_, next = out.await(t, next, `^added port rxe1/1 `)
	removeDevice(t, root, "rxe1")
	ctl(t, addr, "reload")
	out.await(t, next, `^removed /org/rdmad1/devices/rxe1 rxe1 org\.rdmad1\.Device$`)

	// SIGTERM ends the main loop cleanly.
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	stopped = true
	if err != nil || stderr.Len() > 0 {
		t.Errorf("rdmad-watch.py did not exit cleanly on SIGTERM: %v\n%s", err, stderr.String())
	}
	if t.Failed() {
		t.Logf("rdmad-watch.py output:\n%s", out.text())
	}
}

// TestIntrospectionTools runs the gdbus and busctl commands that
// docs/examples/README.md shows.
func TestIntrospectionTools(t *testing.T) {
	testdeps.Tool(t, "gdbus", "libglib2.0-bin")
	testdeps.Tool(t, "busctl", "systemd")
	addr := bustest.Start(t)
	root, env := livetest.DemoHost(t)
	livetest.Start(t, bins, addr, root, env)
	ctl(t, addr, "roce", "set", "mlx5_0/1", "--tos", "42")
	port := "/org/rdmad1/devices/mlx5_5f0/ports/1" // "_" escaped as _5f, like systemd's paths

	run := func(name string, args ...string) string {
		t.Helper()
		out, err := exec.Command(name, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	out := run("gdbus", "introspect", "--address", addr, "--dest", "org.rdmad1", "--object-path", port)
	for _, want := range []string{"interface org.rdmad1.Port", "readonly i RoCETOS = 42;", "readonly s RoCEMode = 'RoCE v2';"} {
		if !strings.Contains(out, want) {
			t.Errorf("gdbus introspect lacks %q:\n%s", want, out)
		}
	}
	out = run("gdbus", "introspect", "--address", addr, "--dest", "org.rdmad1", "--object-path", "/org/rdmad1", "--recurse", "--only-properties")
	if !strings.Contains(out, "node /org/rdmad1/devices/rxe0/ports/1") {
		t.Errorf("gdbus introspect --recurse does not reach the ports:\n%s", out)
	}
	out = run("busctl", "--address="+addr, "get-property", "org.rdmad1", port, "org.rdmad1.Port", "RoCETOS")
	if strings.TrimSpace(out) != "i 42" {
		t.Errorf("busctl get-property RoCETOS = %q", out)
	}
	// The SetRoCE call of the README, through gdbus (it types the arguments
	// from rdmad's introspection data).
	run("gdbus", "call", "--address", addr, "--dest", "org.rdmad1", "--object-path", "/org/rdmad1",
		"--method", "org.rdmad1.Manager.SetRoCE", "mlx5_0", "1", "", "106", "false")
	if got := hosttest.Read(t, root, host.ConfigfsPortPath("mlx5_0", 1, "default_roce_tos")); got != "106" {
		t.Errorf("gdbus call SetRoCE: configfs tos = %s, want 106", got)
	}
	out = run("busctl", "--address="+addr, "--json=short", "call", "org.rdmad1", "/org/rdmad1",
		"org.freedesktop.DBus.ObjectManager", "GetManagedObjects")
	if !strings.Contains(out, `"/org/rdmad1/devices/mlx5_5f0/ports/1"`) {
		t.Errorf("busctl call GetManagedObjects lacks the port:\n%s", out)
	}
}
