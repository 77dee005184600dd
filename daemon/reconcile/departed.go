package reconcile

import (
	"sort"
	"time"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host"
)

// Departed is a device rdmad saw since it started and that is gone now
// (unplugged, its driver unbound, a dead adapter): what it was, so that an
// [[expect]] rule that misses it can name its PCI address and driver.
type Departed struct {
	config.Target
	Gone time.Time
}

// maxDeparted bounds the departed devices kept: a host whose devices come
// and go (SR-IOV VFs created and removed by a scheduler) must not grow
// rdmad's memory. The oldest are forgotten first.
const maxDeparted = 4096

// departure is one device removed by a commit, for the log.
type departure struct {
	dev host.Device
	// renamed is the device's new name when a device of the same
	// identity took its place in the same pass (rdma dev set NAME name).
	renamed string
	// ours: a change of rdmad's made the kernel unregister it (an mlx4
	// port type switch); it is expected back.
	ours bool
}

// noteDepartures keeps what the commit's removed devices were, and
// forgets a departed device whose identity is back. It runs under stateMu
// after the commit stored the pass's devices.
func (r *Reconciler) noteDepartures(removed []host.Device, res *passResult, at time.Time) []departure {
	if len(r.departed) > 0 {
		for _, d := range res.working {
			delete(r.departed, DeviceIdentity(d))
		}
	}
	if len(removed) == 0 {
		return nil
	}
	present := make(map[string]string, len(res.working))
	for _, d := range res.working {
		present[DeviceIdentity(d)] = d.Name
	}
	out := make([]departure, 0, len(removed))
	for i := range removed {
		d := &removed[i]
		id := DeviceIdentity(d)
		_, ours := res.unregistered[d.Name]
		out = append(out, departure{dev: *d, renamed: present[id], ours: ours})
		if present[id] != "" {
			continue
		}
		if r.departed == nil {
			r.departed = map[string]Departed{}
		}
		r.departed[id] = Departed{Target: TargetOf(d), Gone: at}
	}
	if len(r.departed) > maxDeparted {
		all := r.departedSorted()
		for _, d := range all[:len(all)-maxDeparted] {
			delete(r.departed, DeviceIdentity(&host.Device{Name: d.Name, NodeGUID: d.NodeGUID, PCIAddress: d.PCI}))
		}
	}
	return out
}

// departedSorted lists the departed devices, oldest first (by name for
// the same time). Callers hold stateMu.
func (r *Reconciler) departedSorted() []Departed {
	out := make([]Departed, 0, len(r.departed))
	for _, d := range r.departed {
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Gone.Equal(out[j].Gone) {
			return out[i].Gone.Before(out[j].Gone)
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// logDepartures says which devices went: a device that disappears while
// rdmad runs is a warning naming its PCI address (a dead adapter, a PCIe
// link gone down), unless it only changed its name or rdmad's own change
// made it register again.
func (r *Reconciler) logDepartures(ds []departure) {
	for _, d := range ds {
		attrs := []any{"device", d.dev.Name, "pci", d.dev.PCIAddress, "driver", d.dev.Driver, "guid", d.dev.NodeGUID}
		switch {
		case d.renamed != "":
			r.log.Info("RDMA device renamed", append(attrs, "name", d.renamed)...)
		case d.ours:
			r.log.Info("RDMA device unregistered by rdmad's change; it registers again", attrs...)
		default:
			r.log.Warn("RDMA device gone", attrs...)
		}
	}
}
