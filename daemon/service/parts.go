package service

import (
	"context"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/reconcile"
)

// Parts is what the composition root (daemon/compose) hands the service:
// the reconciler's parts, in the order a pass runs them, and the few
// things the mutating calls reach directly, each behind the interface the
// service uses. The service imports no part: a call learns whether it
// took from the records of the keys it declared (reconcile.Report.Outcome),
// and a refused call is undone by the parts themselves
// (reconcile.Reconciler.Undo).
type Parts struct {
	// Early parts run before devices are read: they may create devices
	// (soft links) that the same pass configures.
	Early  []reconcile.HostPart
	Host   []reconcile.HostPart
	Device []reconcile.DevicePart
	// Background is work a part runs off the pass (module loads), waited
	// for when the service stops; nil: none.
	Background interface{ Wait() }
	// Links deletes a soft link (DeleteLink); nil: [[link]] is not managed.
	Links LinkDeleter
	// Netns is the kernel's RDMA netns mode; nil: [netns] is not managed.
	Netns NetnsKernel
	// Files are the files the parts write atomically, relative to the
	// root (see ManagedFiles).
	Files []string
}

// LinkDeleter deletes a soft RDMA link, reported as an action the links
// part can undo.
type LinkDeleter interface {
	Delete(ctx context.Context, name string) reconcile.Action
}

// NetnsKernel reads and sets the kernel's RDMA netns mode.
type NetnsKernel interface {
	Mode() (config.NetnsMode, error)
	SetMode(config.NetnsMode) error
}

// PartsFunc builds a service's parts. oneShot is Options.OneShot (work
// runs within the pass: there is no later pass to report it);
// requestHost queues a host-wide pass, through which work a part ran in
// the background reports its result.
type PartsFunc func(h *host.Host, oneShot bool, requestHost func()) Parts

// build assembles the reconciler from the parts.
func (s *Service) build(parts PartsFunc, oneShot bool) *reconcile.Reconciler {
	var p Parts
	if parts != nil {
		p = parts(s.host, oneShot, s.queue.Host)
	}
	s.parts = p
	var detail host.Detail // a one-shot run reads what the policy needs
	var found *reconcile.Found
	if !oneShot {
		// The daemon records what it found and undoes a removed
		// declaration; rdmad --once neither (it writes no state).
		detail = host.DetailFull
		found = reconcile.OpenFound(s.host, s.log)
	}
	return reconcile.New(reconcile.Options{
		Host:        s.host,
		Log:         s.log,
		Early:       p.Early,
		HostParts:   p.Host,
		DeviceParts: p.Device,
		Detail:      detail,
		Found:       found,
		Now:         s.now,
	})
}
