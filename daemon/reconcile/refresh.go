package reconcile

import (
	"context"

	"github.com/rdmad/rdmad/daemon/host"
)

// RefreshPortStates re-reads the state and physical state of the ports
// keep selects (InfiniBand and OPA ports, whose state changes raise no
// event), and publishes the devices where either changed.
func (r *Reconciler) RefreshPortStates(ctx context.Context, keep func(d *host.Device, p *host.Port) bool) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	known := r.knownDevices()
	// A device is copied only when it has a port to read (this runs every
	// 10 s: copying a host of RoCE devices, none of which has one, grew
	// the heap by a megabyte at each run).
	fresh := make([]*host.Device, len(known))
	forEach(ctx, r.workers, len(known), func(i int) {
		var d *host.Device
		changed := false
		for j := range known[i].Ports {
			if !keep(known[i], &known[i].Ports[j]) {
				continue
			}
			if d == nil {
				c := known[i].Clone()
				d = &c
			}
			changed = r.host.RefreshPortState(d.Name, &d.Ports[j]) || changed
		}
		if changed {
			fresh[i] = d
		}
	})
	var ch Change
	r.stateMu.Lock()
	for _, d := range fresh {
		if d == nil {
			continue
		}
		ds, ok := r.devices[d.Name]
		if !ok {
			continue
		}
		c := cloneDeviceState(ds)
		for j := range c.Ports {
			if p := d.Port(c.Ports[j].Number); p != nil {
				c.Ports[j].State, c.Ports[j].PhysState = p.State, p.PhysState
				if cp := c.Device.Port(p.Number); cp != nil {
					cp.State, cp.PhysState = p.State, p.PhysState
				}
			}
		}
		r.devices[d.Name] = &c
		ch.Updated = append(ch.Updated, d.Name)
	}
	r.stateMu.Unlock()
	if len(ch.Updated) > 0 {
		r.notify(ch)
	}
	return ch.Updated
}
