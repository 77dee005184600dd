package events

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/rdmad/rdmad/daemon/host"
)

// nlAttr renders one netlink attribute, padded as the kernel pads it (the
// encoder of every request rdmad sends).
func nlAttr(typ uint16, val []byte) []byte { return nl.NewRtAttr(int(typ), val).Serialize() }

func attrU32(typ uint16, v uint32) []byte {
	return nlAttr(typ, binary.NativeEndian.AppendUint32(nil, v))
}

func attrStr(typ uint16, s string) []byte { return nlAttr(typ, append([]byte(s), 0)) }

// nlMsg renders one netlink message of type typ around attrs.
func nlMsg(typ uint16, attrs ...[]byte) []byte {
	body := bytes.Join(attrs, nil)
	b := make([]byte, unix.SizeofNlMsghdr, unix.SizeofNlMsghdr+len(body))
	binary.NativeEndian.PutUint32(b[0:4], uint32(unix.SizeofNlMsghdr+len(body)))
	binary.NativeEndian.PutUint16(b[4:6], typ)
	return append(b, body...)
}

// Kernel-shaped monitor messages, attributes in the order nldev.c puts them
// (rdma_nl_notify_event: fill_nldev_handle or fill_mon_netdev_association,
// then the event type).
func monRegister(idx uint32, name string) []byte {
	return nlMsg(rdmaNLType(nldevCmdMonitor), attrU32(nldevAttrDevIndex, idx), attrStr(nldevAttrDevName, name),
		nlAttr(nldevAttrEventType, []byte{byte(MonitorRegister)}))
}

func monUnregister(idx uint32, name string) []byte {
	return nlMsg(rdmaNLType(nldevCmdMonitor), attrU32(nldevAttrDevIndex, idx), attrStr(nldevAttrDevName, name),
		nlAttr(nldevAttrEventType, []byte{byte(MonitorUnregister)}))
}

func monRename(idx uint32, name string) []byte {
	return nlMsg(rdmaNLType(nldevCmdMonitor), attrU32(nldevAttrDevIndex, idx), attrStr(nldevAttrDevName, name),
		nlAttr(nldevAttrEventType, []byte{byte(MonitorRename)}))
}

func monNetdev(t MonitorEventType, idx uint32, name string, port, ndev uint32, ndevName string) []byte {
	attrs := [][]byte{attrU32(nldevAttrDevIndex, idx), attrStr(nldevAttrDevName, name), attrU32(nldevAttrPortIndex, port)}
	if ndevName != "" {
		attrs = append(attrs, attrU32(nldevAttrNdevIndex, ndev), attrStr(nldevAttrNdevName, ndevName))
	}
	attrs = append(attrs, nlAttr(nldevAttrEventType, []byte{byte(t)}))
	return nlMsg(rdmaNLType(nldevCmdMonitor), attrs...)
}

func TestParseMonitor(t *testing.T) {
	cases := []struct {
		name string
		b    []byte
		want []MonitorEvent
		err  error
	}{
		{"register", monRegister(3, "rxe1"),
			[]MonitorEvent{{Type: MonitorRegister, HasDevice: true, DevIndex: 3, DevName: "rxe1"}}, nil},
		{"unregister", monUnregister(3, "rxe1"),
			[]MonitorEvent{{Type: MonitorUnregister, HasDevice: true, DevIndex: 3, DevName: "rxe1"}}, nil},
		{"netdev attach", monNetdev(MonitorNetdevAttach, 3, "rxe1", 1, 7, "veth2"),
			[]MonitorEvent{{Type: MonitorNetdevAttach, HasDevice: true, DevIndex: 3, DevName: "rxe1", Port: 1, NetdevIndex: 7, NetdevName: "veth2"}}, nil},
		{"netdev detach without netdev", monNetdev(MonitorNetdevDetach, 3, "rxe1", 1, 0, ""),
			[]MonitorEvent{{Type: MonitorNetdevDetach, HasDevice: true, DevIndex: 3, DevName: "rxe1", Port: 1}}, nil},
		{"rename", monRename(3, "rxe5"),
			[]MonitorEvent{{Type: MonitorRename, HasDevice: true, DevIndex: 3, DevName: "rxe5"}}, nil},
		{"netdev rename names no device",
			nlMsg(rdmaNLType(nldevCmdMonitor), attrU32(nldevAttrNdevIndex, 4), attrStr(nldevAttrNdevName, "myeth2"),
				nlAttr(nldevAttrEventType, []byte{byte(MonitorNetdevRename)})),
			[]MonitorEvent{{Type: MonitorNetdevRename, NetdevIndex: 4, NetdevName: "myeth2"}}, nil},
		{"attach for a netdev in another namespace: type only",
			nlMsg(rdmaNLType(nldevCmdMonitor), nlAttr(nldevAttrEventType, []byte{byte(MonitorNetdevAttach)})),
			[]MonitorEvent{{Type: MonitorNetdevAttach}}, nil},
		{"two messages in one datagram, other types skipped",
			bytes.Join([][]byte{monRegister(1, "a"), nlMsg(unix.NLMSG_NOOP), nlMsg(rdmaNLType(nldevCmdSysGet), attrU32(1, 1)), monUnregister(1, "a")}, nil),
			[]MonitorEvent{{Type: MonitorRegister, HasDevice: true, DevIndex: 1, DevName: "a"}, {Type: MonitorUnregister, HasDevice: true, DevIndex: 1, DevName: "a"}}, nil},
		{"unknown attributes and attribute flags", nlMsg(rdmaNLType(nldevCmdMonitor), nlAttr(200, []byte{1, 2, 3}),
			nlAttr(nldevAttrDevIndex|unix.NLA_F_NET_BYTEORDER, []byte{9, 0, 0, 0}), nlAttr(nldevAttrEventType, []byte{byte(MonitorRegister)})),
			[]MonitorEvent{{Type: MonitorRegister, HasDevice: true, DevIndex: binary.NativeEndian.Uint32([]byte{9, 0, 0, 0})}}, nil},
		{"unusable names dropped", bytes.Join([][]byte{monRegister(1, "../etc"), monRegister(2, ""), monRegister(3, strings.Repeat("x", 64)),
			monRegister(4, "a b"), monRegister(5, "\xff")}, nil),
			[]MonitorEvent{{Type: MonitorRegister, HasDevice: true, DevIndex: 1}, {Type: MonitorRegister, HasDevice: true, DevIndex: 2},
				{Type: MonitorRegister, HasDevice: true, DevIndex: 3}, {Type: MonitorRegister, HasDevice: true, DevIndex: 4},
				{Type: MonitorRegister, HasDevice: true, DevIndex: 5}}, nil},
		{"overrun", bytes.Join([][]byte{monRegister(1, "a"), nlMsg(unix.NLMSG_OVERRUN)}, nil),
			[]MonitorEvent{{Type: MonitorRegister, HasDevice: true, DevIndex: 1, DevName: "a"}}, ErrOverflow},
		{"short header", []byte{1, 2, 3}, nil, ErrMalformed},
		{"length past the end", monRegister(1, "a")[:20], nil, ErrMalformed},
		{"attribute past the end", func() []byte {
			b := monRegister(1, "a")
			binary.NativeEndian.PutUint16(b[16:18], 200)
			return b
		}(), nil, ErrMalformed},
		{"event type missing", nlMsg(rdmaNLType(nldevCmdMonitor), attrU32(nldevAttrDevIndex, 1)), nil, ErrMalformed},
		{"index of 2 bytes", nlMsg(rdmaNLType(nldevCmdMonitor), nlAttr(nldevAttrDevIndex, []byte{1, 0}),
			nlAttr(nldevAttrEventType, []byte{0})), nil, ErrMalformed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseMonitor(c.b)
			if !errors.Is(err, c.err) {
				t.Fatalf("err = %v, want %v", err, c.err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("events =\n%+v\nwant\n%+v", got, c.want)
			}
		})
	}
}

func TestMonitorModeProbeReply(t *testing.T) {
	// SYS_GET replies: 6.12 sends MONITOR_MODE=1 among the others, 6.1 not.
	v612 := bytes.Join([][]byte{nlAttr(66, []byte{1}), nlAttr(96, []byte{0}), nlAttr(nldevSysAttrMonitorMode, []byte{1}), nlAttr(90, []byte{1})}, nil)
	v61 := bytes.Join([][]byte{nlAttr(66, []byte{1}), nlAttr(90, []byte{1})}, nil)
	if on, err := monitorMode(v612); err != nil || !on {
		t.Errorf("6.12 reply: %v %v", on, err)
	}
	if on, err := monitorMode(v61); err != nil || on {
		t.Errorf("6.1 reply: %v %v", on, err)
	}
	if _, err := monitorMode(v612[:10]); !errors.Is(err, ErrMalformed) {
		t.Errorf("truncated reply: %v", err)
	}
}

func TestMonitorRouting(t *testing.T) {
	cases := []struct {
		name  string
		known map[uint32]string
		evs   []MonitorEvent
		want  string
		empty bool // the last event removed the last known device
	}{
		{"register and attach", map[uint32]string{},
			[]MonitorEvent{{Type: MonitorRegister, HasDevice: true, DevIndex: 2, DevName: "rxe1"},
				{Type: MonitorNetdevAttach, HasDevice: true, DevIndex: 2, DevName: "rxe1", Port: 1, NetdevName: "veth2"}},
			"device:rxe1 device:rxe1", false},
		{"unregister names the device", map[uint32]string{2: "rxe1", 3: "rxe2"},
			[]MonitorEvent{{Type: MonitorUnregister, HasDevice: true, DevIndex: 2, DevName: "rxe1"}}, "device:rxe1", false},
		{"unregister of the last known device", map[uint32]string{2: "rxe1"},
			[]MonitorEvent{{Type: MonitorUnregister, HasDevice: true, DevIndex: 2, DevName: "rxe1"}}, "device:rxe1", true},
		{"unregister without a name resolves the index", map[uint32]string{2: "rxe1", 3: "rxe2"},
			[]MonitorEvent{{Type: MonitorUnregister, HasDevice: true, DevIndex: 3}}, "device:rxe2", false},
		{"unregister of an unknown index without a name", map[uint32]string{2: "rxe1"},
			[]MonitorEvent{{Type: MonitorUnregister, HasDevice: true, DevIndex: 9}}, "*", false},
		{"rename looks at the old and the new name", map[uint32]string{2: "rxe0"},
			[]MonitorEvent{{Type: MonitorRename, HasDevice: true, DevIndex: 2, DevName: "rxe5"},
				{Type: MonitorUnregister, HasDevice: true, DevIndex: 2}},
			"device:rxe0 device:rxe5 device:rxe5", true},
		{"rename of a device registered while listening", map[uint32]string{},
			[]MonitorEvent{{Type: MonitorRegister, HasDevice: true, DevIndex: 4, DevName: "mlx5_0"},
				{Type: MonitorRename, HasDevice: true, DevIndex: 4, DevName: "rocep8s0f0"}},
			"device:mlx5_0 device:mlx5_0 device:rocep8s0f0", false},
		{"rename of an unknown index: the old name is unknown", map[uint32]string{},
			[]MonitorEvent{{Type: MonitorRename, HasDevice: true, DevIndex: 4, DevName: "rxe5"},
				{Type: MonitorNetdevDetach, HasDevice: true, DevIndex: 4}},
			"* device:rxe5", false},
		{"attach without device (netdev in another namespace)", map[uint32]string{},
			[]MonitorEvent{{Type: MonitorNetdevAttach}}, "*", false},
		{"netdev rename: the devices on the new name", map[uint32]string{2: "rxe0"},
			[]MonitorEvent{{Type: MonitorNetdevRename, NetdevIndex: 5, NetdevName: "eth9"}}, "netdev:eth9", false},
		{"netdev rename without a usable name", map[uint32]string{2: "rxe0"},
			[]MonitorEvent{{Type: MonitorNetdevRename, NetdevIndex: 5}}, "*", false},
		{"event type of a newer kernel", map[uint32]string{2: "rxe0"},
			[]MonitorEvent{{Type: 42, HasDevice: true, DevIndex: 2, DevName: "rxe0"}}, "*", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec := &recorder{}
			m := &monitorRouter{names: c.known}
			var empty bool
			for _, ev := range c.evs {
				empty = m.route(ev, rec)
			}
			if rec.got() != c.want {
				t.Errorf("requests %q, want %q", rec.got(), c.want)
			}
			if empty != c.empty {
				t.Errorf("last device gone = %v, want %v", empty, c.empty)
			}
		})
	}
}

// monitorHarness runs an RDMAMonitorSource on injected sockets, device
// lists and ib_core presence.
type monitorHarness struct {
	t       *testing.T
	src     *RDMAMonitorSource
	rec     *recorder
	ready   atomic.Bool
	wake    chan struct{}
	opened  chan *chanReader
	probes  atomic.Int32
	mu      sync.Mutex
	devices map[uint32]string
	devErr  error
	logs    *bytes.Buffer
	logMu   *sync.Mutex
	ctx     context.Context
	cancel  context.CancelFunc
	done    chan struct{}

	// Set by answeredByTest: the test answers each Ready and Devices call.
	readyAnswers  chan bool
	deviceAnswers chan map[uint32]string
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// startMonitor starts the source; ready says whether ib_core is loaded;
// opts change the harness before the source runs.
func startMonitor(t *testing.T, ready, supported bool, devices map[uint32]string, opts ...func(*monitorHarness)) *monitorHarness {
	t.Helper()
	// Unbuffered wakes: a poke returns when the source took it, so tests
	// know where it is (production pokes without blocking, see WakeOn).
	h := &monitorHarness{t: t, rec: &recorder{}, wake: make(chan struct{}), opened: make(chan *chanReader, 8),
		devices: devices, logs: &bytes.Buffer{}, logMu: &sync.Mutex{}, done: make(chan struct{})}
	h.ready.Store(ready)
	h.src = &RDMAMonitorSource{
		Ready: h.ready.Load,
		Wake:  h.wake,
		Probe: func() (bool, error) { h.probes.Add(1); return supported, nil },
		Open: func() (MessageReader, error) {
			r := newChanReader(16)
			h.opened <- r
			return r, nil
		},
		Devices: func() (map[uint32]string, error) {
			h.mu.Lock()
			defer h.mu.Unlock()
			if h.devErr != nil {
				return nil, h.devErr
			}
			cp := map[uint32]string{}
			for k, v := range h.devices {
				cp[k] = v
			}
			return cp, nil
		},
		Req:   h.rec,
		Log:   slog.New(slog.NewTextHandler(lockedWriter{h.logMu, h.logs}, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Retry: func(ctx context.Context) bool { return ctx.Err() == nil },
	}
	for _, o := range opts {
		o(h)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // failure guard only
	h.ctx, h.cancel = ctx, cancel
	go func() { h.src.Run(ctx); close(h.done) }()
	t.Cleanup(func() { cancel(); <-h.done })
	return h
}

// answeredByTest makes Ready and Devices wait for the test's answer
// (answerReady, answerDevices), so the test knows which step of the source
// saw which state instead of racing it.
func answeredByTest(h *monitorHarness) {
	h.readyAnswers = make(chan bool)
	h.deviceAnswers = make(chan map[uint32]string)
	h.src.Ready = func() bool {
		select {
		case ready := <-h.readyAnswers:
			return ready
		case <-h.ctx.Done():
			return false
		}
	}
	h.src.Devices = func() (map[uint32]string, error) {
		select {
		case d := <-h.deviceAnswers:
			return d, nil
		case <-h.ctx.Done():
			return nil, h.ctx.Err()
		}
	}
}

// answerReady waits for the source to ask whether ib_core is loaded.
func (h *monitorHarness) answerReady(ready bool) {
	h.t.Helper()
	select {
	case h.readyAnswers <- ready:
	case r := <-h.opened:
		h.t.Fatalf("monitor socket opened (%p) instead of asking for ib_core; log:\n%s", r, h.log())
	case <-time.After(5 * time.Second):
		h.t.Fatalf("source does not ask whether ib_core is loaded; log:\n%s", h.log())
	}
}

// answerDevices waits for the source to list the devices.
func (h *monitorHarness) answerDevices(d map[uint32]string) {
	h.t.Helper()
	select {
	case h.deviceAnswers <- d:
	case <-time.After(5 * time.Second):
		h.t.Fatalf("source does not list the devices; log:\n%s", h.log())
	}
}

func (h *monitorHarness) setDevices(d map[uint32]string) {
	h.mu.Lock()
	h.devices = d
	h.mu.Unlock()
}

func (h *monitorHarness) log() string {
	h.logMu.Lock()
	defer h.logMu.Unlock()
	return h.logs.String()
}

func (h *monitorHarness) poke() {
	h.t.Helper()
	select {
	case h.wake <- struct{}{}:
	case <-time.After(5 * time.Second):
		h.t.Fatalf("source does not take wakes; log:\n%s", h.log())
	}
}

// socket waits for the source to open its next socket.
func (h *monitorHarness) socket() *chanReader {
	h.t.Helper()
	select {
	case r := <-h.opened:
		return r
	case <-time.After(5 * time.Second):
		h.t.Fatalf("monitor socket not opened; log:\n%s", h.log())
		return nil
	}
}

// noSocket checks that nothing opened a socket while the source handled
// the wakes so far: a poke is taken only once the source finished with the
// previous one.
func (h *monitorHarness) noSocket() {
	h.t.Helper()
	select {
	case h.wake <- struct{}{}:
	case r := <-h.opened:
		h.t.Fatalf("monitor socket opened (%p); log:\n%s", r, h.log())
	case <-time.After(5 * time.Second):
		h.t.Fatalf("source does not take wakes; log:\n%s", h.log())
	}
	select {
	case r := <-h.opened:
		h.t.Fatalf("monitor socket opened (%p); log:\n%s", r, h.log())
	default:
	}
}

// waitRequests waits until the requests are want.
func (h *monitorHarness) waitRequests(want string) {
	h.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for h.rec.got() != want {
		if time.Now().After(deadline) {
			h.t.Fatalf("requests %q, want %q; log:\n%s", h.rec.got(), want, h.log())
		}
		time.Sleep(time.Millisecond)
	}
}

func TestMonitorWaitsForIBCoreAndADevice(t *testing.T) {
	// Lock-step: the source asks the test whether ib_core is loaded and
	// which devices exist, so every answer reaches a known step.
	h := startMonitor(t, false, true, nil, answeredByTest)
	// ib_core not loaded: neither the first look nor wakes open anything
	// (that would load it). noSocket's wake is taken only once the source
	// is done with the previous answer.
	h.answerReady(false)
	for range 2 {
		h.noSocket()
		h.answerReady(false)
	}
	h.noSocket()
	if n := h.probes.Load(); n != 0 {
		t.Fatalf("probed %d times without ib_core", n)
	}
	// ib_core loaded but no device: the socket is opened, finds nothing to
	// follow and is closed again (it would pin ib_core).
	h.answerReady(true)
	r := h.socket()
	h.answerDevices(map[uint32]string{})
	select {
	case <-r.closed:
	case <-time.After(5 * time.Second):
		t.Fatalf("socket kept open without devices; log:\n%s", h.log())
	}
	// A device appears (the uevent source pokes): followed from now on.
	h.poke()
	h.answerReady(true)
	r = h.socket()
	h.answerDevices(map[uint32]string{1: "rxe0"})
	r.msgs <- readResult{b: monRename(1, "rxe5")}
	h.waitRequests("device:rxe0 device:rxe5")
	if r.isClosed() {
		t.Errorf("socket closed although a device exists; log:\n%s", h.log())
	}
	if !strings.Contains(h.log(), "following the RDMA netlink monitor") {
		t.Errorf("no info log when following:\n%s", h.log())
	}
}

func TestMonitorUnsupportedKernelLogsOnceAndStays(t *testing.T) {
	h := startMonitor(t, true, false, map[uint32]string{1: "rxe0"})
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(h.log(), "no RDMA netlink monitor") {
		if time.Now().After(deadline) {
			t.Fatalf("no info log on a kernel without the monitor:\n%s", h.log())
		}
		time.Sleep(time.Millisecond)
	}
	select {
	case <-h.opened:
		t.Fatal("socket opened on a kernel without the monitor")
	case <-h.done:
		t.Fatal("source returned before its context ended (RunAll would restart it and log an error)")
	case <-time.After(50 * time.Millisecond):
	}
	if n := strings.Count(h.log(), "level="); n != 1 {
		t.Errorf("%d log lines, want exactly one:\n%s", n, h.log())
	}
	if h.probes.Load() != 1 || h.rec.got() != "" {
		t.Errorf("probes %d, requests %q", h.probes.Load(), h.rec.got())
	}
}

func TestMonitorOverflowRescansAndRelearnsNames(t *testing.T) {
	h := startMonitor(t, true, true, map[uint32]string{1: "rxe0"})
	r := h.socket()
	// Missed while overflowing: rxe0 was renamed to rxe3 and rxe7 appeared.
	h.setDevices(map[uint32]string{1: "rxe3", 2: "rxe7"})
	r.msgs <- readResult{err: ErrOverflow}
	h.waitRequests("*")
	// The names learnt again after the overflow resolve the next rename.
	r.msgs <- readResult{b: monRename(2, "rxe8")}
	h.waitRequests("* device:rxe7 device:rxe8")
	select {
	case <-r.closed:
		t.Fatal("socket closed after an overflow")
	default:
	}
}

func TestMonitorBrokenSocketIsReopenedWithRescan(t *testing.T) {
	h := startMonitor(t, true, true, map[uint32]string{1: "rxe0"})
	r := h.socket()
	r.msgs <- readResult{err: errors.New("recvfrom: EBADF")}
	r2 := h.socket()
	h.waitRequests("*")
	r2.msgs <- readResult{b: monUnregister(1, "rxe0")}
	h.waitRequests("* device:rxe0")
}

func TestMonitorGarbageRescans(t *testing.T) {
	h := startMonitor(t, true, true, map[uint32]string{1: "rxe0"})
	r := h.socket()
	r.msgs <- readResult{b: append(monRegister(2, "rxe1"), 0xde, 0xad)}
	h.waitRequests("device:rxe1 *")
	r.msgs <- readResult{b: monNetdev(MonitorNetdevDetach, 2, "", 1, 0, "")}
	h.waitRequests("device:rxe1 * device:rxe1")
}

func TestMonitorReleasesSocketWithTheLastDevice(t *testing.T) {
	h := startMonitor(t, true, true, map[uint32]string{1: "rxe0", 2: "rxe1"})
	r := h.socket()
	h.setDevices(map[uint32]string{2: "rxe1"})
	r.msgs <- readResult{b: monUnregister(1, "rxe0")}
	h.waitRequests("device:rxe0")
	h.setDevices(map[uint32]string{})
	r.msgs <- readResult{b: monUnregister(2, "rxe1")}
	select {
	case <-r.closed:
	case <-time.After(5 * time.Second):
		t.Fatalf("socket (and so ib_core) held after the last device left; log:\n%s", h.log())
	}
	h.waitRequests("device:rxe0 device:rxe1")
	// A new device: a wake reopens it.
	h.setDevices(map[uint32]string{3: "siw0"})
	h.poke()
	r = h.socket()
	r.msgs <- readResult{b: monRename(3, "siw1")}
	h.waitRequests("device:rxe0 device:rxe1 device:siw0 device:siw1")
}

func TestMonitorKeepsSocketWhenTheKernelStillListsDevices(t *testing.T) {
	// The map missed a registration: the kernel's list decides.
	h := startMonitor(t, true, true, map[uint32]string{1: "rxe0"})
	r := h.socket()
	h.setDevices(map[uint32]string{5: "mlx5_0"})
	r.msgs <- readResult{b: monUnregister(1, "rxe0")}
	h.waitRequests("device:rxe0")
	r.msgs <- readResult{b: monRegister(6, "mlx5_1")}
	h.waitRequests("device:rxe0 device:mlx5_1")
	select {
	case <-r.closed:
		t.Fatal("socket closed although the kernel lists a device")
	default:
	}
}

func TestWakeOnPassesRequestsAndPokes(t *testing.T) {
	rec := &recorder{}
	wake := make(chan struct{}, 1)
	w := WakeOn(rec, wake)
	w.RequestDevice("rxe0")
	w.RequestAll() // the buffer holds one wake: never blocks
	w.RequestNetdev("veth0")
	if rec.got() != "device:rxe0 * netdev:veth0" {
		t.Errorf("requests %q", rec.got())
	}
	select {
	case <-wake:
	default:
		t.Error("no wake")
	}
}

// encodeMonitor renders ev as the kernel would.
func encodeMonitor(ev MonitorEvent) []byte {
	var attrs [][]byte
	if ev.HasDevice {
		attrs = append(attrs, attrU32(nldevAttrDevIndex, ev.DevIndex))
	}
	if ev.DevName != "" {
		attrs = append(attrs, attrStr(nldevAttrDevName, ev.DevName))
	}
	if ev.Port != 0 {
		attrs = append(attrs, attrU32(nldevAttrPortIndex, ev.Port))
	}
	if ev.NetdevIndex != 0 {
		attrs = append(attrs, attrU32(nldevAttrNdevIndex, ev.NetdevIndex))
	}
	if ev.NetdevName != "" {
		attrs = append(attrs, attrStr(nldevAttrNdevName, ev.NetdevName))
	}
	attrs = append(attrs, nlAttr(nldevAttrEventType, []byte{byte(ev.Type)}))
	return nlMsg(rdmaNLType(nldevCmdMonitor), attrs...)
}

// FuzzParseMonitor feeds arbitrary datagrams to the monitor parser and
// router (seed corpus: testdata/fuzz/FuzzParseMonitor, kernel-shaped
// messages of every event type). It must never panic; every name it returns
// or routes must be usable as a device name; and every event must survive
// encode -> parse unchanged.
func FuzzParseMonitor(f *testing.F) {
	f.Add(monRegister(1, "rxe0"))
	f.Add(bytes.Join([][]byte{monRename(1, "rxe5"), monNetdev(MonitorNetdevAttach, 2, "siw0", 1, 9, "veth8")}, nil))
	f.Fuzz(func(t *testing.T, data []byte) {
		evs, _ := ParseMonitor(data)
		rec := &recorder{}
		m := &monitorRouter{names: map[uint32]string{1: "rxe0", 2: "mlx5_0"}}
		for _, ev := range evs {
			for _, n := range []string{ev.DevName, ev.NetdevName} {
				if n != "" && deviceName([]byte(n)) != n {
					t.Fatalf("parser returned unusable name %q", n)
				}
			}
			again, err := ParseMonitor(encodeMonitor(ev))
			if err != nil || len(again) != 1 || again[0] != ev {
				t.Fatalf("round trip of %+v: %+v, %v", ev, again, err)
			}
			m.route(ev, rec)
		}
		for _, r := range rec.reqs {
			_, n, ok := strings.Cut(r, ":")
			if ok && (n == "" || deviceName([]byte(n)) != n) {
				t.Fatalf("routed unusable name %q", r)
			}
		}
	})
}

// TestMonitorRenameMovesDeviceInService runs the monitor source against the
// real service on a fixture host: a rename event (kernels after 6.12) is
// two device requests, old and new name, and that is enough for the
// service to drop the old name and configure the new one.
func TestMonitorRenameMovesDeviceInService(t *testing.T) {
	l := startLive(t, nil, nil)
	l.svc.RequestAll()
	if err := l.svc.Idle(l.ctx); err != nil {
		t.Fatal(err)
	}
	r := newChanReader(4)
	src := &RDMAMonitorSource{
		Ready:   func() bool { return true },
		Probe:   func() (bool, error) { return true, nil },
		Open:    func() (MessageReader, error) { return r, nil },
		Devices: func() (map[uint32]string, error) { return map[uint32]string{0: "mlx5_0", 1: "mlx5_1"}, nil },
		Req:     l.req,
		Log:     slog.New(slog.NewTextHandler(io.Discard, nil)),
		Retry:   func(ctx context.Context) bool { return ctx.Err() == nil },
	}
	ctx, cancel := context.WithCancel(l.ctx)
	done := make(chan struct{})
	go func() { src.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	// The kernel renames in place: same device, new name, rdma_cm values kept.
	if err := os.Rename(filepath.Join(l.root, host.ClassInfiniband, "mlx5_1"), filepath.Join(l.root, host.ClassInfiniband, "mlx5_9")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(l.root, host.ConfigfsRdmaCM, "mlx5_9/ports/1/default_roce_mode"), "RoCE v2\n")
	writeFile(t, filepath.Join(l.root, host.ConfigfsRdmaCM, "mlx5_9/ports/1/default_roce_tos"), "0\n")
	r.msgs <- readResult{b: monRename(1, "mlx5_9")}
	var got []string
	for len(got) < 2 {
		select {
		case req := <-l.req.ch:
			got = append(got, req)
		case <-l.ctx.Done():
			t.Fatalf("requests %v", got)
		}
	}
	if strings.Join(got, " ") != "device:mlx5_1 device:mlx5_9" {
		t.Errorf("requests %v, want the old then the new name", got)
	}
	if err := l.svc.Idle(l.ctx); err != nil {
		t.Fatal(err)
	}
	if d := l.devices(); d != "mlx5_0 mlx5_9" {
		t.Errorf("devices after rename: %q", d)
	}
	if m := l.read(t, host.ConfigfsPortPath("mlx5_9", 1, "default_roce_mode")); m != "IB/RoCE v1" {
		t.Errorf("renamed device mode %q", m)
	}
}

func TestMonitorFollowsWhenTheDeviceListFails(t *testing.T) {
	h := startMonitor(t, true, true, nil, func(h *monitorHarness) { h.devErr = errors.New("rdma dev show: EPERM") })
	r := h.socket()
	r.msgs <- readResult{b: monRegister(4, "mlx5_0")}
	r.msgs <- readResult{b: monRename(2, "rxe5")} // index 2 was never seen
	h.waitRequests("device:mlx5_0 *")
	select {
	case <-r.closed:
		t.Fatal("socket closed because the device list failed")
	default:
	}
	if !strings.Contains(h.log(), "listing RDMA devices failed") {
		t.Errorf("failure not logged:\n%s", h.log())
	}
}
