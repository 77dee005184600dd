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

// PortType is a port's VPI type: mlx4_port<N>.
var PortType = reconcile.NewSetting[TypeValue](reconcile.Setting{
	Name: "vpi_type", Kind: "vpi port type", Key: config.KeyVPIType, Title: "VPI port type",
	Valid: reconcile.ValueRule(func(t TypeValue) error {
		switch {
		case t.Other != "":
			return fmt.Errorf("%q is not a VPI port type", t.Other)
		case t.Type != config.VPIib && t.Type != config.VPIeth && t.Type != config.VPIauto:
			return fmt.Errorf("%q is not a VPI port type: ib, eth or auto", t.Type)
		case t.Sensed != "" && (t.Type != config.VPIauto || (t.Sensed != string(config.VPIib) && t.Sensed != string(config.VPIeth))):
			return fmt.Errorf("%q is not what auto senses", t.Sensed)
		}
		return nil
	})})

// TypeValue is a VPI port type as mlx4_port<N> shows it: ib, eth, or auto
// with what automatic sensing found ("auto (eth)").
type TypeValue struct {
	Type   config.VPIType
	Sensed string `json:",omitempty"` // what auto sensed
	Other  string `json:",omitempty"` // the kernel's text when it is none of the types
}

func (t TypeValue) String() string {
	switch {
	case t.Other != "":
		return t.Other
	case t.Sensed != "":
		return fmt.Sprintf("%s (%s)", t.Type, t.Sensed)
	}
	return string(t.Type)
}

// Wire implements reconcile.Wired: Port.VPIType is the declared type.
func (t TypeValue) Wire(bool) any { return string(t.Type) }

// parseType is the type the kernel's reading of mlx4_port<N> stands for:
// ib, eth, or auto for "auto (ib)" and "auto (eth)"; any other text is
// kept as it is (then an undo says the previous type is not known, rather
// than write back text it does not understand).
func parseType(observed string) TypeValue {
	observed = strings.TrimSpace(observed)
	switch {
	case observed == string(config.VPIib):
		return TypeValue{Type: config.VPIib}
	case observed == string(config.VPIeth):
		return TypeValue{Type: config.VPIeth}
	case observed == string(config.VPIauto):
		return TypeValue{Type: config.VPIauto}
	case strings.HasPrefix(observed, "auto (") && strings.HasSuffix(observed, ")"):
		return TypeValue{Type: config.VPIauto, Sensed: strings.TrimSuffix(strings.TrimPrefix(observed, "auto ("), ")")}
	}
	return TypeValue{Other: observed}
}

// holds: a declared type holds when the port has it; auto holds whatever
// automatic sensing found.
func holds(have, want TypeValue) bool { return have.Other == "" && have.Type == want.Type }

// Part is the VPI device part.
type Part struct {
	Host *host.Host
}

// Kinds implements reconcile.Part.
func (*Part) Kinds() []reconcile.Kind { return []reconcile.Kind{PortType.Kind()} }

// Settings implements reconcile.Part.
func (*Part) Settings() []*reconcile.Setting { return []*reconcile.Setting{PortType.Setting()} }

// Undo implements reconcile.Part: it writes the port's previous type back
// ("auto" when the port was on automatic sensing) and reads it back. The
// device re-registers, as it did for the change.
func (p *Part) Undo(_ context.Context, a reconcile.Action) error {
	if a.Kind != PortType.Kind() {
		return fmt.Errorf("%s: %w", a.Kind, reconcile.ErrNotUndoable)
	}
	old, ok := PortType.Old(a)
	if !ok || old.Type == "" || a.Subject.Kind != reconcile.SubjectPort {
		return fmt.Errorf("the previous type of %s is not known", a.Subject)
	}
	pciRel, err := p.pciDir(a.Subject.Device)
	if err != nil {
		return err
	}
	attr := attrPath(pciRel, a.Subject.Port)
	if err := p.write(attr, a.Subject.Port, TypeValue{Type: old.Type}); err != nil {
		return err
	}
	if got, err := p.read(attr, a.Subject.Port); err != nil || !holds(got, old) {
		return fmt.Errorf("put back type %s on %s but the port reads %s (%v)", old.Type, a.Subject, got, err)
	}
	return nil
}

// RecreatesDevice implements reconcile.DeviceRecreator: mlx4 unregisters and
// registers its RDMA device again when a port type changes.
func (*Part) RecreatesDevice(a reconcile.Action) bool { return a.Kind == PortType.Kind() }

// Apply implements reconcile.DevicePart.
func (p *Part) ApplyDevice(ctx context.Context, run *reconcile.DeviceRun) {
	pol, dev := run.Policy, run.Device
	if len(pol.VPI) == 0 {
		return
	}
	t := reconcile.TargetOf(dev)
	var pciRel string
	var pciErr error
	resolved := false
	for _, port := range dev.Ports {
		d := pol.VPIFor(t, port.Number)
		want, src := d.Type, d.Source
		if want == "" {
			continue
		}
		subject := reconcile.PortSubject(dev.Name, port.Number)
		typ := TypeValue{Type: want}
		if dev.Driver != host.DriverMLX4 {
			run.Add(PortType.NotApplicable(subject, typ, src, fmt.Errorf("not an mlx4 VPI device (driver %s)", orNone(dev.Driver))))
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
			run.Add(PortType.Refuse(subject, typ, src, pciErr))
			continue
		}
		attr, n := attrPath(pciRel, port.Number), port.Number
		run.Add(PortType.Converge(run, reconcile.Target[TypeValue]{
			Subject: subject, Want: typ, Source: src, Holds: holds,
			Read:  func() (TypeValue, error) { return p.read(attr, n) },
			Write: func(w TypeValue) error { return p.write(attr, n, w) },
		}))
	}
}

func attrPath(pciRel string, port int) string {
	return path.Join(pciRel, "mlx4_port"+strconv.Itoa(port))
}

func (p *Part) read(attr string, port int) (TypeValue, error) {
	cur, err := p.Host.ReadString(attr)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return TypeValue{}, fmt.Errorf("port %d has no mlx4_port%d attribute (not a VPI port)", port, port)
	case err != nil:
		return TypeValue{}, fmt.Errorf("read %s: %w", attr, err)
	}
	return parseType(cur), nil
}

func (p *Part) write(attr string, port int, t TypeValue) error {
	if err := p.Host.WriteString(attr, string(t.Type)); err != nil {
		return fmt.Errorf("set port %d type %s: %w", port, t.Type, err)
	}
	return nil
}

// pciDir resolves sys/class/infiniband/<dev>/device to its path under the
// root, relative to the root.
func (p *Part) pciDir(dev string) (string, error) {
	link := p.Host.Path(host.ClassInfiniband, dev, "device")
	real, err := filepath.EvalSymlinks(link)
	if err != nil {
		return "", fmt.Errorf("resolve %s/%s/device: %w", host.ClassInfiniband, dev, err)
	}
	root, err := filepath.EvalSymlinks(p.Host.Root)
	if err != nil {
		return "", fmt.Errorf("resolve root: %w", err)
	}
	rel, err := filepath.Rel(root, real)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", fmt.Errorf("device of %s resolves outside the host root: %s", dev, real)
	}
	return filepath.ToSlash(rel), nil
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
