package compose

import (
	"log/slog"
	"sync"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/events"
	"github.com/rdmad/rdmad/daemon/fixturekernel"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/service"
)

// Events wires the event sources to the running service svc, by name (for
// events.RunAll, which runs them until its context ends): uevents (RDMA
// device and netdev hotplug), the RDMA netlink monitor where the kernel
// has one (6.12+), rtnetlink link changes, and changes to the
// configuration and modules directories; the directories of the settings
// rdmad keeps are watched (svc.WatchDirs); on the real host DCB
// notifications and the ethtool monitor group say when another tool
// changes a netdev's DCB or global pause. A source that cannot start is
// logged and retried; it never stops the daemon, which still reconciles
// on reload, SIGHUP and D-Bus calls. configReady is closed once the
// configuration files are watched.
func Events(svc *service.Service, log *slog.Logger, configReady chan<- struct{}) map[string]events.Source {
	var once sync.Once
	// The directories of the settings rdmad keeps (configfs port
	// directories, the directories of the files it writes): another
	// process's write there makes rdmad read the setting again.
	dirs := &events.DirWatcher{Changed: svc.DirChanged, Log: log.With("source", "directories")}
	svc.WatchDirs(dirs)
	h := svc.Host()
	modulesDir := svc.PolicyInForce().Modules.Directory
	if modulesDir == "" {
		modulesDir = config.DefaultModulesDirectory
	}
	// A uevent request may mean ib_core or a first RDMA device just
	// appeared: the monitor then looks whether it can follow the kernel.
	wake := make(chan struct{}, 1)
	sources := map[string]events.Source{
		"directories": dirs,
		"uevent": &events.UeventSource{
			Open: func() (events.MessageReader, error) { return events.OpenUeventSocket() },
			Req:  events.WakeOn(svc, wake),
			Log:  log.With("source", "uevent"),
		},
		"rtnetlink": &events.LinkSource{
			Sub:         events.RTNetlink{},
			Req:         svc,
			Log:         log.With("source", "rtnetlink"),
			CarrierLost: svc.Health().CarrierLost,
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
	if h.Root == "/" {
		// Only on the real host: under --root the devices are a fixture's,
		// and opening NETLINK_RDMA here could load this machine's ib_core.
		sources["rdma-monitor"] = &events.RDMAMonitorSource{
			Ready:   func() bool { return h.Exists(host.SysModule + "/ib_core") },
			Wake:    wake,
			Probe:   events.ProbeRDMAMonitor,
			Open:    func() (events.MessageReader, error) { return events.OpenRDMAMonitor() },
			Devices: events.RDMADevices,
			Req:     svc,
			Log:     log.With("source", "rdma-monitor"),
		}
		// Global pause changes made through ethtool netlink: [[qos]] pause
		// drift is seen at once, not at the next verify read-back.
		// DCB changes made through DCB netlink by any process (dcb,
		// lldpad, mlnx_qos): the PFC and trust rdmad keeps are read again
		// at once.
		sources["dcb"] = &events.DCBSource{
			Open: events.OpenDCBMonitor,
			Req:  svc,
			Log:  log.With("source", "dcb"),
		}
		sources["ethtool-monitor"] = &events.PauseSource{
			Open: events.OpenPauseMonitor,
			Req:  svc,
			Log:  log.With("source", "ethtool-monitor"),
		}
	} else if fixturekernel.Present(h) {
		// A fixture's DCB and ethtool state is a file: its changes, by
		// rdmad or another manager, are the DCB and pause notifications,
		// and an mlx5 PFC change the carrier drop rtnetlink would report.
		sources["fixture-kernel"] = &fixturekernel.Watcher{
			Host:         h,
			Recheck:      svc.RecheckNetdev,
			CarrierLost:  svc.Health().CarrierLost,
			StateChanged: svc.RequestNetdevState,
			RequestAll:   svc.RequestAll,
			Log:          log.With("source", "fixture-kernel"),
		}
	}
	return sources
}

// The link source tells a netdev's change of state from its arrival.
var _ events.NetdevStateRequester = (*service.Service)(nil)
