package bus_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/rdmad/rdmad/daemon/audit"
	"github.com/rdmad/rdmad/daemon/bus"
	"github.com/rdmad/rdmad/daemon/compose"
	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/health"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/daemon/links"
	"github.com/rdmad/rdmad/daemon/netns/netnstest"
	"github.com/rdmad/rdmad/daemon/service"
	"github.com/rdmad/rdmad/dbusapi"
	"github.com/rdmad/rdmad/test/bustest"
	"github.com/rdmad/rdmad/test/livetest"
)

// privateBus starts a real dbus-daemon with its socket in dir.
func privateBus(t *testing.T, _ string) string { return bustest.Start(t) }

// fixture copies a fixture host tree and writes config text to its
// rdmad.toml.
func fixture(t *testing.T, dir, name, cfg string) string {
	t.Helper()
	root := filepath.Join(dir, "root")
	if out, err := exec.Command("cp", "-a", hosttest.FixtureDir(name), root).CombinedOutput(); err != nil {
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

// daemon is an rdmad (service + bus server) on a bus, as cmd/rdmad wires it.
type daemon struct {
	svc    *service.Service
	srv    *bus.Server
	conn   *dbus.Conn
	cancel context.CancelFunc
	done   chan struct{}
	logs   *livetest.SyncBuffer // what rdmad logged (notice and above)
}

// audits are the audit lines rdmad logged: one per accepted call.
func (d *daemon) audits() []string {
	var out []string
	for _, l := range strings.Split(d.logs.String(), "\n") {
		if strings.Contains(l, `msg="call accepted"`) {
			out = append(out, l)
		}
	}
	return out
}

func startDaemon(t *testing.T, addr, root string) *daemon {
	t.Helper()
	conn, err := dbusapi.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	return startDaemonOn(t, conn, root)
}

// startDaemonOn starts rdmad on a given connection.
func startDaemonOn(t *testing.T, conn *dbus.Conn, root string) *daemon {
	t.Helper()
	return startDaemonWith(t, conn, host.New(root))
}

// startOnKernel starts a bus, and rdmad on it over the fixture host name
// with configuration cfg behind a hosttest.Kernel, for a test that holds
// or refuses the kernel's reads and writes.
func startOnKernel(t *testing.T, name, cfg string) (addr string, k *hosttest.Kernel, d *daemon) {
	t.Helper()
	dir := bustest.PublicDir(t)
	addr = privateBus(t, dir)
	k = hosttest.NewKernel(fixture(t, dir, name, cfg))
	conn, err := dbusapi.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	return addr, k, startDaemonWith(t, conn, k.Host())
}

// startDaemonWith starts rdmad on conn over h (a hosttest.Kernel's host,
// for fault injection).
func startDaemonWith(t *testing.T, conn *dbus.Conn, h *host.Host) *daemon {
	t.Helper()
	return startDaemonLinks(t, conn, h, nil)
}

// startDaemonLinks starts rdmad on conn over h managing soft links
// through nl (nil: links are not managed).
func startDaemonLinks(t *testing.T, conn *dbus.Conn, h *host.Host, nl links.Netlink) *daemon {
	t.Helper()
	return startDaemonKernel(t, conn, h, compose.Kernel{Modules: &hosttest.Modprobe{Root: h.Root}, Netns: netnstest.New(config.NetnsShared), Links: nl})
}

// startDaemonKernel starts rdmad on conn over h with the kernel
// interfaces k (fakes).
func startDaemonKernel(t *testing.T, conn *dbus.Conn, h *host.Host, k compose.Kernel) *daemon {
	t.Helper()
	return startDaemonAuth(t, conn, h, k, &bus.PolkitAuthorizer{Conn: conn, PolkitTimeout: 10 * time.Second})
}

// startDaemonAuth starts rdmad on conn over h with the kernel interfaces
// k and the authorizer auth.
func startDaemonAuth(t *testing.T, conn *dbus.Conn, h *host.Host, k compose.Kernel, auth bus.Authorizer) *daemon {
	t.Helper()
	return startDaemonAs(t, conn, h, k, auth, nil)
}

// startDaemonAs is startDaemonAuth with the bus seeing the service through
// as (nil: the service itself, as compose.Bus wires it).
func startDaemonAs(t *testing.T, conn *dbus.Conn, h *host.Host, k compose.Kernel, auth bus.Authorizer, as func(*service.Service) bus.Daemon) *daemon {
	t.Helper()
	logs := &livetest.SyncBuffer{}
	var w io.Writer = logs
	level := audit.LevelNotice
	if testing.Verbose() {
		w, level = io.MultiWriter(logs, os.Stderr), slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level, ReplaceAttr: audit.NameLevel}))
	// modprobe is the test stand-in (the real one is tested against a
	// script in PATH, and for real in the VM test).
	svc, err := service.New(service.Options{Host: h, Parts: compose.Parts(k), Log: log})
	if err != nil {
		t.Fatalf("service: %v", err)
	}
	var srv *bus.Server
	if as == nil {
		srv, err = compose.Bus(conn, svc, auth, log)
	} else {
		srv, err = bus.New(conn, svc.Reconciler(), as(svc), auth, log)
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.RequestName(dbusapi.BusName); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	d := &daemon{svc: svc, srv: srv, conn: conn, cancel: cancel, done: make(chan struct{}), logs: logs}
	go func() { _ = svc.Run(ctx); close(d.done) }()
	svc.Start()
	if err := svc.Idle(ctx); err != nil {
		t.Fatal(err)
	}
	// The name was taken before the first pass (so tests see its
	// signals); its result is published by the applier goroutine, which
	// rdmad waits for before it takes the name (RequestName flushes).
	if err := srv.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	waitCountersSampled(t, svc)
	t.Cleanup(d.stop)
	return d
}

// waitCountersSampled waits for the health monitor's first sample of every
// port the first pass saw (it follows the pass on its own goroutine), so
// Diagnose has the same findings from the start of a test.
func waitCountersSampled(t *testing.T, svc *service.Service) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second) // guards a hang only
	for {
		v, all := svc.Health().View(), true
		for _, ds := range svc.Reconciler().Snapshot().Devices {
			for _, p := range ds.Ports {
				pv, ok := v.Ports[health.PortKey{Device: ds.Name, Port: p.Number}]
				all = all && ok && (pv.VF || !pv.To.IsZero())
			}
		}
		if all {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the health monitor never sampled every port")
		}
		time.Sleep(10 * time.Millisecond)
	}
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
	dir := bustest.PublicDir(t)
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
