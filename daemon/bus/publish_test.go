package bus_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/rdmad/rdmad/daemon/compose"
	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/daemon/links/linkstest"
	"github.com/rdmad/rdmad/daemon/netns/netnstest"
	"github.com/rdmad/rdmad/dbusapi"
	"github.com/rdmad/rdmad/dbusapi/client"
	"github.com/rdmad/rdmad/test/bustest"
)

// synthHost generates the synthetic SR-IOV host of n dual-port devices
// (on tmpfs when there is one, as sysfs and configfs are) with a policy
// setting TOS tos on every port.
func synthHost(t *testing.T, n, tos int) string {
	t.Helper()
	base := os.TempDir()
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		base = "/dev/shm"
	}
	dir, err := os.MkdirTemp(base, "rdmad-bus-synth-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	root := filepath.Join(dir, "root")
	if err := hosttest.Synth(root, n); err != nil {
		t.Fatal(err)
	}
	writePolicy(t, root, tos)
	return root
}

func writePolicy(t *testing.T, root string, tos int) {
	t.Helper()
	cfg := fmt.Sprintf("[modules]\nenable = false\n\n[[roce]]\ndevice = \"mlx5_*\"\ntos = %d\n", tos)
	p := filepath.Join(root, "etc/rdma/rdmad.toml")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
}

// tosWatcher follows PropertiesChanged of RoCETOS as a client sees them:
// the last value each port's signals gave.
type tosWatcher struct {
	mu   sync.Mutex
	last map[dbus.ObjectPath]int32
	seen int
}

func watchTOS(t *testing.T, addr string) *tosWatcher {
	t.Helper()
	conn := dialT(t, addr)
	if err := conn.AddMatchSignal(dbus.WithMatchInterface("org.freedesktop.DBus.Properties"), dbus.WithMatchMember("PropertiesChanged"),
		dbus.WithMatchSender(dbusapi.BusName)); err != nil {
		t.Fatal(err)
	}
	ch := make(chan *dbus.Signal, 1<<16) // never full: godbus delivers out of order to a full channel
	conn.Signal(ch)
	w := &tosWatcher{last: map[dbus.ObjectPath]int32{}}
	go func() {
		for s := range ch {
			if len(s.Body) < 2 {
				continue
			}
			changed, _ := s.Body[1].(map[string]dbus.Variant)
			if v, ok := changed["RoCETOS"]; ok {
				w.mu.Lock()
				w.last[s.Path] = v.Value().(int32)
				w.seen++
				w.mu.Unlock()
			}
		}
	}()
	return w
}

// ports says how many ports the signals last gave tos, and how many
// RoCETOS changes were seen in all.
func (w *tosWatcher) ports(tos int32) (n, seen int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, v := range w.last {
		if v == tos {
			n++
		}
	}
	return n, w.seen
}

// appliedWithin waits until every port of the n-device host holds tos in
// configfs, at most limit; it reports how long that took.
func appliedWithin(t *testing.T, root string, n, tos int, limit time.Duration) time.Duration {
	t.Helper()
	t0 := time.Now()
	want := fmt.Sprint(tos)
	next := 0 // ports found applied so far, in order
	for {
		for next < 2*n {
			dev, port := fmt.Sprintf("mlx5_%d", next/2), next%2+1
			b, _ := os.ReadFile(filepath.Join(root, host.ConfigfsPortPath(dev, port, "default_roce_tos")))
			if strings.TrimSpace(string(b)) != want {
				break
			}
			next++
		}
		if next == 2*n {
			return time.Since(t0)
		}
		if time.Since(t0) > limit {
			t.Fatalf("TOS %d reached %d of %d ports within %s", tos, next, 2*n, limit)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A bus that does not read (dbus-daemon stopped) holds up no pass and no
// property read: on the 1,024-device SR-IOV host two policy changes in a
// row, each changing all 2,048 ports (far more signals than a socket
// buffer holds), are both applied to configfs, each within a second,
// while the daemon's signals wait; once the bus runs again the signals
// describe the final state.
func TestStoppedBusHoldsUpNoPass(t *testing.T) {
	if testing.Short() {
		t.Skip("generates a 1,024-device host")
	}
	const n = 1024
	addr, busProc := bustest.StartProcess(t)
	root := synthHost(t, n, 100)
	d := startDaemon(t, addr, root)
	appliedWithin(t, root, n, 100, time.Minute) // the first pass (setup)
	w := watchTOS(t, addr)
	// The limit is a second, as on a quiet machine, or three full passes
	// with the bus running, measured now, on a machine busy enough that a
	// pass takes longer: a stopped bus must not make passes any slower.
	t0 := time.Now()
	d.svc.ReconcileNow(t.Context())
	limit := max(limitFor(time.Second), 3*time.Since(t0))

	if err := busProc.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := true
	defer func() {
		if stopped {
			_ = busProc.Signal(syscall.SIGCONT)
		}
	}()
	for i, tos := range []int{101, 102} {
		writePolicy(t, root, tos)
		if err := d.svc.Reload(); err != nil {
			t.Fatal(err)
		}
		took := appliedWithin(t, root, n, tos, limit)
		t.Logf("change %d (TOS %d) applied to %d ports in %s with the bus stopped", i+1, tos, 2*n, took)
	}
	// Property reads are served from the objects, which follow the
	// state whatever the bus does.
	last := dbusapi.PortPath(fmt.Sprintf("mlx5_%d", n-1), 2)
	deadline := time.Now().Add(limit)
	for {
		type read struct {
			v   dbus.Variant
			err error
		}
		got := make(chan read, 1)
		go func() {
			v, err := d.srv.PropertyForTest(last, dbusapi.PortIface, "RoCETOS")
			got <- read{v, err}
		}()
		var r read
		select {
		case r = <-got:
		case <-time.After(limit):
			t.Fatalf("a property read did not return within %s with the bus stopped", limit)
		}
		if r.err != nil {
			t.Fatal(r.err)
		}
		if r.v.Value() == int32(102) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("RoCETOS of %s is %v with the bus stopped, want the state's 102", last, r.v.Value())
		}
		time.Sleep(5 * time.Millisecond)
	}

	if err := busProc.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	stopped = false
	deadline = time.Now().Add(time.Minute)
	for {
		got, seen := w.ports(102)
		if got == 2*n {
			t.Logf("after SIGCONT: %d RoCETOS changes signalled; every port's last one is 102", seen)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after SIGCONT the signals give %d of %d ports their final TOS 102 (%d changes seen)", got, 2*n, seen)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// limitFor is a time limit, scaled under the race detector.
func limitFor(d time.Duration) time.Duration { return d * raceSlowdown }

// busSignals records, in order, every signal rdmad sends, as a Gio
// ObjectManager client follows them.
type busSignals struct {
	mu   sync.Mutex
	sigs []*dbus.Signal
}

func recordSignals(t *testing.T, addr string) *busSignals {
	t.Helper()
	conn := dialT(t, addr)
	for _, member := range []string{"InterfacesAdded", "InterfacesRemoved", "PropertiesChanged", "SettingCorrected", "SettingContested"} {
		if err := conn.AddMatchSignal(dbus.WithMatchMember(member), dbus.WithMatchSender(dbusapi.BusName)); err != nil {
			t.Fatal(err)
		}
	}
	ch := make(chan *dbus.Signal, 1<<16) // never full: godbus delivers out of order to a full channel
	conn.Signal(ch)
	r := &busSignals{}
	go func() {
		for s := range ch {
			r.mu.Lock()
			r.sigs = append(r.sigs, s)
			r.mu.Unlock()
		}
	}()
	return r
}

// until waits for a signal for which match is true and returns every
// signal up to it.
func (r *busSignals) until(t *testing.T, what string, match func(*dbus.Signal) bool) []*dbus.Signal {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		r.mu.Lock()
		for i, s := range r.sigs {
			if match(s) {
				out := append([]*dbus.Signal(nil), r.sigs[:i+1]...)
				r.mu.Unlock()
				return out
			}
		}
		r.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatalf("no signal %s within 30s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A refused AddLink or SetNetnsMode never publishes the change it then
// withdraws: a client following the signals (as Gio's ObjectManager client
// does) sees no InterfacesAdded or PropertiesChanged carrying the refused
// link or mode, only what holds.
func TestRefusedCallsPublishNothingTheyWithdraw(t *testing.T) {
	dir := bustest.PublicDir(t)
	addr := privateBus(t, dir)
	root := fixture(t, dir, "mlx5", mlx5Config+"\n[netns]\nmode = \"shared\"\n")
	h := host.New(root)
	nl := &linkstest.Netlink{Host: h, AddErr: syscall.EOPNOTSUPP}
	nk := netnstest.New(config.NetnsShared)
	nk.Refuse(syscall.EIO)
	conn, err := dbusapi.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	startDaemonKernel(t, conn, h, compose.Kernel{Modules: &hosttest.Modprobe{Root: root}, Netns: nk, Links: nl})
	rec := recordSignals(t, addr)
	c, err := client.Connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	for i := 0; i < 5; i++ {
		if err := c.AddLink(t.Context(), "rxe9", "rxe", "ens1f0np0", false); client.ErrorName(err) != dbusapi.ErrFailed {
			t.Fatalf("AddLink with a kernel that refuses links: %v, want Failed", err)
		}
		if err := c.SetNetnsMode(t.Context(), "exclusive", false); client.ErrorName(err) != dbusapi.ErrFailed {
			t.Fatalf("SetNetnsMode with a kernel that refuses the switch: %v, want Failed", err)
		}
	}
	// A change that holds, after them: once its signal is in, every
	// signal of the refused calls would be too (one connection, in order).
	if err := c.SetRoCE(t.Context(), "mlx5_0", 1, "", 77, false); err != nil {
		t.Fatal(err)
	}
	port := dbusapi.PortPath("mlx5_0", 1)
	sigs := rec.until(t, "with RoCETOS 77", func(s *dbus.Signal) bool {
		if s.Path != port || s.Name != "org.freedesktop.DBus.Properties.PropertiesChanged" || len(s.Body) < 2 {
			return false
		}
		v, ok := s.Body[1].(map[string]dbus.Variant)["RoCETOS"]
		return ok && v.Value() == int32(77)
	})
	for _, s := range sigs {
		text := fmt.Sprint(s.Body)
		if strings.Contains(text, "rxe9") || strings.Contains(text, "exclusive") || strings.Contains(string(s.Path), "rxe9") {
			t.Errorf("a refused call was published: %s %s %s", s.Path, s.Name, text)
		}
	}
	if got := managerProp(t, c.Conn(), "NetnsMode"); got != "shared" {
		t.Errorf("NetnsMode = %v after the refused switches", got)
	}
	if got := managerProp(t, c.Conn(), "Links").([][]any); len(got) != 0 {
		t.Errorf("Links = %v after the refused AddLink", got)
	}
}
