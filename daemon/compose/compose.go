// Package compose is rdmad's composition root: the one place that knows
// every part and wires what follows the service. It builds the parts on
// the kernel interfaces (those KernelFor chooses for the host's root,
// kernel.go) and hands them to the service, which knows them
// only through reconcile's part interfaces and its own small ones
// (service.Parts); and it attaches to the running service its outputs and
// inputs: the bus (bus.go), the metrics textfile (textfile.go), the event
// sources (events.go), and doctor's view of it (doctor.go). cmd/rdmad
// runs the process around them: flags, logging, signals, sd_notify and the
// bus connection's life.
package compose

import (
	"github.com/rdmad/rdmad/daemon/dcb"
	"github.com/rdmad/rdmad/daemon/ethtool"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/links"
	"github.com/rdmad/rdmad/daemon/memlock"
	"github.com/rdmad/rdmad/daemon/modules"
	"github.com/rdmad/rdmad/daemon/netns"
	"github.com/rdmad/rdmad/daemon/qos"
	"github.com/rdmad/rdmad/daemon/reconcile"
	"github.com/rdmad/rdmad/daemon/roce"
	"github.com/rdmad/rdmad/daemon/service"
	"github.com/rdmad/rdmad/daemon/vpi"
)

// Kernel holds the kernel interfaces that are not files; production uses
// the real ones, unit tests fakes.
type Kernel struct {
	Modules modules.Loader
	Links   links.Netlink  // nil: [[link]] is not managed (tests that do not need it)
	Netns   netns.Kernel   // nil: [netns] is not managed
	DCB     dcb.Kernel     // nil: [[qos]] is not applied through DCB (the mlx4 options file still is)
	Ethtool ethtool.Kernel // nil: [[qos]] pause and pfc_storm_timeout fail, named
}

// RealKernel returns the production kernel interfaces.
func RealKernel() Kernel {
	return Kernel{Modules: modules.Modprobe{}, Links: links.RDMANetlink{}, Netns: netns.RDMANetlink{}, DCB: dcb.Netlink{}, Ethtool: ethtool.Netlink{}}
}

// Parts returns the builder of every part on k, in the order a pass
// needs: soft links first (Early: they create devices the same pass
// configures), then modules (ib_core must be loaded to switch the netns
// mode at run time), memlock and netns, then per device VPI before RoCE.
func Parts(k Kernel) service.PartsFunc {
	return func(h *host.Host, oneShot bool, requestHost func()) service.Parts {
		var p service.Parts
		if k.Links != nil {
			l := &links.Part{Host: h, Netlink: k.Links, Loader: k.Modules}
			p.Early = append(p.Early, l)
			p.Links = l
		}
		mods := &modules.Part{Host: h, Loader: k.Modules}
		if !oneShot {
			// The daemon never waits for modprobe in a pass: the result of
			// a background load comes back as a host-wide pass.
			mods.Done = requestHost
			p.Background = mods
		}
		p.Host = []reconcile.HostPart{mods, &memlock.Part{Host: h}, &qos.MLX4Part{Host: h}}
		// The netns file is listed even when [netns] is not managed: a
		// temp file left beside it is still rdmad's.
		p.Files = []string{memlock.LimitsFile, memlock.SystemdFile, netns.ModprobeFile, qos.MLX4File}
		if k.Netns != nil {
			p.Host = append(p.Host, &netns.Part{Host: h, Kernel: k.Netns})
			p.Netns = k.Netns
		}
		// VPI first: a port type change re-registers the mlx4 device,
		// which resets its RoCE settings; the re-add event reapplies them.
		p.Device = []reconcile.DevicePart{
			&vpi.Part{Host: h},
			&roce.Part{Host: h, Loader: k.Modules},
		}
		// QoS in the same pass as the TOS: a PF whose driver reloaded
		// gets both back together.
		if k.DCB != nil {
			p.Device = append(p.Device, &qos.Part{Host: h, DCB: k.DCB, Ethtool: k.Ethtool})
		}
		return p
	}
}
