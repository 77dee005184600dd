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

// The part's settings.
var (
	// Mode is the running kernel's RDMA netns mode.
	Mode = reconcile.NewSetting[ModeValue](reconcile.Setting{
		Name: "netns_mode", Kind: "netns mode", Key: config.KeyNetnsMode, Title: "RDMA netns mode",
		Valid: reconcile.ValueRule(func(m ModeValue) error { return config.NetnsMode(m).Validate() })})
	// Modprobe is the mode ib_core gets at boot: rdmad's modprobe.d file.
	Modprobe = reconcile.NewSetting[host.FileSnapshot](reconcile.Setting{
		Name: "netns_modprobe", Kind: "netns modprobe.d", Key: config.KeyNetnsMode, Title: "RDMA netns mode at boot (modprobe.d)",
		Valid: reconcile.CheckRendered(header, rendered)})
)

// rendered is the modprobe.d file for the mode of its options line, as
// Render writes it.
func rendered(lines []string) ([]byte, error) {
	for _, l := range lines {
		switch l {
		case "options ib_core netns_mode=1":
			return Render(config.NetnsShared), nil
		case "options ib_core netns_mode=0":
			return Render(config.NetnsExclusive), nil
		}
	}
	return nil, fmt.Errorf("no line rdmad writes (options ib_core netns_mode=0 or 1) in %q", lines)
}

// ModeValue is an RDMA netns mode as a setting's value.
type ModeValue config.NetnsMode

func (m ModeValue) String() string { return string(m) }

// Kinds implements reconcile.Part.
func (*Part) Kinds() []reconcile.Kind { return []reconcile.Kind{Mode.Kind(), Modprobe.Kind()} }

// Settings implements reconcile.Part.
func (*Part) Settings() []*reconcile.Setting {
	return []*reconcile.Setting{Mode.Setting(), Modprobe.Setting()}
}

func (p *Part) file() reconcile.ManagedFile {
	return reconcile.ManagedFile{Setting: Modprobe, Host: p.Host, Rel: ModprobeFile, Header: header}
}

// Undo implements reconcile.Part: the running kernel is switched back to
// the previous mode, or the modprobe.d file put back as it was.
func (p *Part) Undo(_ context.Context, a reconcile.Action) error {
	switch a.Kind {
	case Mode.Kind():
		m, ok := Mode.Old(a)
		if !ok || m == ModeValue(config.NetnsUnmanaged) {
			return fmt.Errorf("the previous netns mode is not known")
		}
		return p.Kernel.SetMode(config.NetnsMode(m))
	case Modprobe.Kind():
		return p.file().Undo(a)
	}
	return fmt.Errorf("%s: %w", a.Kind, reconcile.ErrNotUndoable)
}

// Part is the netns host part.
type Part struct {
	Host   *host.Host
	Kernel Kernel
}

// Apply implements reconcile.HostPart. modprobe.d gets only the mode the
// files declare (rdmad's persisted drop-in included): a runtime mode is
// switched in the kernel but must not come back after a reboot.
func (p *Part) ApplyHost(_ context.Context, run *reconcile.HostRun) reconcile.Result {
	pol := run.Policy
	var res reconcile.Result
	subject := reconcile.HostSubject()
	if m := pol.Netns.Mode; m == config.NetnsUnmanaged {
		if a, ok := p.file().Drop(run, subject); ok {
			res.Actions = append(res.Actions, a)
		}
	} else {
		a, rec := p.file().Keep(run, subject, Render(m), pol.Netns.Source)
		res.Actions, res.Records = append(res.Actions, a), append(res.Records, rec)
	}
	if m := pol.Netns.InForce(); m != config.NetnsUnmanaged {
		src := pol.Netns.Source
		if pol.Netns.Runtime != config.NetnsUnmanaged {
			src = config.Position{File: config.RuntimeFile}
		}
		// Only the files' mode waits for the boot: a runtime one is not
		// for the next boot, whatever the files say.
		a, rec := p.runtime(run, m, src, pol.Netns.Runtime == config.NetnsUnmanaged)
		res.Actions, res.Records = append(res.Actions, a), append(res.Records, rec)
	}
	return res
}

// runtime switches the running kernel to m; persisted says whether m is
// also the mode modprobe.d gives ib_core at the next boot.
func (p *Part) runtime(guard reconcile.WriteGuard, m config.NetnsMode, src config.Position, persisted bool) (reconcile.Action, reconcile.Record) {
	subject := reconcile.HostSubject()
	want := ModeValue(m)
	// Opening NETLINK_RDMA would make the kernel autoload ib_core on a host
	// without RDMA; only talk to it when it is already there.
	loaded, err := p.Host.LoadedModules()
	if err != nil {
		return Mode.Refuse(subject, want, src, err)
	}
	notLoaded := errors.New("ib_core not loaded; the modprobe.d option applies when it loads")
	if !loaded["ib_core"] {
		return Mode.NotApplicable(subject, want, src, notLoaded)
	}
	if _, err := p.Kernel.Mode(); errors.Is(err, ErrUnavailable) {
		return Mode.NotApplicable(subject, want, src, notLoaded)
	}
	act, rec := Mode.Converge(guard, reconcile.Target[ModeValue]{
		Subject: subject, Want: want, Source: src,
		Read: func() (ModeValue, error) {
			cur, known, _ := p.running()
			if !known {
				return "", errors.New("the running RDMA netns mode cannot be read")
			}
			return ModeValue(cur), nil
		},
		Write: func(want ModeValue) error {
			err := p.Kernel.SetMode(config.NetnsMode(want))
			switch {
			case errors.Is(err, syscall.EBUSY) && persisted:
				return fmt.Errorf("cannot switch RDMA netns mode to %s while non-init network namespaces exist (EBUSY); it takes effect at next boot through /%s: %w", m, ModprobeFile, err)
			case errors.Is(err, syscall.EBUSY):
				return fmt.Errorf("cannot switch RDMA netns mode to %s while non-init network namespaces exist (EBUSY); it was set without persist, so the next boot does not apply it either: %w", m, err)
			}
			return err
		},
	})
	switch {
	case rec.State == reconcile.Refused && persisted && errors.Is(rec.Why, syscall.EBUSY):
		// The boot takes it through modprobe.d: not a refusal, a wait.
		rec.State = reconcile.Deferred
		rec.Fix = "reboot, or delete the other network namespaces (ip netns list) and run: rdmactl reconcile"
	case rec.State == reconcile.Refused && errors.Is(rec.Why, syscall.EBUSY):
		// The mode is declared already: rdmad writes it again at the next pass.
		rec.Fix = "delete the other network namespaces (ip netns list), then: rdmactl reconcile"
	}
	return act, rec
}
