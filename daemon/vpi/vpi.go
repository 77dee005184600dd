// Package vpi applies declared mlx4 VPI port types ([[vpi]] type = "ib" |
// "eth" | "auto") through the mlx4_core PCI device attribute mlx4_port<N>,
// as `echo eth > /sys/bus/pci/devices/<bdf>/mlx4_port1` does by hand.
package vpi

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/reconcile"
)

// Driver is the PCI driver that has VPI ports.
const Driver = host.DriverMLX4

// PortType is the kind of the action on a port's VPI type. Its Old is the
// config.VPIType the port had (VPIauto when it was on automatic sensing,
// whatever it sensed), its New the declared one; From keeps the kernel's
// text ("ib", "eth", "auto (eth)") for display.
const PortType = reconcile.KindVPIPortType

// Part is the VPI device part.
type Part struct {
	Host *host.Host
}

// Kinds implements reconcile.Part.
func (*Part) Kinds() []reconcile.Kind { return []reconcile.Kind{PortType} }

// Undo implements reconcile.Part: it writes the port's previous type back
// ("auto" when the port was on automatic sensing) and reads it back. The
// device re-registers, as it did for the change.
func (p *Part) Undo(_ context.Context, a reconcile.Action) error {
	if a.Kind != PortType {
		return fmt.Errorf("vpi: %s: %w", a.Kind, reconcile.ErrNotUndoable)
	}
	want, ok := a.Old.(config.VPIType)
	if !ok || want == "" || a.Subject.Kind != reconcile.SubjectPort {
		return fmt.Errorf("vpi: the previous type of %s is not known", a.Subject)
	}
	pciRel, err := p.pciDir(a.Subject.Device)
	if err != nil {
		return err
	}
	back := p.applyPort(pciRel, a.Subject.Port, want, reconcile.Action{Subject: a.Subject, Kind: PortType})
	if back.Status == reconcile.Failed {
		return back.Err
	}
	return nil
}

// Reregisters implements reconcile.Reregisterer: mlx4 unregisters and
// registers its RDMA device again when a port type changes.
func (*Part) Reregisters(a reconcile.Action) bool { return a.Kind == PortType }

// typeOf is the type the kernel's reading of mlx4_port<N> stands for: ib,
// eth, or auto for "auto (ib)" and "auto (eth)"; false for anything else
// (then an undo says the previous type is not known, rather than write
// back text it does not understand).
func typeOf(observed string) (config.VPIType, bool) {
	switch {
	case observed == string(config.VPIib):
		return config.VPIib, true
	case observed == string(config.VPIeth):
		return config.VPIeth, true
	case strings.HasPrefix(observed, "auto"):
		return config.VPIauto, true
	}
	return "", false
}

// Matches reports whether the kernel's reading of mlx4_port<N> (ib, eth,
// "auto (ib)", "auto (eth)") is the declared type.
func Matches(observed string, want config.VPIType) bool {
	observed = strings.TrimSpace(observed)
	if want == config.VPIauto {
		return strings.HasPrefix(observed, "auto")
	}
	return observed == string(want)
}

// Apply implements reconcile.DevicePart.
func (p *Part) Apply(ctx context.Context, pol *config.Policy, dev *host.Device) []reconcile.Action {
	if len(pol.VPI) == 0 {
		return nil
	}
	t := reconcile.TargetOf(dev)
	var acts []reconcile.Action
	var pciRel string
	var pciErr error
	resolved := false
	for _, port := range dev.Ports {
		want, src := pol.VPIFor(t, port.Number)
		if want == "" {
			continue
		}
		act := reconcile.Action{
			Subject: reconcile.PortSubject(dev.Name, port.Number),
			Kind:    PortType,
			To:      string(want),
			New:     want,
			Source:  src.String(),
		}
		if dev.Driver != Driver {
			act.Status = reconcile.NotApplicable
			act.Err = fmt.Errorf("not an mlx4 VPI device (driver %s)", orNone(dev.Driver))
			acts = append(acts, act)
			continue
		}
		if ctx.Err() != nil {
			break
		}
		// The PCI directory outlives the RDMA device: mlx4 unregisters and
		// re-registers its ib device when a port type changes, so the
		// attribute is addressed through the resolved PCI path.
		if !resolved {
			pciRel, pciErr = p.pciDir(dev.Name)
			resolved = true
		}
		if pciErr != nil {
			act.Status, act.Err = reconcile.Failed, pciErr
			acts = append(acts, act)
			continue
		}
		acts = append(acts, p.applyPort(pciRel, port.Number, want, act))
	}
	return acts
}

func (p *Part) applyPort(pciRel string, port int, want config.VPIType, act reconcile.Action) reconcile.Action {
	attr := path.Join(pciRel, "mlx4_port"+strconv.Itoa(port))
	cur, err := p.Host.ReadString(attr)
	if err != nil {
		act.Status = reconcile.Failed
		if errors.Is(err, fs.ErrNotExist) {
			act.Err = fmt.Errorf("vpi: port %d has no mlx4_port%d attribute (not a VPI port)", port, port)
		} else {
			act.Err = fmt.Errorf("vpi: read %s: %w", attr, err)
		}
		return act
	}
	cur = strings.TrimSpace(cur)
	act.From = cur
	if t, ok := typeOf(cur); ok {
		act.Old = t
	}
	if Matches(cur, want) {
		act.Status = reconcile.Unchanged
		return act
	}
	if err := p.Host.WriteString(attr, string(want)); err != nil {
		act.Status, act.Err = reconcile.Failed, fmt.Errorf("vpi: set port %d type %s: %w", port, want, err)
		return act
	}
	after, err := p.Host.ReadString(attr)
	if err != nil {
		act.Status, act.Err = reconcile.Failed, fmt.Errorf("vpi: read back %s: %w", attr, err)
		return act
	}
	if !Matches(after, want) {
		act.Status = reconcile.Failed
		act.Err = fmt.Errorf("vpi: port %d type reads %q after writing %q", port, strings.TrimSpace(after), want)
		return act
	}
	act.Status = reconcile.Changed
	return act
}

// pciDir resolves sys/class/infiniband/<dev>/device to its path under the
// root, relative to the root.
func (p *Part) pciDir(dev string) (string, error) {
	link := p.Host.Path(host.ClassInfiniband, dev, "device")
	real, err := filepath.EvalSymlinks(link)
	if err != nil {
		return "", fmt.Errorf("vpi: resolve %s/%s/device: %w", host.ClassInfiniband, dev, err)
	}
	root, err := filepath.EvalSymlinks(p.Host.Root)
	if err != nil {
		return "", fmt.Errorf("vpi: resolve root: %w", err)
	}
	rel, err := filepath.Rel(root, real)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", fmt.Errorf("vpi: device of %s resolves outside the host root: %s", dev, real)
	}
	return filepath.ToSlash(rel), nil
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
