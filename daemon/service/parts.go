package service

import (
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/links"
	"github.com/rdmad/rdmad/daemon/memlock"
	"github.com/rdmad/rdmad/daemon/modules"
	"github.com/rdmad/rdmad/daemon/netns"
	"github.com/rdmad/rdmad/daemon/reconcile"
	"github.com/rdmad/rdmad/daemon/roce"
	"github.com/rdmad/rdmad/daemon/vpi"
)

// Kernel holds the kernel interfaces that are not files; production uses the
// real ones, unit tests fakes.
type Kernel struct {
	Modules modules.Loader
	Links   links.Netlink // nil: [[link]] is not managed (tests that do not need it)
	Netns   netns.Kernel  // nil: [netns] is not managed
}

// RealKernel returns the production kernel interfaces.
func RealKernel() Kernel {
	return Kernel{Modules: modules.Modprobe{}, Links: links.RDMANetlink{}, Netns: netns.RDMANetlink{}}
}

// build assembles the reconciler with every part, in the order a pass
// needs: soft links first (Early: they create devices the same pass
// configures), then modules (ib_core must be loaded to switch the netns
// mode at run time), memlock and netns, then per device VPI before RoCE.
func (s *Service) build(oneShot bool) *reconcile.Reconciler {
	h, k := s.host, s.kernel
	var early []reconcile.HostPart
	if k.Links != nil {
		early = append(early, &links.Part{Host: h, Netlink: k.Links, Loader: k.Modules})
	}
	mods := &modules.Part{Host: h, Loader: k.Modules}
	var detail host.Detail // a one-shot run reads what the policy needs
	if !oneShot {
		// The daemon never waits for modprobe in a pass: the result of a
		// background load comes back as a host-wide pass.
		mods.Done = s.queue.Host
		detail = host.DetailFull
		s.modules = mods
	}
	hostParts := []reconcile.HostPart{mods, &memlock.Part{Host: h}}
	if k.Netns != nil {
		hostParts = append(hostParts, &netns.Part{Host: h, Kernel: k.Netns})
	}
	return reconcile.New(reconcile.Options{
		Host:      h,
		Log:       s.log,
		Early:     early,
		HostParts: hostParts,
		// VPI first: a port type change re-registers the mlx4 device,
		// which resets its RoCE settings; the re-add event reapplies them.
		DeviceParts: []reconcile.DevicePart{
			&vpi.Part{Host: h},
			&roce.Part{Host: h, Loader: k.Modules},
		},
		Detail: detail,
	})
}
