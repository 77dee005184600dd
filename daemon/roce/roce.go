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
	"syscall"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/reconcile"
)

// Part is the RoCE device part of the reconciler.
type Part struct {
	Host *host.Host
}

// Name implements reconcile.DevicePart.
func (*Part) Name() string { return "roce" }

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
		name := reconcile.PortTarget(dev.Name, port.Number)
		if tr := dev.PortTransport(port); tr != host.TransportRoCE {
			acts = append(acts, reconcile.Action{
				Target: name, What: "roce", Status: reconcile.NotApplicable,
				Err:    fmt.Errorf("port transport is %s, RoCE settings apply to RoCE (Ethernet) ports", tr),
				Source: firstSource(want),
			})
			continue
		}
		if !dirReady {
			if act, ok := p.ensureDir(dev.Name); !ok {
				return append(acts, act)
			} else if act.Status == reconcile.Changed {
				acts = append(acts, act)
			}
			dirReady = true
		}
		if want.Mode != "" {
			acts = append(acts, p.set(dev.Name, port.Number, "default_roce_mode", "roce mode", want.Mode.Kernel(), want.ModeSource))
		}
		if want.TOS != nil {
			acts = append(acts, p.set(dev.Name, port.Number, "default_roce_tos", "roce tos", strconv.Itoa(*want.TOS), want.TOSSource))
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
// then fills in ports/<n>/. Returns ok=false with a failed action when the
// port settings cannot be reached.
func (p *Part) ensureDir(dev string) (reconcile.Action, bool) {
	dir := path.Join(host.ConfigfsRdmaCM, dev)
	act := reconcile.Action{Target: dev, What: "configfs rdma_cm", To: "/" + dir}
	if p.Host.Exists(dir) {
		act.Status = reconcile.Unchanged
		return act, true
	}
	if !p.Host.Exists(host.ConfigfsRdmaCM) {
		act.Status = reconcile.Failed
		act.Err = fmt.Errorf("roce: %s does not exist: is configfs mounted and the rdma_cm module loaded?", "/"+host.ConfigfsRdmaCM)
		return act, false
	}
	if err := p.Host.Mkdir(dir); err != nil && !errors.Is(err, fs.ErrExist) {
		act.Status = reconcile.Failed
		if errors.Is(err, syscall.ENODEV) {
			err = fmt.Errorf("kernel has no RDMA device %s (ENODEV): %w", dev, err)
		}
		act.Err = fmt.Errorf("roce: mkdir %s: %w", "/"+dir, err)
		return act, false
	}
	act.Status = reconcile.Changed
	return act, true
}

// set writes one attribute if it differs, then reads it back: configfs
// accepts some writes it does not keep, and a silent no-op is a failure.
func (p *Part) set(dev string, port int, attr, what, value string, src config.Position) reconcile.Action {
	rel := host.ConfigfsPortPath(dev, port, attr)
	act := reconcile.Action{Target: reconcile.PortTarget(dev, port), What: what, To: value, Source: src.String()}
	cur, err := p.Host.ReadString(rel)
	if err != nil {
		act.Status, act.Err = reconcile.Failed, fmt.Errorf("roce: read %s port %d %s: %w", dev, port, attr, err)
		return act
	}
	act.From = strings.TrimSpace(cur)
	if act.From == value {
		act.Status = reconcile.Unchanged
		return act
	}
	if err := p.Host.WriteString(rel, value); err != nil {
		act.Status, act.Err = reconcile.Failed, fmt.Errorf("roce: set %s port %d %s to %q: %s: %w", dev, port, attr, value, explain(err), err)
		return act
	}
	got, err := p.Host.ReadString(rel)
	if err != nil {
		act.Status, act.Err = reconcile.Failed, fmt.Errorf("roce: read back %s port %d %s: %w", dev, port, attr, err)
		return act
	}
	if strings.TrimSpace(got) != value {
		act.Status, act.Err = reconcile.Failed, fmt.Errorf("roce: %s port %d %s: wrote %q but the kernel kept %q", dev, port, attr, value, strings.TrimSpace(got))
		return act
	}
	act.Status = reconcile.Changed
	return act
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
	case errors.Is(err, fs.ErrNotExist):
		return "the port has no such setting"
	}
	return "write failed"
}
