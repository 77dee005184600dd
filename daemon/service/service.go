// Package service ties rdmad together at run time: it owns the policy in
// force (the last good configuration plus the runtime overlay), builds the
// reconciler and its parts, and runs the work queue that event sources and
// D-Bus calls feed.
package service

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdmad/rdmad/daemon/audit"
	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/health"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/reconcile"
)

// DefaultSettle is how long the queue waits after the first request of a
// burst: the uevent and the RDMA netlink message of one device arrive
// within microseconds of each other and cost one pass.
const DefaultSettle = 10 * time.Millisecond

// DefaultPortStateInterval is how often the state of InfiniBand and OPA
// ports, which changes without any event, is read again.
const DefaultPortStateInterval = 10 * time.Second

// Options configures a Service.
type Options struct {
	Host       *host.Host
	ConfigFile string // "" = <root>/etc/rdma/rdmad.toml
	// Parts builds the reconciler's parts (daemon/compose.Parts); nil:
	// none.
	Parts PartsFunc
	Log   *slog.Logger
	// OneShot builds the service for `rdmad --once`: devices are read
	// with the detail policy needs (nothing is published) and modules are
	// loaded within the pass. Otherwise the daemon reads everything it
	// publishes and loads modules in the background.
	OneShot bool
	// Settle is the queue's settle time (0: DefaultSettle; <0: none).
	Settle time.Duration
	// MaxRuntimeEntries bounds the runtime overlay's RoCE rules and links
	// (0: DefaultMaxRuntimeEntries).
	MaxRuntimeEntries int
	// Now is the clock of the contest rule and of the retry at the end
	// of its back-off (nil: time.Now; tests move it).
	Now func() time.Time
}

// Service is the running daemon minus its transports (bus, events).
type Service struct {
	host       *host.Host
	configFile string
	rec        *reconcile.Reconciler
	log        *slog.Logger
	parts      Parts
	preloadMu  sync.Mutex
	runCtx     context.Context // Run's; nil before Run
	preloads   sync.WaitGroup
	health     *health.Monitor // counters and link history for doctor (health.go); nil with OneShot
	healthMu   sync.Mutex
	healthFns  []func() // OnHealthChange
	oneShot    bool

	loadMu     sync.Mutex // serialises reloads: load and setPolicy as one step
	cfgMu      sync.RWMutex
	configErr  error // last failed load; nil when the policy in force is current
	cfgWatches []func()

	// The last configuration that loaded (under loadMu): saved to
	// config.LastGoodFile by SaveLastGood, applied at start when the files
	// do not load. saved is what is known to be on disk. tentative is set
	// while a persisted call's drop-in is written but its pass has not
	// yet succeeded: nothing is saved meanwhile (lastgood.go).
	snapshot, saved *config.Snapshot
	tentative       bool
	// unusable: why the saved copy could not be applied at start;
	// saveErr: why the last save failed (retried after every pass).
	unusable, saveErr error
	inForce           atomic.Pointer[config.InForce] // refreshInForce

	queue      *Queue
	watch      *watches      // WatchDirs; nil: no directory is watched
	verifyWake chan struct{} // the policy or a back-off changed: the verify loop reads its interval and NextRetry again
	retryAt    atomic.Int64  // the end of the back-off the verify loop waits for (UnixNano; 0: none)
	runtime    runtime       // overlay.go: last good policy + runtime overlay
	stopping   atomic.Bool   // Shutdown: changes are refused
	passes     passClock     // passes under way, for the watchdog
	maxRuntime int
	now        func() time.Time // Options.Now
}

// New loads the configuration and builds the service: reconciler, parts and
// queue. When the files do not load, the daemon starts anyway: the error is
// kept for ConfigError and logged at error priority, and the last good
// configuration (config.LastGoodFile) is put in force, or, when none was
// ever saved, a policy that declares nothing. Only with OneShot (rdmad
// --once, a tool) is a config error returned.
func New(o Options) (*Service, error) {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	s := &Service{host: o.Host, configFile: o.ConfigFile, log: o.Log, maxRuntime: o.MaxRuntimeEntries, oneShot: o.OneShot, now: o.Now}
	if s.now == nil {
		s.now = time.Now
	}
	s.runtime.mutation.status = s.PolicyStatus
	if s.maxRuntime <= 0 {
		s.maxRuntime = DefaultMaxRuntimeEntries
	}
	if s.configFile == "" {
		s.configFile = o.Host.Path(config.MainFile)
	}
	pol, snap, err := config.LoadSnapshot(s.files(), s.configFile)
	switch {
	case err != nil && o.OneShot:
		return nil, err
	case err != nil:
		s.configErr = err
		pol = s.lastGood(err)
	default:
		s.snapshot = snap
	}
	settle := o.Settle
	if settle == 0 {
		settle = DefaultSettle
	}
	s.queue = NewQueue(max(settle, 0), s.runWork)
	s.verifyWake = make(chan struct{}, 1)
	s.rec = s.build(o.Parts, o.OneShot)
	s.setPolicy(pol)
	s.refreshInForce()
	if !o.OneShot {
		s.startHealth()
		s.OnPassDone(s.retrySave)
		s.OnPassDone(s.wakeForRetry)
	}
	return s, nil
}

// ConfigFile is the main configuration file.
func (s *Service) ConfigFile() string { return s.configFile }

// DropInDir is where drop-ins, including rdmad's own persisted one, live.
func (s *Service) DropInDir() string { return config.DropInDirFor(s.configFile) }

// Host is the host rdmad manages.
func (s *Service) Host() *host.Host { return s.host }

// NetnsKernel is the kernel's RDMA netns mode, nil when rdmad does not
// manage it.
func (s *Service) NetnsKernel() NetnsKernel { return s.parts.Netns }

// Reconciler gives read access to the observed state.
func (s *Service) Reconciler() *reconcile.Reconciler { return s.rec }

// ConfigError is the error of the last reload, nil when the files on disk
// are the policy in force.
func (s *Service) ConfigError() error {
	s.cfgMu.RLock()
	defer s.cfgMu.RUnlock()
	return s.configErr
}

// Reload re-reads the configuration. On error the last good policy stays in
// force and the error is kept for ConfigError; on success a full pass is
// queued when the policy changed (rdmad's own drop-in writes come back
// through the file watcher unchanged).
func (s *Service) Reload() error { return s.reloadFor(nil) }

// ReloadFor is Reload asked by c (systemctl reload: a SIGHUP), logged once
// at notice level with c; the pass it queues names c on its lines.
func (s *Service) ReloadFor(c audit.Caller) error {
	s.log.Log(context.Background(), audit.LevelNotice, "reload asked", append(c.Attrs(), audit.KeyMethod, "Reload")...)
	return s.reloadFor(&c)
}

func (s *Service) reloadFor(cause *audit.Caller) error {
	changed, err := s.reload()
	if err != nil {
		return err
	}
	if changed {
		s.preload()
		s.queue.AllFor(true, cause)
	}
	return nil
}

// reload loads the files and puts the policy in force without a pass.
func (s *Service) reload() (changed bool, err error) {
	// Loading and putting in force are one step: a load that started
	// before a persisted write (or its undo) must not finish after it and
	// put the older files back in force.
	s.loadMu.Lock()
	defer s.loadMu.Unlock()
	pol, snap, err := config.LoadSnapshot(s.files(), s.configFile)
	s.cfgMu.Lock()
	hadErr := s.configErr != nil
	s.configErr = err
	s.cfgMu.Unlock()
	if err != nil {
		s.refreshInForce()
		s.log.Error("config reload failed; the policy in force stays", "err", err, "in_force", s.InForce().Describe())
		s.configChanged()
		return false, fmt.Errorf("reload: %w", err)
	}
	changed = s.setPolicy(pol)
	if changed {
		s.log.Info("configuration reloaded", "files", pol.Files)
	}
	if hadErr {
		s.log.Info("the configuration loads again; its error is cleared")
	}
	s.snapshot = snap
	s.saveLastGood()
	s.refreshInForce()
	if changed || hadErr {
		s.configChanged()
	}
	return changed, nil
}

// OnConfigChange registers fn to run after every reload that changed
// something (the policy, or the config error) and after every runtime
// change (overlay.go), so the bus can publish the declarations and the
// config error.
func (s *Service) OnConfigChange(fn func()) {
	s.cfgMu.Lock()
	s.cfgWatches = append(s.cfgWatches, fn)
	s.cfgMu.Unlock()
}

func (s *Service) configChanged() {
	select {
	case s.verifyWake <- struct{}{}:
	default:
	}
	s.cfgMu.RLock()
	fns := append([]func(){}, s.cfgWatches...)
	s.cfgMu.RUnlock()
	for _, fn := range fns {
		fn()
	}
}

// RequestAll queues a full pass (events were lost, a source restarted).
func (s *Service) RequestAll() { s.queue.All(false) }

// RequestDevice queues a pass over one device.
func (s *Service) RequestDevice(name string) { s.queue.Device(name) }

// RequestNetdev queues a pass over the RDMA devices on a netdev.
func (s *Service) RequestNetdev(name string) { s.queue.Netdev(name) }

// RequestNetdevState queues a pass over the RDMA devices on a netdev whose
// link state or carrier changed: read whole, but not as an arrival.
func (s *Service) RequestNetdevState(name string) { s.queue.NetdevState(name) }

// Start queues the first pass: everything, forced.
func (s *Service) Start() { s.queue.All(true) }

// ReconcileNow runs a full forced pass synchronously and returns its
// report; D-Bus "Reconcile" and --once use it.
func (s *Service) ReconcileNow(ctx context.Context) reconcile.Report {
	return s.pass(ctx, reconcile.Scope{Full: true, Forced: true})
}

// Run processes queued work, refreshes port states and samples what
// doctor needs a history for until ctx ends.
func (s *Service) Run(ctx context.Context) error {
	s.preloadMu.Lock()
	s.runCtx = ctx
	s.preloadMu.Unlock()
	s.preload()
	go s.refreshPortStates(ctx, DefaultPortStateInterval)
	if s.health != nil {
		go s.health.Run(ctx)
	}
	if s.watch != nil {
		go s.syncWatches(ctx)
	}
	go s.verify(ctx)
	s.queue.Run(ctx)
	if s.parts.Background != nil {
		s.parts.Background.Wait()
	}
	s.preloadMu.Lock()
	s.runCtx = nil // no preload starts after this
	s.preloadMu.Unlock()
	s.preloads.Wait()
	return ctx.Err()
}

// preload has the parts load, in the background, what the policy in force
// will need when a device comes (reconcile.Preloader: rdma_cm for
// [[roce]]), so the first device of a boot gets its policy without waiting
// for modprobe. It never delays a pass or READY: a pass that needs the same
// module waits for this load instead of starting another. Run calls it at
// start and Reload after a change of policy; before Run it does nothing.
func (s *Service) preload() {
	s.preloadMu.Lock()
	defer s.preloadMu.Unlock()
	ctx := s.runCtx
	if ctx == nil || ctx.Err() != nil {
		return
	}
	pol := s.PolicyInForce()
	for _, pl := range s.rec.Preloaders() {
		s.preloads.Add(1)
		go func() {
			defer s.preloads.Done()
			start := time.Now()
			did, err := pl.Preload(ctx, pol)
			switch {
			case err != nil && ctx.Err() == nil:
				s.log.Warn("could not load ahead of the devices what the policy needs; each device's pass tries again", "err", err)
			case did && err == nil:
				s.log.Info("loaded ahead of the devices what the policy needs", "part", fmt.Sprintf("%T", pl), "took", time.Since(start).Round(time.Millisecond))
			}
		}()
	}
}

// Idle waits until the queue is empty and no pass is running, or ctx ends.
// Tests and start-up use it.
func (s *Service) Idle(ctx context.Context) error { return s.queue.Idle(ctx) }

func (s *Service) runWork(ctx context.Context, w Work) {
	if w.Cause != nil {
		ctx = audit.With(ctx, *w.Cause)
	}
	scope := reconcile.Scope{Full: w.Full, Forced: w.Forced, Devices: w.Devices, Recheck: w.Recheck, RecheckHost: w.RecheckHost, Verify: w.Verify || w.Full}
	for _, nd := range w.Netdevs {
		for _, d := range s.rec.DevicesOnNetdev(nd) {
			if scope.Devices == nil {
				scope.Devices = map[string][]int{}
			}
			scope.Devices[d] = nil
		}
	}
	for _, nd := range w.StateNetdevs {
		for _, d := range s.rec.DevicesOnNetdev(nd) {
			if _, asked := scope.Devices[d]; asked {
				continue // also asked for as an arrival: read as one
			}
			if scope.Devices == nil {
				scope.Devices = map[string][]int{}
			}
			if scope.Refresh == nil {
				scope.Refresh = map[string]bool{}
			}
			scope.Devices[d], scope.Refresh[d] = nil, true
		}
	}
	for _, nd := range w.RecheckNetdevs {
		for _, d := range s.rec.DevicesOnNetdev(nd) {
			if scope.Recheck == nil {
				scope.Recheck = map[string]bool{}
			}
			scope.Recheck[d] = true
		}
	}
	s.pass(ctx, scope)
	if scope.Full || scope.Verify {
		// A pass that read every device (a full pass; the verify
		// read-back every [drift] verify_interval, 6 MB of garbage at
		// 1,024 devices) hands its garbage back, as the first pass and a
		// big reply do: made while rdmad idles, it would grow the heap the
		// runtime then keeps. Off the work loop: it is a collection.
		go handBack()
	}
}

// handBack returns the heap's garbage to the system.
func handBack() {
	if fn := handBackHook.Load(); fn != nil {
		(*fn)()
		return
	}
	debug.FreeOSMemory()
}

// handBackHook replaces handBack in a test that counts it.
var handBackHook atomic.Pointer[func()]

func (s *Service) pass(ctx context.Context, scope reconcile.Scope) reconcile.Report {
	id := s.passes.begin()
	defer func() {
		s.passes.end(id)
		for _, fn := range s.passes.doneFuncs() {
			fn()
		}
	}()
	return s.rec.Pass(ctx, s.PolicyInForce(), scope)
}

// OldestPass says since when the oldest pass under way (or waiting for the
// one under way) has run; running is false when none is. The watchdog
// stops telling systemd rdmad is alive when a pass runs too long.
func (s *Service) OldestPass() (since time.Time, running bool) { return s.passes.oldest() }

// WorkLoopTurning reports whether the work loop answers within d (it does
// while idle and between works): the watchdog pings only when it does, or
// after a pass.
func (s *Service) WorkLoopTurning(ctx context.Context, d time.Duration) bool {
	return s.queue.Turning(ctx, d)
}

// OnPassDone registers fn to run after every pass.
func (s *Service) OnPassDone(fn func()) { s.passes.onDone(fn) }

// passClock keeps when each pass under way started.
type passClock struct {
	mu     sync.Mutex
	next   uint64
	starts map[uint64]time.Time
	done   []func()
}

func (c *passClock) begin() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.starts == nil {
		c.starts = map[uint64]time.Time{}
	}
	c.next++
	c.starts[c.next] = time.Now()
	return c.next
}

func (c *passClock) end(id uint64) {
	c.mu.Lock()
	delete(c.starts, id)
	c.mu.Unlock()
}

func (c *passClock) oldest() (since time.Time, running bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range c.starts {
		if !running || t.Before(since) {
			since, running = t, true
		}
	}
	return since, running
}

func (c *passClock) onDone(fn func()) {
	c.mu.Lock()
	c.done = append(c.done, fn)
	c.mu.Unlock()
}

func (c *passClock) doneFuncs() []func() {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.done
}

// refreshPortStates re-reads, every interval, the state of the ports whose
// state changes raise no event: InfiniBand and OPA. Ethernet-backed ports
// (RoCE, iWARP) follow their netdev, whose changes rtnetlink reports.
func (s *Service) refreshPortStates(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.rec.RefreshPortStates(ctx, func(d *host.Device, p *host.Port) bool {
				tr := d.PortTransport(p)
				return tr == host.TransportInfiniBand || tr == host.TransportOPA
			})
		}
	}
}

// samePolicy reports whether two loaded policies declare the same.
func samePolicy(a, b *config.Policy) bool { return reflect.DeepEqual(a, b) }

// files reads the configuration as the daemon trusts it: root's files on a
// real host, the running user's under --root (host.TrustFor).
func (s *Service) files() host.Files { return host.Files{Trust: host.TrustFor(s.host.Root)} }
