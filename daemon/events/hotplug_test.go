package events

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/daemon/reconcile"
	"github.com/rdmad/rdmad/daemon/service"
)

// chanReader is the test seam of a uevent socket: each value sent on msgs
// is one datagram or one read error.
type chanReader struct {
	msgs   chan readResult
	closed chan struct{}
	once   sync.Once
}

type readResult struct {
	b   []byte
	err error
}

func newChanReader(n int) *chanReader {
	return &chanReader{msgs: make(chan readResult, n), closed: make(chan struct{})}
}

func (c *chanReader) ReadMessage() ([]byte, error) {
	select {
	case m := <-c.msgs:
		return m.b, m.err
	case <-c.closed:
		return nil, io.EOF
	}
}

func (c *chanReader) isClosed() bool {
	select {
	case <-c.closed:
		return true
	default:
		return false
	}
}

func (c *chanReader) Close() error {
	c.once.Do(func() { close(c.closed) })
	return nil
}

// signalled forwards requests to the service and reports each on a channel,
// so tests know a request was made before waiting for the queue to drain.
type signalled struct {
	svc *service.Service
	ch  chan string
	n   atomic.Int64
}

func (s *signalled) RequestAll() {
	s.svc.RequestAll()
	s.n.Add(1)
	s.ch <- "*"
}

func (s *signalled) RequestDevice(name string) {
	s.svc.RequestDevice(name)
	s.n.Add(1)
	s.ch <- "device:" + name
}

func (s *signalled) RequestNetdev(name string) {
	s.svc.RequestNetdev(name)
	s.n.Add(1)
	s.ch <- "netdev:" + name
}

type liveHost struct {
	root   string
	h      *host.Host
	svc    *service.Service
	rec    *reconcile.Reconciler
	req    *signalled
	reader *chanReader
	ctx    context.Context
}

const roceConfig = `
[modules]
enable = false

[[roce]]
device = "mlx5_*"
mode = "v1"
tos = 106
`

// startLive copies the mlx5 fixture, starts the service and a uevent source
// reading from a channel. before runs before the service starts.
func startLive(t *testing.T, before func(root string), onChange func(reconcile.Change)) *liveHost {
	t.Helper()
	root := hosttest.Copy(t, "mlx5")
	writeFile(t, filepath.Join(root, "etc/rdma/rdmad.toml"), roceConfig)
	if before != nil {
		before(root)
	}
	h := host.New(root)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	svc, err := service.New(service.Options{Host: h, Parts: serviceParts, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	rec := svc.Reconciler()
	if onChange != nil {
		rec.OnChange(onChange)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // failure guard only
	l := &liveHost{root: root, h: h, svc: svc, rec: rec, ctx: ctx,
		req: &signalled{svc: svc, ch: make(chan string, 1024)}, reader: newChanReader(1024)}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); svc.Run(ctx) }()
	src := &UeventSource{Open: func() (MessageReader, error) { return l.reader, nil }, Req: l.req, Log: log,
		Retry: func(ctx context.Context) bool { return ctx.Err() == nil }}
	go func() { defer wg.Done(); src.Run(ctx) }()
	t.Cleanup(func() { cancel(); wg.Wait() })
	return l
}

func writeFile(t testing.TB, name, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// inject sends raw datagrams and waits until the source turned each into a
// request and the service has finished the resulting passes.
func (l *liveHost) inject(t *testing.T, msgs ...[]byte) []string {
	t.Helper()
	for _, m := range msgs {
		l.reader.msgs <- readResult{b: m}
	}
	var got []string
	for range msgs {
		select {
		case r := <-l.req.ch:
			got = append(got, r)
		case <-l.ctx.Done():
			t.Fatalf("no request after injected uevent (got %v)", got)
		}
	}
	if err := l.svc.Idle(l.ctx); err != nil {
		t.Fatalf("service not idle: %v", err)
	}
	return got
}

func (l *liveHost) read(t *testing.T, rel string) string {
	t.Helper()
	s, err := l.h.ReadString(rel)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(s)
}

func (l *liveHost) devices() string {
	return strings.Join(l.rec.Summary().Devices, " ")
}

// unplug moves a device's class link (and configfs dir) out of sight, as
// the kernel does on removal; the configfs values are reset to defaults.
func unplug(t *testing.T, root, dev string) string {
	t.Helper()
	stash := filepath.Join(root, "stash-"+dev)
	if err := os.Rename(filepath.Join(root, host.ClassInfiniband, dev), stash); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(root, host.ConfigfsRdmaCM, dev, "ports/1/default_roce_mode"), "RoCE v2\n")
	writeFile(t, filepath.Join(root, host.ConfigfsRdmaCM, dev, "ports/1/default_roce_tos"), "0\n")
	return stash
}

func TestHotplugArrivalRemovalRename(t *testing.T) {
	var stash string
	l := startLive(t, func(root string) { stash = unplug(t, root, "mlx5_0") }, nil)
	l.svc.RequestAll()
	if err := l.svc.Idle(l.ctx); err != nil {
		t.Fatal(err)
	}
	if got := l.devices(); got != "mlx5_1" {
		t.Fatalf("initial devices = %q", got)
	}
	mode0 := host.ConfigfsPortPath("mlx5_0", 1, "default_roce_mode")
	tos0 := host.ConfigfsPortPath("mlx5_0", 1, "default_roce_tos")
	if got := l.read(t, mode0); got != "RoCE v2" {
		t.Fatalf("absent device was configured: %q", got)
	}

	// Arrival: the device shows up, the kernel says so, policy is applied.
	if err := os.Rename(stash, filepath.Join(l.root, host.ClassInfiniband, "mlx5_0")); err != nil {
		t.Fatal(err)
	}
	got := l.inject(t, uevent("add", ibPath+"mlx5_0", "SUBSYSTEM=infiniband", "NAME=mlx5_0", "SEQNUM=1"))
	if strings.Join(got, " ") != "device:mlx5_0" {
		t.Errorf("requests = %v", got)
	}
	if m, tos := l.read(t, mode0), l.read(t, tos0); m != "IB/RoCE v1" || tos != "106" {
		t.Errorf("after add: mode %q tos %q", m, tos)
	}
	if st := l.rec.DeviceStates([]string{"mlx5_0"}); len(st) != 1 || observedText(st[0].Ports[0], "roce_mode") != "IB/RoCE v1" {
		t.Errorf("state after add: %+v", st)
	}

	// Removal: gone from the state.
	unplug(t, l.root, "mlx5_0")
	l.inject(t, uevent("remove", ibPath+"mlx5_0", "SUBSYSTEM=infiniband", "NAME=mlx5_0", "SEQNUM=2"))
	if got := l.devices(); got != "mlx5_1" {
		t.Errorf("after remove: devices %q", got)
	}

	// Rename mlx5_1 -> mlx5_9: both names are read again (the old one
	// drops, the new one appears) and the selector "mlx5_*" still matches,
	// so the device keeps its policy under the new name.
	if err := os.Rename(filepath.Join(l.root, host.ClassInfiniband, "mlx5_1"), filepath.Join(l.root, host.ClassInfiniband, "mlx5_9")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(l.root, host.ConfigfsRdmaCM, "mlx5_9/ports/1/default_roce_mode"), "RoCE v2\n")
	writeFile(t, filepath.Join(l.root, host.ConfigfsRdmaCM, "mlx5_9/ports/1/default_roce_tos"), "0\n")
	got = l.inject(t, uevent("move", ibPath+"mlx5_9", "SUBSYSTEM=infiniband", "NAME=mlx5_9", "DEVPATH_OLD="+ibPath+"mlx5_1"))
	if strings.Join(got, " ") != "device:mlx5_9" {
		t.Errorf("rename requests = %v", got)
	}
	if got := l.devices(); got != "mlx5_9" {
		t.Errorf("after rename: devices %q", got)
	}
	if m := l.read(t, host.ConfigfsPortPath("mlx5_9", 1, "default_roce_mode")); m != "IB/RoCE v1" {
		t.Errorf("renamed device mode %q", m)
	}
}

// TestBurstCoalesces proves 500 uevents for one device cost at most two
// passes: the first pass is held open (its state listener blocks) until all
// 500 requests have been made, so every later one lands in the pending set.
func TestBurstCoalesces(t *testing.T) {
	var passes atomic.Int64
	release := make(chan struct{})
	l := startLive(t, nil, func(reconcile.Change) {
		if passes.Add(1) == 1 {
			<-release
		}
	})
	const burst = 500
	msg := uevent("add", ibPath+"mlx5_0", "SUBSYSTEM=infiniband", "NAME=mlx5_0")
	for i := 0; i < burst; i++ {
		l.reader.msgs <- readResult{b: msg}
	}
	for i := 0; i < burst; i++ {
		select {
		case <-l.req.ch:
		case <-l.ctx.Done():
			t.Fatalf("only %d of %d requests made", i, burst)
		}
	}
	close(release)
	if err := l.svc.Idle(l.ctx); err != nil {
		t.Fatal(err)
	}
	if n := passes.Load(); n < 1 || n > 2 {
		t.Fatalf("%d uevents caused %d passes, want 1 or 2", burst, n)
	}
	if m := l.read(t, host.ConfigfsPortPath("mlx5_0", 1, "default_roce_mode")); m != "IB/RoCE v1" {
		t.Errorf("mode %q", m)
	}
}

func TestOverflowRescansAndKeepsReading(t *testing.T) {
	l := startLive(t, nil, nil)
	l.reader.msgs <- readResult{err: fmt.Errorf("events: uevent: %w", ErrOverflow)}
	select {
	case r := <-l.req.ch:
		if r != "*" {
			t.Fatalf("overflow asked for %q, want a full rescan", r)
		}
	case <-l.ctx.Done():
		t.Fatal("no rescan after overflow")
	}
	// The socket keeps being read after an overflow.
	got := l.inject(t, uevent("add", ibPath+"mlx5_1", "SUBSYSTEM=infiniband", "NAME=mlx5_1"))
	if strings.Join(got, " ") != "device:mlx5_1" {
		t.Errorf("after overflow: %v", got)
	}
}

func TestFailedSocketIsReopenedWithRescan(t *testing.T) {
	rec := &recorder{}
	first, second := newChanReader(4), newChanReader(4)
	opens := make(chan struct{}, 4)
	readers := []*chanReader{first, second}
	var n atomic.Int64
	src := &UeventSource{
		Open: func() (MessageReader, error) {
			i := n.Add(1) - 1
			opens <- struct{}{}
			if i == 1 {
				return nil, errors.New("transient")
			}
			return readers[min(i/2, 1)], nil
		},
		Req:   rec,
		Log:   slog.New(slog.NewTextHandler(io.Discard, nil)),
		Retry: func(ctx context.Context) bool { return ctx.Err() == nil },
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan struct{})
	go func() { src.Run(ctx); close(done) }()
	first.msgs <- readResult{err: errors.New("socket broke")}
	second.msgs <- readResult{b: uevent("add", ibPath+"mlx5_0", "SUBSYSTEM=infiniband", "NAME=mlx5_0")}
	for i := 0; i < 3; i++ {
		select {
		case <-opens:
		case <-ctx.Done():
			t.Fatal("socket not reopened")
		}
	}
	// Wait for the routed message, then stop.
	for rec.got() != "* device:mlx5_0" {
		if ctx.Err() != nil {
			t.Fatalf("requests = %q, want a rescan then the device", rec.got())
		}
		runtime.Gosched()
	}
	cancel()
	<-done
}

// BenchmarkUeventBurstToIdle measures a burst of 100 uevents for one device
// through the source and the service queue until the host is reconciled;
// passes/op shows the coalescing.
func BenchmarkUeventBurstToIdle(b *testing.B) {
	root := hosttest.Copy(b, "mlx5")
	writeFile(b, filepath.Join(root, "etc/rdma/rdmad.toml"), roceConfig)
	h := host.New(root)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	svc, err := service.New(service.Options{Host: h, Parts: serviceParts, Log: log})
	if err != nil {
		b.Fatal(err)
	}
	var passes atomic.Int64
	svc.Reconciler().OnChange(func(reconcile.Change) { passes.Add(1) })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go svc.Run(ctx)
	reader := newChanReader(128)
	counted := &countingRequester{next: svc, ch: make(chan struct{}, 128)}
	go (&UeventSource{Open: func() (MessageReader, error) { return reader, nil }, Req: counted, Log: log}).Run(ctx)
	msg := uevent("add", ibPath+"mlx5_0", "SUBSYSTEM=infiniband", "NAME=mlx5_0")
	const burst = 100
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j := 0; j < burst; j++ {
			reader.msgs <- readResult{b: msg}
		}
		for j := 0; j < burst; j++ {
			<-counted.ch
		}
		if err := svc.Idle(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(passes.Load())/float64(b.N), "passes/op")
}

type countingRequester struct {
	next Requester
	ch   chan struct{}
}

func (c *countingRequester) RequestAll() { c.next.RequestAll(); c.ch <- struct{}{} }

func (c *countingRequester) RequestDevice(name string) {
	c.next.RequestDevice(name)
	c.ch <- struct{}{}
}

func (c *countingRequester) RequestNetdev(name string) {
	c.next.RequestNetdev(name)
	c.ch <- struct{}{}
}

// observedText is the kernel's value of a port's setting as recorded.
func observedText(p reconcile.PortState, setting string) string {
	for _, r := range p.Records {
		if r.Setting.Name == setting {
			return reconcile.Text(r.Observed)
		}
	}
	return ""
}
