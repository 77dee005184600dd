// Package netns applies the declared RDMA network namespace mode ([netns]
// mode = "shared" | "exclusive"): at run time through RDMA netlink, as
// `rdma system set netns MODE` does, and across reboots through a managed
// /etc/modprobe.d/rdmad-netns.conf setting ib_core's netns_mode parameter
// (a bool in drivers/infiniband/core/device.c: 1 = shared, 0 = exclusive),
// because the runtime switch is forgotten when ib_core is reloaded.
package netns

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"syscall"

	"github.com/vishvananda/netlink"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/reconcile"
)

// ModprobeFile is the modprobe.d file rdmad owns, relative to the root.
const ModprobeFile = "etc/modprobe.d/rdmad-netns.conf"

// header starts every file rdmad writes; a file without it is not ours and
// is never removed or rewritten.
const header = "# Managed by rdmad from [netns] in rdmad.toml; changes here are overwritten.\n"

// ErrUnavailable is returned (wrapped) by Kernel when RDMA netlink is not
// there: ib_core is not loaded (no NETLINK_RDMA family).
var ErrUnavailable = errors.New("RDMA netlink unavailable (ib_core not loaded)")

// Kernel reads and sets the RDMA subsystem netns mode. RDMANetlink is real.
type Kernel interface {
	Mode() (config.NetnsMode, error)
	SetMode(config.NetnsMode) error
}

// RDMANetlink uses RDMA_NLDEV_CMD_SYS_GET / SYS_SET.
type RDMANetlink struct{}

// Mode implements Kernel.
func (RDMANetlink) Mode() (config.NetnsMode, error) {
	s, err := netlink.RdmaSystemGetNetnsMode()
	if err != nil {
		return "", fmt.Errorf("rdma system show netns: %w", classify(err))
	}
	switch m := config.NetnsMode(s); m {
	case config.NetnsShared, config.NetnsExclusive:
		return m, nil
	}
	return "", fmt.Errorf("rdma system show netns: unknown mode %q", s)
}

// SetMode implements Kernel.
func (RDMANetlink) SetMode(m config.NetnsMode) error {
	if err := netlink.RdmaSystemSetNetnsMode(string(m)); err != nil {
		return fmt.Errorf("rdma system set netns %s: %w", m, classify(err))
	}
	return nil
}

// classify marks the errors socket(NETLINK_RDMA) gives without ib_core.
func classify(err error) error {
	if errors.Is(err, syscall.EPROTONOSUPPORT) || errors.Is(err, syscall.ENOENT) {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return err
}

// Render returns the modprobe.d content for mode.
func Render(m config.NetnsMode) []byte {
	var b bytes.Buffer
	b.WriteString(header)
	v := 1
	if m == config.NetnsExclusive {
		v = 0
	}
	fmt.Fprintf(&b, "# ib_core netns_mode: 1 = shared, 0 = exclusive.\noptions ib_core netns_mode=%d\n", v)
	return b.Bytes()
}

// Kinds of the actions this part reports.
const (
	// Mode is the running kernel's mode; Old and New are config.NetnsMode.
	Mode = reconcile.KindNetnsMode
	// Modprobe is the mode ib_core gets at boot; Old is the file before (a
	// host.FileSnapshot).
	Modprobe = reconcile.KindNetnsModprobe
)

// Kinds implements reconcile.Part.
func (*Part) Kinds() []reconcile.Kind { return []reconcile.Kind{Mode, Modprobe} }

// Undo implements reconcile.Part: the running kernel is switched back to
// the previous mode, or the modprobe.d file put back as it was.
func (p *Part) Undo(_ context.Context, a reconcile.Action) error {
	switch a.Kind {
	case Mode:
		m, ok := a.Old.(config.NetnsMode)
		if !ok || m == config.NetnsUnmanaged {
			return fmt.Errorf("netns: the previous mode is not known")
		}
		if err := p.Kernel.SetMode(m); err != nil {
			return fmt.Errorf("netns: %w", err)
		}
		return nil
	case Modprobe:
		snap, ok := a.Old.(host.FileSnapshot)
		if !ok {
			return fmt.Errorf("netns: /%s before the change is not known", ModprobeFile)
		}
		if err := p.Host.Restore(ModprobeFile, header, snap); err != nil {
			return fmt.Errorf("netns: %w", err)
		}
		return nil
	}
	return fmt.Errorf("netns: %s: %w", a.Kind, reconcile.ErrNotUndoable)
}

// Part is the netns host part.
type Part struct {
	Host   *host.Host
	Kernel Kernel
}

// InForce is the mode the running kernel is kept in: the runtime one (set
// over D-Bus without persist) when there is one, else the declared one.
func InForce(n config.Netns) config.NetnsMode {
	if n.Runtime != config.NetnsUnmanaged {
		return n.Runtime
	}
	return n.Mode
}

// Apply implements reconcile.HostPart. modprobe.d gets only the mode the
// files declare (rdmad's persisted drop-in included): a runtime mode is
// switched in the kernel but must not come back after a reboot.
func (p *Part) Apply(_ context.Context, pass *reconcile.Pass) reconcile.Result {
	pol := pass.Policy
	var acts []reconcile.Action
	if a, ok := p.persist(pol.Netns.Mode); ok {
		acts = append(acts, a)
	}
	if m := InForce(pol.Netns); m != config.NetnsUnmanaged {
		acts = append(acts, p.runtime(m, m == pol.Netns.Mode))
	}
	return reconcile.Result{Actions: acts}
}

func (p *Part) persist(m config.NetnsMode) (reconcile.Action, bool) {
	act := reconcile.Action{Subject: reconcile.HostSubject(), Kind: Modprobe, To: "/" + ModprobeFile, New: m}
	old, err := p.Host.Snapshot(ModprobeFile)
	if err != nil {
		act.Status, act.Err = reconcile.Failed, fmt.Errorf("netns: %w", err)
		return act, true
	}
	act.Old = old
	if m == config.NetnsUnmanaged {
		if !old.Exists {
			return act, false
		}
		// Only our own file is removed when the declaration goes away.
		removed, err := p.Host.RemoveManaged(ModprobeFile, header)
		switch {
		case err != nil:
			act.Status, act.Err = reconcile.Failed, fmt.Errorf("netns: %w", err)
		case !removed:
			return act, false
		default:
			act.From, act.To, act.Status = "/"+ModprobeFile, "removed", reconcile.Changed
		}
		return act, true
	}
	changed, err := p.Host.WriteManaged(ModprobeFile, header, Render(m))
	switch {
	case err != nil:
		act.Status, act.Err = reconcile.Failed, fmt.Errorf("netns: %w", err)
	case changed:
		act.Status = reconcile.Changed
	default:
		act.Status = reconcile.Unchanged
	}
	return act, true
}

// runtime switches the running kernel to m; persisted says whether m is
// also the mode modprobe.d gives ib_core at the next boot.
func (p *Part) runtime(m config.NetnsMode, persisted bool) reconcile.Action {
	act := reconcile.Action{Subject: reconcile.HostSubject(), Kind: Mode, To: string(m), New: m}
	// Opening NETLINK_RDMA would make the kernel autoload ib_core on a host
	// without RDMA; only talk to it when it is already there.
	loaded, err := p.Host.LoadedModules()
	if err != nil {
		act.Status, act.Err = reconcile.Failed, fmt.Errorf("netns: %w", err)
		return act
	}
	if !loaded["ib_core"] {
		act.Status = reconcile.NotApplicable
		act.Err = errors.New("ib_core not loaded; the modprobe.d option applies when it loads")
		return act
	}
	cur, err := p.Kernel.Mode()
	if errors.Is(err, ErrUnavailable) {
		act.Status = reconcile.NotApplicable
		act.Err = errors.New("ib_core not loaded; the modprobe.d option applies when it loads")
		return act
	}
	if err != nil {
		act.Status, act.Err = reconcile.Failed, fmt.Errorf("netns: %w", err)
		return act
	}
	act.From, act.Old = string(cur), cur
	if cur == m {
		act.Status = reconcile.Unchanged
		return act
	}
	if err := p.Kernel.SetMode(m); err != nil {
		act.Status = reconcile.Failed
		switch {
		case errors.Is(err, syscall.EBUSY) && persisted:
			act.Err = fmt.Errorf("netns: cannot switch RDMA netns mode to %s while non-init network namespaces exist (EBUSY); it takes effect at next boot through /%s: %w", m, ModprobeFile, err)
		case errors.Is(err, syscall.EBUSY):
			act.Err = fmt.Errorf("netns: cannot switch RDMA netns mode to %s while non-init network namespaces exist (EBUSY); it was set without persist, so the next boot does not apply it either: %w", m, err)
		default:
			act.Err = fmt.Errorf("netns: %w", err)
		}
		return act
	}
	act.Status = reconcile.Changed
	return act
}
