// Package service ties rdmad together at run time: it owns the policy in
// force (keeping the last good one when a reload fails), the reconciler, and
// the work queue that event sources and D-Bus calls feed.
package service

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/reconcile"
)

// Options configures a Service.
type Options struct {
	Host       *host.Host
	ConfigFile string // "" = <root>/etc/rdma/rdmad.toml
	Reconciler *reconcile.Reconciler
	Log        *slog.Logger
}

// Service is the running daemon minus its transports (bus, events).
type Service struct {
	host       *host.Host
	configFile string
	rec        *reconcile.Reconciler
	log        *slog.Logger

	cfgMu      sync.RWMutex
	configErr  error // last failed load; nil when the policy in force is current
	cfgWatches []func()

	queue *Queue

	runtime     runtime     // overlay.go: last good policy + runtime overlay
	linkDeleter LinkDeleter // api.go: kernel side of DeleteLink
}

// New loads the configuration and returns a Service. A config error here is
// fatal to the caller: at start there is no last good policy to keep.
func New(o Options) (*Service, error) {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	s := &Service{host: o.Host, configFile: o.ConfigFile, rec: o.Reconciler, log: o.Log}
	if s.configFile == "" {
		s.configFile = o.Host.Path(config.MainFile)
	}
	pol, err := config.Load(o.Host.Root, s.configFile)
	if err != nil {
		return nil, err
	}
	s.setPolicy(pol)
	s.queue = NewQueue(s.runRequest)
	return s, nil
}

// ConfigFile is the main configuration file.
func (s *Service) ConfigFile() string { return s.configFile }

// DropInDir is where drop-ins, including rdmad's own persisted one, live.
func (s *Service) DropInDir() string { return config.DropInDirFor(s.configFile) }

// Host is the host rdmad manages.
func (s *Service) Host() *host.Host { return s.host }

// Reconciler gives read access to state and policy.
func (s *Service) Reconciler() *reconcile.Reconciler { return s.rec }

// Policy is the policy in force.
func (s *Service) Policy() *config.Policy { return s.rec.Policy() }

// ConfigError is the error of the last reload, nil when the files on disk
// are the policy in force.
func (s *Service) ConfigError() error {
	s.cfgMu.RLock()
	defer s.cfgMu.RUnlock()
	return s.configErr
}

// Reload re-reads the configuration. On error the last good policy stays in
// force and the error is kept for ConfigError; on success a full reconcile
// is queued.
func (s *Service) Reload() error {
	pol, err := config.Load(s.host.Root, s.configFile)
	s.cfgMu.Lock()
	s.configErr = err
	s.cfgMu.Unlock()
	if err != nil {
		s.log.Error("config reload failed; keeping the last good configuration", "err", err)
		s.configChanged()
		return fmt.Errorf("reload: %w", err)
	}
	s.setPolicy(pol)
	s.log.Info("configuration reloaded", "files", pol.Files)
	s.configChanged()
	s.RequestAll()
	return nil
}

// OnConfigChange registers fn to run after every reload, good or bad, and
// after every runtime change (overlay.go), so the bus can publish the files
// in force, the runtime declarations and the config error.
func (s *Service) OnConfigChange(fn func()) {
	s.cfgMu.Lock()
	s.cfgWatches = append(s.cfgWatches, fn)
	s.cfgMu.Unlock()
}

func (s *Service) configChanged() {
	s.cfgMu.RLock()
	fns := append([]func(){}, s.cfgWatches...)
	s.cfgMu.RUnlock()
	for _, fn := range fns {
		fn()
	}
}

// RequestAll queues a full reconcile.
func (s *Service) RequestAll() { s.queue.Add(KeyAll) }

// RequestDevice queues a reconcile of one device.
func (s *Service) RequestDevice(name string) { s.queue.Add(DeviceKey(name)) }

// ReconcileNow runs a full pass synchronously (after any queued work is
// taken) and returns its report; D-Bus "Reconcile" uses it.
func (s *Service) ReconcileNow(ctx context.Context) reconcile.Report {
	return s.rec.All(ctx)
}

// Run processes queued work until ctx ends.
func (s *Service) Run(ctx context.Context) error {
	s.queue.Run(ctx)
	return ctx.Err()
}

// Idle waits until the queue is empty and no pass is running, or ctx ends.
// Tests and --once use it.
func (s *Service) Idle(ctx context.Context) error { return s.queue.Idle(ctx) }

func (s *Service) runRequest(ctx context.Context, all bool, devices []string) {
	start := time.Now()
	var rep reconcile.Report
	if all {
		rep = s.rec.All(ctx)
	} else {
		rep = s.rec.Devices(ctx, devices...)
	}
	s.log.Debug("pass done", "all", all, "devices", devices, "took", time.Since(start), "result", rep.Summary())
}
