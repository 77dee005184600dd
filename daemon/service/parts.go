package service

import (
	"log/slog"

	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/memlock"
	"github.com/rdmad/rdmad/daemon/modules"
	"github.com/rdmad/rdmad/daemon/reconcile"
	"github.com/rdmad/rdmad/daemon/roce"
)

// Kernel holds the kernel interfaces that are not files; production uses the
// real ones, unit tests fakes.
type Kernel struct {
	Modules modules.Loader
}

// RealKernel returns the production kernel interfaces.
func RealKernel() Kernel {
	return Kernel{Modules: modules.Modprobe{}}
}

// NewReconciler assembles the reconciler with every part, in the order a
// pass needs: modules before RoCE (rdma_cm provides the configfs tree).
func NewReconciler(h *host.Host, k Kernel, log *slog.Logger) *reconcile.Reconciler {
	return reconcile.New(reconcile.Options{
		Host: h,
		Log:  log,
		HostParts: []reconcile.HostPart{
			&modules.Part{Host: h, Loader: k.Modules},
			&memlock.Part{Host: h},
		},
		DeviceParts: []reconcile.DevicePart{
			&roce.Part{Host: h},
		},
	})
}
