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
	changed := make([]bool, len(known))
	fresh := make([]host.Device, len(known))
	forEach(ctx, r.workers, len(known), func(i int) {
		d := known[i].Clone()
		for j := range d.Ports {
			if keep(&d, &d.Ports[j]) && r.host.RefreshPortState(d.Name, &d.Ports[j]) {
				changed[i] = true
			}
		}
		fresh[i] = d
	})
	var ch Change
	r.stateMu.Lock()
	for i, d := range fresh {
		ds, ok := r.devices[d.Name]
		if !changed[i] || !ok {
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
