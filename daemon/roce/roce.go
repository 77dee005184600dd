// Package roce applies declared RoCE settings (default_roce_mode and
// default_roce_tos of configfs rdma_cm) to the ports of one RDMA device.
// The kernel forgets both whenever the device goes away, so this runs on
// every arrival.
package roce

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/modules"
	"github.com/rdmad/rdmad/daemon/reconcile"
)

// Kinds of the actions this part reports.
const (
	// Mode is default_roce_mode of a port; its Old and New are
	// config.RoCEMode values.
	Mode = reconcile.KindRoCEMode
	// TOS is default_roce_tos of a port; its Old and New are ints.
	TOS      = reconcile.KindRoCETOS
	Configfs = reconcile.KindRoCEConfigfs // the device's rdma_cm directory
	// Settings is a rule that selects a port RoCE settings do not apply
	// to (InfiniBand, iWARP): reported not applicable.
	Settings = reconcile.KindRoCE
)

// Kinds implements reconcile.Part.
func (*Part) Kinds() []reconcile.Kind { return []reconcile.Kind{Mode, TOS, Configfs, Settings} }

// Undo implements reconcile.Part: it writes a port's previous mode or TOS
// back and reads it back. Creating a device's rdma_cm directory is not
// undone: the directory only shows the kernel's defaults, and the kernel
// removes it with the device.
func (p *Part) Undo(_ context.Context, a reconcile.Action) error {
	if (a.Kind == Mode || a.Kind == TOS) && a.Subject.Kind != reconcile.SubjectPort {
		return fmt.Errorf("roce: %s is not a port", a.Subject)
	}
	var value string
	switch a.Kind {
	case Mode:
		m, ok := a.Old.(config.RoCEMode)
		if !ok || m.Kernel() == "" {
			return fmt.Errorf("roce: the previous mode of %s is not known (%q)", a.Subject, a.From)
		}
		value = m.Kernel()
	case TOS:
		tos, ok := a.Old.(int)
		if !ok {
			return fmt.Errorf("roce: the previous TOS of %s is not known (%q)", a.Subject, a.From)
		}
		value = strconv.Itoa(tos)
	case Configfs:
		return fmt.Errorf("roce: the rdma_cm directory of %s is left in place (it shows the kernel's defaults and goes with the device): %w", a.Subject, reconcile.ErrNotUndoable)
	default:
		return fmt.Errorf("roce: %s: %w", a.Kind, reconcile.ErrNotUndoable)
	}
	_, err := write(p.Host, a.Subject.Device, a.Subject.Port, a.Kind, value)
	return err
}

// CMModule provides configfs rdma_cm.
const CMModule = "rdma_cm"

// CMLoadTimeout bounds loading rdma_cm within a pass.
const CMLoadTimeout = 20 * time.Second

// Part is the RoCE device part of the reconciler.
type Part struct {
	Host *host.Host
	// Loader loads rdma_cm when configfs rdma_cm is missing, so RoCE
	// settings never wait for the other listed modules; nil: never load.
	Loader modules.Loader

	cmMu sync.Mutex // one rdma_cm load at a time across devices
}

// Apply sets mode and TOS on every port of dev that a [[roce]] rule selects.
// A port that refuses a value fails alone; the other ports still run.
func (p *Part) Apply(ctx context.Context, pol *config.Policy, dev *host.Device) []reconcile.Action {
	target := reconcile.TargetOf(dev)
	var acts []reconcile.Action
	dirReady := false
	for i := range dev.Ports {
		port := &dev.Ports[i]
		want := pol.RoCEFor(target, port.Number)
		if want.Empty() {
			continue
		}
		subject := reconcile.PortSubject(dev.Name, port.Number)
		if tr := dev.PortTransport(port); tr != host.TransportRoCE {
			acts = append(acts, reconcile.Action{
				Subject: subject, Kind: Settings, Status: reconcile.NotApplicable,
				Err:    fmt.Errorf("port transport is %s, RoCE settings apply to RoCE (Ethernet) ports", tr),
				Source: firstSource(want),
			})
			continue
		}
		if !port.RoCEKnown && p.Host.ReadRoCE(dev.Name, port) {
			dirReady = true // its attributes read: the directory exists
		}
		if !dirReady {
			act, ok := p.ensureDir(ctx, dev)
			if !ok || act.Status == reconcile.Changed {
				acts = append(acts, act)
			}
			if !ok {
				return acts
			}
			dirReady = true
		}
		if want.Mode != "" {
			acts = append(acts, p.set(dev.Name, port, Mode, want.Mode.Kernel(), want.ModeSource))
		}
		if want.TOS != nil {
			acts = append(acts, p.set(dev.Name, port, TOS, strconv.Itoa(*want.TOS), want.TOSSource))
		}
	}
	return acts
}

func firstSource(d config.RoCEDesired) string {
	if d.Mode != "" {
		return d.ModeSource.String()
	}
	return d.TOSSource.String()
}

// ensureDir creates configfs rdma_cm/<dev> when it is missing; the kernel
// then fills in ports/<n>/ with default values, which are read. It loads
// rdma_cm first when configfs rdma_cm itself is missing. ok=false with a
// failed action when the port settings cannot be reached.
func (p *Part) ensureDir(ctx context.Context, dev *host.Device) (reconcile.Action, bool) {
	dir := path.Join(host.ConfigfsRdmaCM, dev.Name)
	act := reconcile.Action{Subject: reconcile.DeviceSubject(dev.Name), Kind: Configfs, To: "/" + dir}
	if dev.RoCEConfig || p.Host.Exists(dir) {
		act.Status = reconcile.Unchanged
		return act, true
	}
	if err := p.ensureCM(ctx); err != nil {
		act.Status, act.Err = reconcile.Failed, err
		return act, false
	}
	if err := p.Host.Mkdir(dir); err != nil && !errors.Is(err, fs.ErrExist) {
		act.Status = reconcile.Failed
		if errors.Is(err, syscall.ENODEV) {
			err = fmt.Errorf("kernel has no RDMA device %s (ENODEV): %w", dev.Name, err)
		}
		act.Err = fmt.Errorf("roce: mkdir %s: %w", "/"+dir, err)
		return act, false
	}
	dev.RoCEConfig = true
	for i := range dev.Ports {
		p.Host.ReadRoCE(dev.Name, &dev.Ports[i])
	}
	act.Status = reconcile.Changed
	return act, true
}

// Preload implements reconcile.Preloader: when pol has [[roce]] rules and
// configfs rdma_cm is missing, it loads rdma_cm now, so the first RoCE
// device of a boot does not wait for modprobe (ib_cm, iw_cm and rdma_cm are
// xz-compressed on 6.12 kernels: about a second under an emulated CPU). A
// device pass that needs rdma_cm meanwhile waits for this load rather than
// start its own. It returns nothing to do (false) when the policy declares
// no RoCE setting, rdma_cm is there, or the part has no loader.
func (p *Part) Preload(ctx context.Context, pol *config.Policy) (bool, error) {
	if pol == nil || len(pol.RoCE) == 0 || p.Loader == nil || p.Host.Exists(host.ConfigfsRdmaCM) {
		return false, nil
	}
	return true, p.ensureCM(ctx)
}

// ensureCM makes configfs rdma_cm exist, loading rdma_cm if need be.
func (p *Part) ensureCM(ctx context.Context) error {
	if p.Host.Exists(host.ConfigfsRdmaCM) {
		return nil
	}
	p.cmMu.Lock()
	defer p.cmMu.Unlock()
	if p.Host.Exists(host.ConfigfsRdmaCM) || p.Loader == nil {
		return p.cmMissing(nil)
	}
	loaded, err := p.Host.LoadedModules()
	if err != nil || loaded[CMModule] {
		return p.cmMissing(err)
	}
	// The load runs inside the pass: bound it well below modprobe's own
	// 90 s, so a module stuck on its way in cannot hold every later pass.
	ctx, cancel := context.WithTimeout(ctx, CMLoadTimeout)
	defer cancel()
	if err := p.Loader.Load(ctx, []string{CMModule}); err != nil {
		return p.cmMissing(err)
	}
	return p.cmMissing(nil)
}

func (p *Part) cmMissing(err error) error {
	switch {
	case p.Host.Exists(host.ConfigfsRdmaCM):
		return nil
	case err != nil:
		return fmt.Errorf("roce: /%s does not exist and loading %s failed: %w", host.ConfigfsRdmaCM, CMModule, err)
	}
	return fmt.Errorf("roce: /%s does not exist: is configfs mounted on /sys/kernel/config and the %s module loaded?", host.ConfigfsRdmaCM, CMModule)
}

// set writes one attribute if the observed value differs, then reads it
// back: configfs accepts some writes it does not keep, and a silent no-op
// is a failure. The port's observed value follows what the kernel shows.
func (p *Part) set(dev string, port *host.Port, kind reconcile.Kind, value string, src config.Position) reconcile.Action {
	act := reconcile.Action{Subject: reconcile.PortSubject(dev, port.Number), Kind: kind, To: value, Source: src.String()}
	act.From = observed(port, kind)
	act.Old, act.New = typed(kind, act.From), typed(kind, value)
	if act.From == value {
		act.Status = reconcile.Unchanged
		return act
	}
	got, err := write(p.Host, dev, port.Number, kind, value)
	if got != "" || err == nil {
		record(port, kind, got)
	}
	if err != nil {
		act.Status, act.Err = reconcile.Failed, err
		return act
	}
	act.Status = reconcile.Changed
	return act
}

// typed is a kernel value of kind in the type Old and New carry: a
// config.RoCEMode for a mode, an int for a TOS; nil when there is none (not
// read, or a text the kernel does not give for either).
func typed(kind reconcile.Kind, v string) any {
	if kind == Mode {
		if m, ok := config.RoCEModeFromKernel(v); ok {
			return m
		}
		return nil
	}
	if n, err := strconv.Atoi(v); err == nil {
		return n
	}
	return nil
}

// write sets one RoCE attribute of a port and reads it back; got is what
// the kernel shows afterwards ("" when it could not be read).
func write(h *host.Host, dev string, port int, kind reconcile.Kind, value string) (got string, err error) {
	attr := attrOf(kind)
	rel := host.ConfigfsPortPath(dev, port, attr)
	if err := h.WriteString(rel, value); err != nil {
		return "", fmt.Errorf("roce: set %s port %d %s to %q: %s: %w", dev, port, attr, value, explain(err), err)
	}
	s, err := h.ReadString(rel)
	if err != nil {
		return "", fmt.Errorf("roce: read back %s port %d %s: %w", dev, port, attr, err)
	}
	got = strings.TrimSpace(s)
	if got != value {
		return got, fmt.Errorf("roce: %s port %d %s: wrote %q but the kernel kept %q", dev, port, attr, value, got)
	}
	return got, nil
}

func attrOf(kind reconcile.Kind) string {
	if kind == Mode {
		return "default_roce_mode"
	}
	return "default_roce_tos"
}

func observed(p *host.Port, kind reconcile.Kind) string {
	if kind == Mode {
		return p.RoCEMode
	}
	if p.RoCETOS < 0 {
		return ""
	}
	return strconv.Itoa(p.RoCETOS)
}

func record(p *host.Port, kind reconcile.Kind, v string) {
	if kind == Mode {
		p.RoCEMode = v
		return
	}
	if n, err := strconv.Atoi(v); err == nil {
		p.RoCETOS = n
	}
}

// explain turns the errno configfs answers with into operator words.
func explain(err error) string {
	switch {
	case errors.Is(err, syscall.EINVAL):
		return "the kernel rejected the value"
	case errors.Is(err, syscall.EIO), errors.Is(err, syscall.EOPNOTSUPP):
		return "the port does not support this value"
	case errors.Is(err, syscall.ENODEV):
		return "the device went away"
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
		return "permission denied"
	case errors.Is(err, fs.ErrNotExist):
		return "the port has no such setting"
	}
	return "write failed"
}
