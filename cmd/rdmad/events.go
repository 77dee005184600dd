package main

import (
	"context"
	"log/slog"
	"sync"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/events"
	"github.com/rdmad/rdmad/daemon/service"
)

// startEvents feeds kernel and config events into the service until ctx
// ends: uevents (RDMA device and netdev hotplug), rtnetlink link changes,
// and changes to the configuration and modules directories. A source that
// cannot start is logged and retried; it never stops the daemon, which
// still reconciles on reload, SIGHUP and D-Bus calls. configReady is
// closed once the configuration files are watched.
func startEvents(ctx context.Context, svc *service.Service, log *slog.Logger, configReady chan<- struct{}) error {
	var once sync.Once
	h := svc.Host()
	modulesDir := svc.PolicyInForce().Modules.Directory
	if modulesDir == "" {
		modulesDir = config.DefaultModulesDirectory
	}
	sources := map[string]events.Source{
		"uevent": &events.UeventSource{
			Open: func() (events.MessageReader, error) { return events.OpenUeventSocket() },
			Req:  svc,
			Log:  log.With("source", "uevent"),
		},
		"rtnetlink": &events.LinkSource{
			Sub: events.RTNetlink{},
			Req: svc,
			Log: log.With("source", "rtnetlink"),
		},
		"config": &events.ConfigWatcher{
			MainFile:   svc.ConfigFile(),
			DropInDir:  svc.DropInDir(),
			ModulesDir: h.Path(modulesDir),
			Reload:     svc.Reload,
			Req:        svc,
			Log:        log.With("source", "config"),
			OnReady:    func() { once.Do(func() { close(configReady) }) },
		},
	}
	return events.RunAll(ctx, log, sources)
}
