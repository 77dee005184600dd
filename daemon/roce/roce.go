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
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/config/value"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/reconcile"
)

// The part's settings and kinds.
var (
	// Mode is default_roce_mode of a port.
	Mode = reconcile.NewSetting[ModeValue](reconcile.Setting{
		Name: "roce_mode", Kind: "roce mode", Key: config.KeyRoCEMode, Title: "RoCE mode", Tools: []string{"cma_roce_mode"},
		Valid: reconcile.ValueRule(func(m ModeValue) error {
			if m.Other != "" {
				return fmt.Errorf("%s is not a RoCE mode", value.Quote(m.Other))
			}
			return m.Mode.Validate()
		}),
		Gauge: &reconcile.Gauge{Name: "rdmad_port_roce_mode_info", Label: "mode",
			Help: "The default RoCE mode of a RoCE port as the kernel holds it (configfs rdma_cm default_roce_mode: \"IB/RoCE v1\" or \"RoCE v2\") at the last read; always 1."},
	})
	// TOS is default_roce_tos of a port.
	TOS = reconcile.NewSetting[TOSValue](reconcile.Setting{
		Name: "roce_tos", Kind: "roce tos", Key: config.KeyRoCETOS, Title: "RoCE TOS", Tools: []string{"cma_roce_tos"},
		Valid: reconcile.ValueRule(func(t TOSValue) error { return value.TOS(int(t)) }),
		Gauge: &reconcile.Gauge{Name: "rdmad_port_roce_tos",
			Help: "The default RoCE type of service of a RoCE port as the kernel holds it (configfs rdma_cm default_roce_tos) at the last read, declared or not."},
	})
)

// Configfs is the kind of making a device's rdma_cm directory.
const Configfs reconcile.Kind = "configfs rdma_cm"

// The kernel's attribute files of the two settings, in each port's
// configfs directory.
const (
	modeFile = "default_roce_mode"
	tosFile  = "default_roce_tos"
)

// ModeValue is a port's RoCE mode: one of the two modes, or (observed
// only) the kernel's text when it names neither.
type ModeValue struct {
	Mode  config.RoCEMode `json:",omitempty"`
	Other string          `json:",omitempty"` // the kernel's text when it is neither mode
}

// String is the mode as the kernel writes it ("RoCE v2").
func (m ModeValue) String() string {
	if k := m.Mode.Kernel(); k != "" {
		return k
	}
	return m.Other
}

// Wire implements reconcile.Wired: Port.DesiredRoCEMode carries "v1" or
// "v2", Port.RoCEMode the kernel's text.
func (m ModeValue) Wire(declared bool) any {
	if declared {
		return string(m.Mode)
	}
	return m.String()
}

// parseMode is the mode configfs shows.
func parseMode(s string) ModeValue {
	s = strings.TrimSpace(s)
	if m, ok := config.RoCEModeFromKernel(s); ok {
		return ModeValue{Mode: m}
	}
	return ModeValue{Other: s}
}

// TOSValue is a port's RoCE type of service (value.TOSRange).
type TOSValue int

func (t TOSValue) String() string { return strconv.Itoa(int(t)) }

// Wire implements reconcile.Wired: Port.RoCETOS and DesiredRoCETOS are
// int32.
func (t TOSValue) Wire(bool) any { return int32(t) }

// parseTOS is the TOS configfs shows.
func parseTOS(s string) (TOSValue, error) {
	v, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || value.TOS(v) != nil {
		return 0, fmt.Errorf("%q is not a TOS (%s)", strings.TrimSpace(s), value.TOSRange)
	}
	return TOSValue(v), nil
}

// Kinds implements reconcile.Part.
func (*Part) Kinds() []reconcile.Kind {
	return []reconcile.Kind{Mode.Kind(), TOS.Kind(), TrafficClass.Kind(), Configfs}
}

// Settings implements reconcile.Part.
func (*Part) Settings() []*reconcile.Setting {
	return []*reconcile.Setting{Mode.Setting(), TOS.Setting(), TrafficClass.Setting()}
}

// Undo implements reconcile.Part: it writes a port's previous mode or TOS
// back and reads it back. Creating a device's rdma_cm directory is not
// undone: the directory only shows the kernel's defaults, and the kernel
// removes it with the device.
func (p *Part) Undo(_ context.Context, a reconcile.Action) error {
	if a.Kind == Configfs {
		return fmt.Errorf("the rdma_cm directory of %s is left in place (it shows the kernel's defaults and goes with the device): %w", a.Subject, reconcile.ErrNotUndoable)
	}
	if a.Subject.Kind != reconcile.SubjectPort {
		return fmt.Errorf("%s is not a port", a.Subject)
	}
	dev, port := a.Subject.Device, a.Subject.Port
	// The device's configfs directory may be gone (a rename removes it)
	// while the kernel keeps the values: make it again to reach them.
	if dir := path.Join(host.ConfigfsRdmaCM, dev); !p.Host.Exists(dir) {
		if err := p.Host.Mkdir(dir); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("mkdir /%s: %w", dir, err)
		}
	}
	cm := p.cm(dev)
	defer cm.close()
	switch a.Kind {
	case Mode.Kind():
		m, ok := Mode.Old(a)
		if !ok || m.Mode == "" {
			return fmt.Errorf("the previous mode of %s is not known (%q)", a.Subject, a.From)
		}
		if err := p.writeMode(cm, port, m); err != nil {
			return err
		}
		if got, err := p.readMode(cm, port); err != nil || got != m {
			return fmt.Errorf("put back mode %s on %s but the kernel shows %q (%v)", m, a.Subject, got, err)
		}
		return nil
	case TOS.Kind():
		t, ok := TOS.Old(a)
		if !ok {
			return fmt.Errorf("the previous TOS of %s is not known (%q)", a.Subject, a.From)
		}
		if err := p.writeTOS(cm, port, t); err != nil {
			return err
		}
		if got, err := p.readTOS(cm, port); err != nil || got != t {
			return fmt.Errorf("put back TOS %s on %s but the kernel shows %s (%v)", t, a.Subject, got, err)
		}
		return nil
	case TrafficClass.Kind():
		return p.undoTrafficClass(a)
	}
	return fmt.Errorf("%s: %w", a.Kind, reconcile.ErrNotUndoable)
}

// CMModule provides configfs rdma_cm.
const CMModule = "rdma_cm"

// CMLoadTimeout bounds loading rdma_cm within a pass.
const CMLoadTimeout = 20 * time.Second

// Loader loads kernel modules (daemon/modules.Modprobe in rdmad).
type Loader interface {
	Load(ctx context.Context, names []string) error
}

// Part is the RoCE device part of the reconciler.
type Part struct {
	Host *host.Host
	// Loader loads rdma_cm when configfs rdma_cm is missing, so RoCE
	// settings never wait for the other listed modules; nil: never load.
	Loader Loader

	cmMu sync.Mutex // one rdma_cm load at a time across devices
}

// Apply keeps the declared mode and TOS of every RoCE port of the device a
// [[roce]] rule selects, and records the kernel's values of the others
// when the daemon publishes them. A port that refuses a value fails alone;
// the other ports still run.
func (p *Part) ApplyDevice(ctx context.Context, run *reconcile.DeviceRun) {
	dev := run.Device
	target := reconcile.TargetOf(dev)
	cm := p.cm(dev.Name)
	defer cm.close()
	var dirErr error
	dirTried := false
	for i := range dev.Ports {
		port := &dev.Ports[i]
		want := run.Policy.RoCEFor(target, port.Number)
		subject := reconcile.PortSubject(dev.Name, port.Number)
		if tr := dev.PortTransport(port); tr != host.TransportRoCE {
			why := fmt.Errorf("port transport is %s, RoCE settings apply to RoCE (Ethernet) ports", tr)
			if want.Mode != "" {
				run.Add(Mode.NotApplicable(subject, ModeValue{Mode: want.Mode}, want.ModeSource, why))
			}
			if want.TOS != nil {
				run.Add(TOS.NotApplicable(subject, TOSValue(*want.TOS), want.TOSSource, why))
			}
			if want.TrafficClass.Set && want.TrafficClass.Value {
				run.Add(TrafficClass.NotApplicable(subject, TrafficClassValue{}, want.TrafficClass.Source, why))
			}
			continue
		}
		if want.Empty() {
			if run.Publish {
				m, merr := p.readMode(cm, port.Number)
				t, terr := p.readTOS(cm, port.Number)
				run.Record(Mode.Observe(subject, m, merr))
				run.Record(TOS.Observe(subject, t, terr))
				p.applyTrafficClass(run, dev.Name, port.Number, subject, want)
			}
			continue
		}
		if !dirTried {
			dirTried = true
			if run.ReadOnly() {
				dirErr = p.dirMissing(dev, cm)
			} else {
				act, err := p.ensureDir(ctx, dev, cm)
				if err != nil || act.Status == reconcile.Changed {
					run.Act(act)
				}
				dirErr = err
			}
		}
		watch := []string{host.ConfigfsPortPath(dev.Name, port.Number)}
		if want.Mode != "" {
			mode := ModeValue{Mode: want.Mode}
			if dirErr != nil {
				run.Record(refused(Mode.Refuse(subject, mode, want.ModeSource, dirErr)))
			} else {
				run.Add(Mode.Converge(run, reconcile.Target[ModeValue]{
					Subject: subject, Want: mode, Source: want.ModeSource, Watch: watch, Fix: p.modeFix(dev, port, want),
					Read:  func() (ModeValue, error) { return p.readMode(cm, port.Number) },
					Write: func(m ModeValue) error { return p.writeMode(cm, port.Number, m) },
				}))
			}
		} else if run.Publish && dirErr == nil {
			m, err := p.readMode(cm, port.Number)
			run.Record(Mode.Observe(subject, m, err))
		}
		if want.TOS != nil {
			tos := TOSValue(*want.TOS)
			if dirErr != nil {
				run.Record(refused(TOS.Refuse(subject, tos, want.TOSSource, dirErr)))
			} else {
				run.Add(TOS.Converge(run, reconcile.Target[TOSValue]{
					Subject: subject, Want: tos, Source: want.TOSSource, Watch: watch,
					Read:  func() (TOSValue, error) { return p.readTOS(cm, port.Number) },
					Write: func(t TOSValue) error { return p.writeTOS(cm, port.Number, t) },
				}))
			}
		} else if run.Publish && dirErr == nil {
			t, err := p.readTOS(cm, port.Number)
			run.Record(TOS.Observe(subject, t, err))
		}
		p.applyTrafficClass(run, dev.Name, port.Number, subject, want)
	}
}

// errNoDir says a device's rdma_cm directory is not there yet, where rdmad
// only reads: its settings are not known, not refused.
var errNoDir = errors.New("configfs rdma_cm has no directory for the device yet (rdmad makes it when it applies the policy)")

// dirMissing is errNoDir when the device's rdma_cm directory is missing.
func (p *Part) dirMissing(dev *host.Device, cm *cmDir) error {
	if dev.RoCEConfig || cm.dir().Open() || p.Host.Exists(path.Join(host.ConfigfsRdmaCM, dev.Name)) {
		return nil
	}
	return errNoDir
}

// refused is the record of a setting whose port could not be reached:
// refused, or unknown when rdmad only read.
func refused(_ reconcile.Action, rec reconcile.Record) reconcile.Record {
	if errors.Is(rec.Why, errNoDir) {
		rec.State = reconcile.Unknown
	}
	return rec
}

// modeFix is what an operator does about a declared mode that does not
// hold: a port whose GIDs lack the mode cannot take it, so the fix is the
// declaration.
func (p *Part) modeFix(dev *host.Device, port *host.Port, want config.RoCEDesired) string {
	kernel := want.Mode.Kernel()
	if len(port.GIDTypes) == 0 || slices.Contains(port.GIDTypes, kernel) {
		return ""
	}
	return fmt.Sprintf("%s/%d supports only %s: change mode at %s", dev.Name, port.Number, strings.Join(port.GIDTypes, ", "), want.ModeSource)
}

// ensureDir creates configfs rdma_cm/<dev> when it is missing; the kernel
// then fills in ports/<n>/ with default values. It loads rdma_cm first
// when configfs rdma_cm itself is missing. The error says why the port
// settings cannot be reached.
func (p *Part) ensureDir(ctx context.Context, dev *host.Device, cm *cmDir) (reconcile.Action, error) {
	dir := path.Join(host.ConfigfsRdmaCM, dev.Name)
	act := reconcile.Action{Subject: reconcile.DeviceSubject(dev.Name), Kind: Configfs, To: "/" + dir}
	if dev.RoCEConfig || cm.dir().Open() || p.Host.Exists(dir) {
		act.Status = reconcile.Unchanged
		return act, nil
	}
	if err := p.ensureCM(ctx); err != nil {
		act.Status, act.Err = reconcile.Failed, err
		return act, err
	}
	if err := p.Host.Mkdir(dir); err != nil && !errors.Is(err, fs.ErrExist) {
		act.Status = reconcile.Failed
		if errors.Is(err, syscall.ENODEV) {
			err = fmt.Errorf("kernel has no RDMA device %s (ENODEV): %w", dev.Name, err)
		}
		act.Err = fmt.Errorf("mkdir %s: %w", "/"+dir, err)
		return act, act.Err
	}
	dev.RoCEConfig = true
	act.Status = reconcile.Changed
	return act, nil
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
		return fmt.Errorf("/%s does not exist and loading %s failed: %w", host.ConfigfsRdmaCM, CMModule, err)
	}
	return fmt.Errorf("/%s does not exist: is configfs mounted on /sys/kernel/config and the %s module loaded?", host.ConfigfsRdmaCM, CMModule)
}

// cmDir is a device's configfs rdma_cm directory, opened at its first
// use and kept for the device's pass: its ports' mode and TOS are read
// and written relative to it, not by a path walked from the root each
// time. Until it opens (a device whose directory rdmad has yet to make,
// a test's AttrIO), they take the path from the root.
type cmDir struct {
	h   *host.Host
	dev string
	d   host.AttrDir
}

func (p *Part) cm(dev string) *cmDir { return &cmDir{h: p.Host, dev: dev} }

func (c *cmDir) dir() *host.AttrDir {
	if !c.d.Open() {
		c.d.Close()
		c.d, _ = c.h.OpenAttrDir(host.ConfigfsRdmaCM, c.dev)
	}
	return &c.d
}

func (c *cmDir) close() { c.d.Close() }

// attr is a port's attribute, relative to the device's directory.
func attr(port int, name string) string { return "ports/" + strconv.Itoa(port) + "/" + name }

// readMode reads a port's default_roce_mode.
func (p *Part) readMode(cm *cmDir, port int) (ModeValue, error) {
	s, err := cm.dir().ReadString(attr(port, modeFile))
	if err != nil {
		return ModeValue{}, fmt.Errorf("read %s port %d %s: %w", cm.dev, port, modeFile, err)
	}
	return parseMode(s), nil
}

// readTOS reads a port's default_roce_tos.
func (p *Part) readTOS(cm *cmDir, port int) (TOSValue, error) {
	s, err := cm.dir().ReadString(attr(port, tosFile))
	if err != nil {
		return 0, fmt.Errorf("read %s port %d %s: %w", cm.dev, port, tosFile, err)
	}
	t, err := parseTOS(s)
	if err != nil {
		return 0, fmt.Errorf("read %s port %d %s: %w", cm.dev, port, tosFile, err)
	}
	return t, nil
}

func (p *Part) writeMode(cm *cmDir, port int, m ModeValue) error {
	return p.write(cm, port, modeFile, m.Mode.Kernel())
}

func (p *Part) writeTOS(cm *cmDir, port int, t TOSValue) error {
	return p.write(cm, port, tosFile, t.String())
}

// write sets one RoCE attribute of a port; the caller reads it back:
// configfs accepts some writes it does not keep.
func (p *Part) write(cm *cmDir, port int, name, value string) error {
	if err := cm.dir().WriteString(attr(port, name), value); err != nil {
		return fmt.Errorf("set %s port %d %s to %q: %s: %w", cm.dev, port, name, value, explain(err), err)
	}
	return nil
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
