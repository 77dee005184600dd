package service

import (
	"context"
	"reflect"
	"sort"
	"sync"
	"testing"
	"time"
)

type pass struct {
	all     bool
	devices []string
}

func passOf(w Work) pass {
	p := pass{all: w.Full}
	for n := range w.Devices {
		p.devices = append(p.devices, n)
	}
	sort.Strings(p.devices)
	return p
}

// blockingRun records passes; each one announces itself on started and
// waits for release.
type blockingRun struct {
	started chan pass
	release chan struct{}

	mu   sync.Mutex
	done []pass
}

func newBlockingRun() *blockingRun {
	return &blockingRun{started: make(chan pass), release: make(chan struct{})}
}

func (b *blockingRun) run(_ context.Context, w Work) {
	p := passOf(w)
	b.started <- p
	<-b.release
	b.mu.Lock()
	b.done = append(b.done, p)
	b.mu.Unlock()
}

func (b *blockingRun) finished() []pass {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]pass(nil), b.done...)
}

func startQueue(t *testing.T, run func(context.Context, Work)) *Queue {
	t.Helper()
	q := NewQueue(0, run)
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { q.Run(ctx); close(stopped) }()
	t.Cleanup(func() { cancel(); <-stopped })
	return q
}

// Requests made while a pass runs collapse into exactly one more pass, and
// Idle returns only once that pass has finished.
func TestQueueCoalescesAndIdleWaitsForPasses(t *testing.T) {
	b := newBlockingRun()
	q := startQueue(t, b.run)

	q.Device("mlx5_1")
	if got := <-b.started; !reflect.DeepEqual(got, pass{false, []string{"mlx5_1"}}) {
		t.Fatalf("first pass %+v", got)
	}
	// The first pass is running: a burst of requests.
	for i := 0; i < 100; i++ {
		q.Device("mlx5_1")
		q.Device("mlx5_0")
	}
	idle := make(chan []pass, 1)
	go func() {
		if err := q.Idle(context.Background()); err != nil {
			t.Error(err)
		}
		idle <- b.finished()
	}()

	b.release <- struct{}{}
	second := <-b.started
	if !reflect.DeepEqual(second, pass{false, []string{"mlx5_0", "mlx5_1"}}) {
		t.Errorf("second pass %+v, want both devices once, sorted", second)
	}
	select {
	case <-idle:
		t.Fatal("Idle returned while a pass was running")
	default:
	}
	b.release <- struct{}{}
	if got := <-idle; len(got) != 2 {
		t.Errorf("Idle returned after %d finished passes, want 2", len(got))
	}
	// Nothing else was queued: a new request is the third pass, not a
	// leftover of the burst.
	q.All(false)
	if got := <-b.started; !reflect.DeepEqual(got, pass{true, nil}) {
		t.Errorf("third pass %+v", got)
	}
	b.release <- struct{}{}
	if err := q.Idle(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := len(b.finished()); n != 3 {
		t.Errorf("%d passes, want 3", n)
	}
}

// A full pass subsumes the device passes requested with it.
func TestQueueFullPassSubsumesDevices(t *testing.T) {
	b := newBlockingRun()
	q := startQueue(t, b.run)
	q.Device("a")
	<-b.started
	q.Device("b")
	q.All(false)
	q.Device("c")
	b.release <- struct{}{}
	if got := <-b.started; !reflect.DeepEqual(got, pass{true, nil}) {
		t.Errorf("second pass %+v, want one full pass", got)
	}
	b.release <- struct{}{}
	if err := q.Idle(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := len(b.finished()); n != 2 {
		t.Errorf("%d passes, want 2", n)
	}
}

// Idle on an empty queue returns at once; with work stuck, it returns the
// context's error when the context ends.
func TestQueueIdle(t *testing.T) {
	b := newBlockingRun()
	q := startQueue(t, b.run)
	if err := q.Idle(context.Background()); err != nil {
		t.Fatalf("Idle on an empty queue: %v", err)
	}
	q.All(false)
	<-b.started
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- q.Idle(ctx) }()
	cancel()
	if err := <-errc; err != context.Canceled {
		t.Errorf("Idle with a cancelled context = %v", err)
	}
	b.release <- struct{}{}
	if err := q.Idle(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// fakeClock is the queue's settle timer under the test's control: each
// timer started shows on started, and fires when the test says.
type fakeClock struct {
	started chan time.Duration
	fire    chan time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{started: make(chan time.Duration, 16), fire: make(chan time.Time)}
}

func (c *fakeClock) after(d time.Duration) <-chan time.Time {
	c.started <- d
	return c.fire
}

// waitStarted returns the duration of the next timer started; a queue that
// never starts one fails the test instead of hanging it.
func (c *fakeClock) waitStarted(t *testing.T) time.Duration {
	t.Helper()
	select {
	case d := <-c.started:
		return d
	case <-time.After(10 * time.Second):
		t.Fatal("the queue started no settle timer")
		return 0
	}
}

// The settle time gathers the events of one change that arrive a moment
// apart (a uevent and its RDMA netlink message) into one pass: requests
// made while the settle timer runs join the first one.
func TestQueueSettleGathersNearEvents(t *testing.T) {
	var mu sync.Mutex
	var passes []pass
	q := NewQueue(50*time.Millisecond, func(_ context.Context, w Work) {
		mu.Lock()
		passes = append(passes, passOf(w))
		mu.Unlock()
	})
	clock := newFakeClock()
	q.after = clock.after
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { q.Run(ctx); close(stopped) }()
	t.Cleanup(func() { cancel(); <-stopped })
	q.Device("rxe1")
	if d := clock.waitStarted(t); d != 50*time.Millisecond {
		t.Fatalf("settle timer of %v, want 50ms", d)
	}
	q.Device("rxe1") // the same change, a moment later
	q.Device("rxe2")
	clock.fire <- time.Now()
	idle, stop := context.WithTimeout(context.Background(), 10*time.Second)
	defer stop()
	if err := q.Idle(idle); err != nil {
		t.Fatalf("queue not idle after the pass (a settle started for requests the pass took?): %v", err)
	}
	mu.Lock()
	if len(passes) != 1 || !reflect.DeepEqual(passes[0], pass{false, []string{"rxe1", "rxe2"}}) {
		t.Errorf("passes %+v, want one over rxe1 and rxe2", passes)
	}
	mu.Unlock()

	// A request after the pass starts a new settle and a pass of its own.
	q.Device("rxe3")
	clock.waitStarted(t)
	clock.fire <- time.Now()
	if err := q.Idle(idle); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(passes) != 2 || !reflect.DeepEqual(passes[1], pass{false, []string{"rxe3"}}) {
		t.Errorf("passes %+v, want a second one over rxe3", passes)
	}
}

// A netdev request and a host-only request are passes too.
func TestQueueNetdevAndHost(t *testing.T) {
	var got []Work
	q := NewQueue(0, func(_ context.Context, w Work) { got = append(got, w) })
	q.Netdev("eth1")
	q.Host()
	w, ok := q.take()
	if !ok || !reflect.DeepEqual(w.Netdevs, []string{"eth1"}) || w.Full || len(w.Devices) != 0 {
		t.Errorf("take = %+v, %v", w, ok)
	}
	q.Host()
	if w, ok := q.take(); !ok || !w.Empty() {
		t.Errorf("host-only take = %+v, %v", w, ok)
	}
	if _, ok := q.take(); ok {
		t.Error("take of an empty queue")
	}
}

// A flapping netdev's events collapse into one request for it, however
// many arrive before the next pass.
func TestQueueNetdevBurstIsOneRequest(t *testing.T) {
	q := NewQueue(0, func(context.Context, Work) {})
	for i := 0; i < 10000; i++ {
		q.Netdev("eth1")
		q.Netdev("eth2")
	}
	w, ok := q.take()
	if !ok || !reflect.DeepEqual(w.Netdevs, []string{"eth1", "eth2"}) {
		t.Errorf("take = %v names, %v", len(w.Netdevs), ok)
	}
}

// The work loop answers the watchdog's probe while it waits and between
// works, not while a work runs: a wedged pass or loop stops the pings.
func TestQueueTurningOnlyWhenTheLoopTurns(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	q := NewQueue(0, func(context.Context, Work) {
		started <- struct{}{}
		<-release
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go q.Run(ctx)
	if !q.Turning(ctx, 5*time.Second) {
		t.Fatal("an idle loop did not answer")
	}
	q.All(false)
	<-started
	if q.Turning(ctx, 50*time.Millisecond) {
		t.Fatal("the loop answered while a work was running")
	}
	close(release)
	if !q.Turning(ctx, 5*time.Second) {
		t.Fatal("the loop did not answer after the work ended")
	}
}
