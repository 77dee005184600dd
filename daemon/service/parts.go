package service

import (
	"context"
	"log/slog"

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

// NewReconciler assembles the reconciler with every part, in the order a
// pass needs: soft links first (Early: they create devices the same pass
// configures), modules before RoCE (rdma_cm provides the configfs tree) and
// before netns (ib_core must be loaded to switch the mode at run time).
func NewReconciler(h *host.Host, k Kernel, log *slog.Logger) *reconcile.Reconciler {
	var early []reconcile.HostPart
	if k.Links != nil {
		early = append(early, &links.Part{Host: h, Netlink: k.Links, Loader: k.Modules})
	}
	hostParts := []reconcile.HostPart{
		&modules.Part{Host: h, Loader: k.Modules},
		&memlock.Part{Host: h},
	}
	if k.Netns != nil {
		hostParts = append(hostParts, &netns.Part{Host: h, Kernel: k.Netns})
	}
	return reconcile.New(reconcile.Options{
		Host:      h,
		Log:       log,
		Early:     early,
		HostParts: hostParts,
		// VPI first: a port type change re-registers the mlx4 device,
		// which resets its RoCE settings; the re-add event reapplies them.
		DeviceParts: []reconcile.DevicePart{
			&vpi.Part{Host: h},
			&roce.Part{Host: h},
		},
	})
}

// LinkDeleter is the kernel side of Service.DeleteLink over k's RDMA
// netlink; nil when k does not manage links.
func (k Kernel) LinkDeleter(h *host.Host) LinkDeleter {
	if k.Links == nil {
		return nil
	}
	return netlinkLinkDeleter{h: h, nl: k.Links}
}

type netlinkLinkDeleter struct {
	h  *host.Host
	nl links.Netlink
}

func (d netlinkLinkDeleter) DeleteLink(ctx context.Context, name string) error {
	return links.Delete(ctx, d.nl, d.h, name)
}
