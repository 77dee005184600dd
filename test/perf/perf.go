// Package perf measures rdmad at SR-IOV scale on generated hosts (N
// dual-port mlx5 functions, hosttest.Synth): reconcile passes, the D-Bus
// round trips, start-up and memory, side by side with the vendor shell
// procedure and the bare-syscall floor, in one run. `make bench` prints its
// table (test/perf/benchtable); the go test benchmarks here feed benchstat.
package perf

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/godbus/dbus/v5"
	"github.com/rdmad/rdmad/daemon/bus"
	"github.com/rdmad/rdmad/daemon/compose"
	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/daemon/reconcile"
	"github.com/rdmad/rdmad/daemon/service"
	"github.com/rdmad/rdmad/dbusapi"
)

// Host is a generated host: a pristine copy is kept so a run can start
// cold again.
type Host struct {
	Root  string // the tree rdmad works on
	clean string // the tree as generated, with kernel defaults in configfs
	N     int
}

// TempBase is where hosts are generated: tmpfs when there is one, as
// sysfs and configfs live in memory too.
func TempBase() string {
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		return "/dev/shm"
	}
	return os.TempDir()
}

// NewHost generates a host with n devices and the benchmark policy.
func NewHost(n int) (*Host, error) {
	dir, err := os.MkdirTemp(TempBase(), fmt.Sprintf("rdmad-perf-%d-", n))
	if err != nil {
		return nil, err
	}
	h := &Host{Root: filepath.Join(dir, "root"), clean: filepath.Join(dir, "clean"), N: n}
	if err := hosttest.Synth(h.clean, n); err != nil {
		return nil, err
	}
	cfg := filepath.Join(h.clean, "etc/rdma/rdmad.toml")
	if err := os.MkdirAll(filepath.Dir(cfg), 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(cfg, []byte(hosttest.SynthPolicy), 0o644); err != nil {
		return nil, err
	}
	return h, h.Reset()
}

// Reset puts the kernel defaults back in configfs: the next pass is cold.
func (h *Host) Reset() error {
	for i := 0; i < h.N; i++ {
		for port := 1; port <= 2; port++ {
			dev := fmt.Sprintf("mlx5_%d", i)
			if err := os.WriteFile(h.path(host.ConfigfsPortPath(dev, port, "default_roce_mode")), []byte("RoCE v2\n"), 0o644); err != nil {
				if !os.IsNotExist(err) {
					return err
				}
				if err := os.RemoveAll(h.Root); err != nil {
					return err
				}
				return hosttest.CopyTree(h.clean, h.Root)
			}
			if err := os.WriteFile(h.path(host.ConfigfsPortPath(dev, port, "default_roce_tos")), []byte("0\n"), 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}

func (h *Host) path(rel string) string { return filepath.Join(h.Root, rel) }

// Remove deletes the generated trees.
func (h *Host) Remove() error { return os.RemoveAll(filepath.Dir(h.Root)) }

// Floor reads what a no-change RoCE pass must read (each port's link
// layer, mode and TOS) with bare open/read/close system calls, one after
// another: the least any program can do.
func (h *Host) Floor() error {
	var buf [64]byte
	for i := 0; i < h.N; i++ {
		dev := fmt.Sprintf("mlx5_%d", i)
		for port := 1; port <= 2; port++ {
			for _, rel := range []string{
				fmt.Sprintf("sys/class/infiniband/%s/ports/%d/link_layer", dev, port),
				host.ConfigfsPortPath(dev, port, "default_roce_mode"),
				host.ConfigfsPortPath(dev, port, "default_roce_tos"),
			} {
				fd, err := unix.Open(h.path(rel), unix.O_RDONLY, 0)
				if err != nil {
					return err
				}
				_, err = unix.Read(fd, buf[:])
				unix.Close(fd)
				if err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// FloorCold makes the system calls a cold RoCE pass needs, bare and one
// after another: per port, read link_layer, write the mode and the TOS the
// benchmark policy declares (as rdmad writes them: O_TRUNC, for fixture
// files), read both back. Reset the host before each run, as before a cold
// pass.
func (h *Host) FloorCold() error {
	var buf [64]byte
	read := func(rel string) error {
		fd, err := unix.Open(h.path(rel), unix.O_RDONLY, 0)
		if err != nil {
			return err
		}
		_, err = unix.Read(fd, buf[:])
		unix.Close(fd)
		return err
	}
	write := func(rel, value string) error {
		fd, err := unix.Open(h.path(rel), unix.O_WRONLY|unix.O_TRUNC, 0)
		if err != nil {
			return err
		}
		_, err = unix.Write(fd, []byte(value))
		unix.Close(fd)
		return err
	}
	for i := 0; i < h.N; i++ {
		dev := fmt.Sprintf("mlx5_%d", i)
		for port := 1; port <= 2; port++ {
			mode, tos := host.ConfigfsPortPath(dev, port, "default_roce_mode"), host.ConfigfsPortPath(dev, port, "default_roce_tos")
			for _, err := range []error{
				read(fmt.Sprintf("sys/class/infiniband/%s/ports/%d/link_layer", dev, port)),
				write(mode, "IB/RoCE v1"), write(tos, "106"),
				read(mode), read(tos),
			} {
				if err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// ManagedObjects is a GetManagedObjects reply as a godbus client stores it.
type ManagedObjects = map[dbus.ObjectPath]map[string]map[string]dbus.Variant

// GodbusFloor returns godbus's own work on a GetManagedObjects reply of
// objs, in process: what its unix transport does to send it (encode the
// body once to count the file descriptors in it, Message.CountFds, then
// EncodeTo), and what a client does with the bytes (DecodeMessage, then
// Store into the usual map of Variants). Nothing of rdmad or the bus
// daemon is in it: a round trip costs at least this.
func GodbusFloor(objs ManagedObjects) func() error {
	msg := &dbus.Message{Type: dbus.TypeMethodReply, Headers: map[dbus.HeaderField]dbus.Variant{
		dbus.FieldReplySerial: dbus.MakeVariant(uint32(1)),
		dbus.FieldSignature:   dbus.MakeVariant(dbus.SignatureOf(objs)),
	}, Body: []any{objs}}
	var buf bytes.Buffer
	return func() error {
		buf.Reset()
		if _, err := msg.CountFds(); err != nil {
			return err
		}
		if err := msg.EncodeTo(&buf, binary.LittleEndian); err != nil {
			return err
		}
		m, err := dbus.DecodeMessage(bytes.NewReader(buf.Bytes()))
		if err != nil {
			return err
		}
		var got ManagedObjects
		if err := dbus.Store(m.Body, &got); err != nil {
			return err
		}
		if len(got) != len(objs) {
			return fmt.Errorf("godbus floor: %d objects decoded of %d", len(got), len(objs))
		}
		return nil
	}
}

// ShellScript is the vendor procedure, per port: mkdir of the device's
// configfs directory, echo of mode and TOS, cat of both to check.
const ShellScript = `root=$1
for d in "$root"/sys/class/infiniband/*; do
  dev=${d##*/}
  for p in "$d"/ports/*; do
    n=${p##*/}
    c="$root/sys/kernel/config/rdma_cm/$dev"
    mkdir -p "$c"
    echo "IB/RoCE v1" > "$c/ports/$n/default_roce_mode"
    echo 106 > "$c/ports/$n/default_roce_tos"
    cat "$c/ports/$n/default_roce_mode" "$c/ports/$n/default_roce_tos" >/dev/null
  done
done
`

// Verify checks that every port holds the benchmark policy.
func (h *Host) Verify() error {
	for i := 0; i < h.N; i++ {
		dev := fmt.Sprintf("mlx5_%d", i)
		for port := 1; port <= 2; port++ {
			m, _ := os.ReadFile(h.path(host.ConfigfsPortPath(dev, port, "default_roce_mode")))
			t, _ := os.ReadFile(h.path(host.ConfigfsPortPath(dev, port, "default_roce_tos")))
			if strings.TrimSpace(string(m)) != "IB/RoCE v1" || strings.TrimSpace(string(t)) != "106" {
				return fmt.Errorf("%s port %d: mode %q tos %q", dev, port, m, t)
			}
		}
	}
	return nil
}

// Daemon is rdmad (service and bus server) on a private bus in this
// process, over a generated host.
type Daemon struct {
	Svc    *service.Service
	Conn   *dbus.Conn // the daemon's connection
	Client *dbus.Conn // a client's connection
	stop   func()
}

// StartDaemon starts rdmad in this process on the bus at addr (reads every
// device, as the daemon does) and connects a client.
func StartDaemon(h *Host, addr string) (*Daemon, error) {
	return StartDaemonKernel(h, addr, compose.Kernel{Modules: NoModprobe{}})
}

// StartDaemonKernel is StartDaemon with the kernel interfaces k.
func StartDaemonKernel(h *Host, addr string, k compose.Kernel) (*Daemon, error) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	svc, err := service.New(service.Options{Host: host.New(h.Root), Parts: compose.Parts(k), Log: log})
	if err != nil {
		return nil, err
	}
	conn, err := dbusapi.Dial(addr)
	if err != nil {
		return nil, err
	}
	srv, err := bus.New(conn, svc.Reconciler(), svc, allowAll{}, log)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { svc.Run(ctx); close(done) }()
	svc.Start()
	if err := svc.Idle(ctx); err != nil {
		cancel()
		return nil, err
	}
	if err := srv.RequestName(dbusapi.BusName); err != nil {
		cancel()
		return nil, err
	}
	client, err := dbusapi.Dial(addr)
	if err != nil {
		cancel()
		return nil, err
	}
	return &Daemon{Svc: svc, Conn: conn, Client: client, stop: func() {
		cancel()
		<-done
		srv.Close()
		client.Close()
		conn.Close()
	}}, nil
}

// Stop stops the daemon and closes its connections.
func (d *Daemon) Stop() { d.stop() }

// GetManagedObjects is one client round trip of ObjectManager.GetManagedObjects.
func (d *Daemon) GetManagedObjects() (int, error) {
	objs, err := d.ManagedObjects()
	return len(objs), err
}

// ManagedObjects is one client round trip of
// ObjectManager.GetManagedObjects, with the reply.
func (d *Daemon) ManagedObjects() (ManagedObjects, error) {
	var objs ManagedObjects
	err := d.Client.Object(dbusapi.BusName, dbusapi.RootPath).Call("org.freedesktop.DBus.ObjectManager.GetManagedObjects", 0).Store(&objs)
	return objs, err
}

// SetRoCE is one client round trip of Manager.SetRoCE on one port.
func (d *Daemon) SetRoCE(dev string, port uint32, tos int32) error {
	return d.Client.Object(dbusapi.BusName, dbusapi.RootPath).Call(dbusapi.ManagerIface+".SetRoCE", 0, dev, port, "", tos, false).Err
}

// ReadPorts is one client round trip of Manager.ReadPorts on every port;
// it returns how many ports it read.
func (d *Daemon) ReadPorts() (int, error) {
	var at uint64
	var ports map[dbus.ObjectPath]map[string]dbus.Variant
	err := d.Client.Object(dbusapi.BusName, dbusapi.RootPath).Call(dbusapi.ManagerIface+".ReadPorts", 0, "", uint32(0)).Store(&at, &ports)
	return len(ports), err
}

// NoModprobe loads nothing: the generated hosts list no modules.
type NoModprobe struct{}

// Load implements modules.Loader.
func (NoModprobe) Load(context.Context, []string) error { return nil }

// allowAll authorizes every call: the benchmark measures the work, not
// polkit (the bus tests exercise authorization).
type allowAll struct{}

func (allowAll) Authorize(context.Context, string, []string, bool) error { return nil }

// StormResult is what a boot storm measured.
type StormResult struct {
	Converged  time.Duration // from the last arrival's event to an idle, configured host
	MaxPerDev  int           // passes that configured the same device, at most
	Passes     int           // passes in all
	Configured int           // devices holding the policy at the end
}

// Storm makes the n devices of h arrive one by one within spread, each with
// its uevent (RequestDevice), into a running daemon service that started
// with none, as a host's SR-IOV functions appear at boot.
func Storm(h *Host, spread time.Duration) (StormResult, error) {
	var res StormResult
	if err := h.Reset(); err != nil {
		return res, err
	}
	class := filepath.Join(h.Root, host.ClassInfiniband)
	stash := filepath.Join(filepath.Dir(h.Root), "stash")
	if err := os.RemoveAll(stash); err != nil {
		return res, err
	}
	if err := os.Rename(class, stash); err != nil {
		return res, err
	}
	if err := os.MkdirAll(class, 0o755); err != nil {
		return res, err
	}
	defer func() {
		// Devices that have not arrived (a storm cut short) go back: the
		// host ends as it began.
		names, _ := os.ReadDir(stash)
		for _, e := range names {
			os.Rename(filepath.Join(stash, e.Name()), filepath.Join(class, e.Name()))
		}
		os.Remove(stash)
	}()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	svc, err := service.New(service.Options{Host: host.New(h.Root), Parts: compose.Parts(compose.Kernel{Modules: NoModprobe{}}), Log: log})
	if err != nil {
		return res, err
	}
	var mu sync.Mutex
	perDev := map[string]int{}
	svc.Reconciler().OnChange(func(ch reconcile.Change) {
		mu.Lock()
		res.Passes++
		for _, n := range ch.Updated {
			perDev[n]++
		}
		mu.Unlock()
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { svc.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	svc.Start()
	if err := svc.Idle(ctx); err != nil {
		return res, err
	}
	mu.Lock()
	res.Passes = 0
	mu.Unlock()
	start := time.Now()
	var last time.Time
	for i := 0; i < h.N; i++ {
		// Arrival i at i/N of the spread: the last one at its end.
		if at := time.Duration(i) * spread / time.Duration(max(h.N-1, 1)); time.Since(start) < at {
			time.Sleep(at - time.Since(start))
		}
		name := fmt.Sprintf("mlx5_%d", i)
		if err := os.Rename(filepath.Join(stash, name), filepath.Join(class, name)); err != nil {
			return res, err
		}
		svc.RequestDevice(name)
		last = time.Now()
	}
	if err := svc.Idle(ctx); err != nil {
		return res, err
	}
	res.Converged = time.Since(last)
	mu.Lock()
	for _, c := range perDev {
		res.MaxPerDev = max(res.MaxPerDev, c)
	}
	mu.Unlock()
	for i := 0; i < h.N; i++ {
		if tosHolds(svc.Reconciler().DeviceStates([]string{fmt.Sprintf("mlx5_%d", i)})) {
			res.Configured++
		}
	}
	return res, nil
}

// tosHolds reports whether the declared TOS holds on every port of the
// device states given (one device).
func tosHolds(states []reconcile.DeviceState) bool {
	if len(states) != 1 || len(states[0].Ports) == 0 {
		return false
	}
	for _, p := range states[0].Ports {
		held := false
		for _, r := range p.Records {
			held = held || (r.Setting.Key == config.KeyRoCETOS && r.State == reconcile.Holds)
		}
		if !held {
			return false
		}
	}
	return true
}
