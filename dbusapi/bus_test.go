package dbusapi_test

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/service"
	"github.com/rdmad/rdmad/dbusapi"
)

// privateBus starts a real dbus-daemon with test/bus/bus.conf.in in a
// world-readable temp dir (a test connects as another uid) and returns its
// address.
func privateBus(t *testing.T, dir string) string {
	t.Helper()
	if _, err := exec.LookPath("dbus-daemon"); err != nil {
		t.Skip("dbus-daemon not installed (apt-get install dbus-daemon)")
	}
	tmpl, err := os.ReadFile("../test/bus/bus.conf.in")
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "bus.sock")
	conf := filepath.Join(dir, "bus.conf")
	if err := os.WriteFile(conf, []byte(strings.ReplaceAll(string(tmpl), "@SOCKET@", sock)), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("dbus-daemon", "--config-file", conf, "--print-address", "--nofork", "--nopidfile")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("dbus-daemon gave no address: %v", err)
	}
	go io.Copy(io.Discard, out)
	return strings.TrimSpace(line)
}

// fixture copies a fixture host tree and writes config text to its
// rdmad.toml.
func fixture(t *testing.T, dir, name, cfg string) string {
	t.Helper()
	root := filepath.Join(dir, "root")
	if out, err := exec.Command("cp", "-a", filepath.Join("..", "test", "hosts", name), root).CombinedOutput(); err != nil {
		t.Fatalf("copy fixture: %v: %s", err, out)
	}
	if err := os.MkdirAll(filepath.Join(root, "etc/rdma"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "etc/rdma/rdmad.toml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

// recordingLoader stands in for modprobe (service.RealKernel's Modprobe is
// tested by the modules package against a fake modprobe in PATH).
type recordingLoader struct {
	mu    sync.Mutex
	loads [][]string
}

func (l *recordingLoader) Load(_ context.Context, names []string) error {
	l.mu.Lock()
	l.loads = append(l.loads, names)
	l.mu.Unlock()
	return nil
}

// daemon is an rdmad (service + bus server) on a bus, as cmd/rdmad wires it.
type daemon struct {
	svc    *service.Service
	srv    *dbusapi.Server
	conn   *dbus.Conn
	cancel context.CancelFunc
	done   chan struct{}
}

func startDaemon(t *testing.T, addr, root string) *daemon {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	h := host.New(root)
	rec := service.NewReconciler(h, service.Kernel{Modules: &recordingLoader{}}, log)
	svc, err := service.New(service.Options{Host: h, Reconciler: rec, Log: log})
	if err != nil {
		t.Fatalf("service: %v", err)
	}
	conn, err := dbusapi.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := dbusapi.NewServer(conn, svc, &dbusapi.BusAuthorizer{Conn: conn, PolkitTimeout: 10 * time.Second}, log)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.RequestName(dbusapi.BusName); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	d := &daemon{svc: svc, srv: srv, conn: conn, cancel: cancel, done: make(chan struct{})}
	go func() { _ = svc.Run(ctx); close(d.done) }()
	svc.RequestAll()
	if err := svc.Idle(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.stop)
	return d
}

func (d *daemon) stop() {
	if d.cancel == nil {
		return
	}
	d.cancel()
	<-d.done
	d.srv.Close()
	_, _ = d.conn.ReleaseName(dbusapi.BusName)
	d.conn.Close()
	d.cancel = nil
}

// testEnv is a bus, a fixture host and rdmad on them.
type testEnv struct {
	dir, addr, root string
	d               *daemon
}

func newEnv(t *testing.T, hostName, cfg string) *testEnv {
	t.Helper()
	dir, err := os.MkdirTemp("", "rdmad-bus-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	e := &testEnv{dir: dir}
	e.addr = privateBus(t, dir)
	e.root = fixture(t, dir, hostName, cfg)
	e.d = startDaemon(t, e.addr, e.root)
	return e
}

func (e *testEnv) read(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(e.root, rel))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func dialT(t *testing.T, addr string) *dbus.Conn {
	t.Helper()
	c, err := dbusapi.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
