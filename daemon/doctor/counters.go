package doctor

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/health"
	"github.com/rdmad/rdmad/daemon/host"
)

// Error counters and link flaps, from the history the running daemon keeps
// (daemon/health): a counter that rose more than its threshold within the
// last hour fails, one at its maximum (InfiniBand PortCounters saturate)
// is a warning, and so is nothing when no history is kept (doctor outside
// the daemon).

// counterKinds sort the counters by what their rise says, for the fix.
var (
	physicalCounters = []string{"symbol_error", "link_error_recovery", "local_link_integrity_errors",
		"port_rcv_errors", "port_rcv_remote_physical_errors", "rx_icrc_encapsulated"}
	lossCounters = []string{"out_of_sequence", "packet_seq_err", "implied_nak_seq_err", "local_ack_timeout_err"}
)

func (d *diag) checkCounters() {
	v := d.in.Health
	if v == nil {
		return
	}
	for i := range d.devs {
		dev := &d.devs[i]
		for j := range dev.Ports {
			p := &dev.Ports[j]
			if !d.judged(dev.Name, p.Number) {
				continue
			}
			pv, ok := v.Ports[health.PortKey{Device: dev.Name, Port: p.Number}]
			if !ok || pv.To.IsZero() {
				continue // not sampled yet: the next run has it
			}
			d.checkPortCounters(dev, p, pv, v)
		}
	}
}

func (d *diag) checkPortCounters(dev *host.Device, p *host.Port, pv health.PortView, v *health.View) {
	s := portSubject(dev.Name, p.Number)
	name := fmt.Sprintf("%s/%d", dev.Name, p.Number)
	th := d.pol.Doctor.Counters
	var risen, saturated, missing []string
	var kinds []string
	read := 0
	var linkDowned uint64
	for _, c := range pv.Counters {
		if !c.Available {
			// Which driver statistics exist depends on the driver: one
			// that is absent says nothing.
			if cfg, _ := config.CounterNamed(c.Name); !cfg.HW || c.Why != "absent" {
				missing = append(missing, c.Name+" ("+c.Why+")")
			}
			continue
		}
		read++
		if c.Saturated {
			saturated = append(saturated, fmt.Sprintf("%s at %d", c.Name, c.Value))
		}
		if c.Name == "link_downed" {
			linkDowned = c.Increase // judged as flaps below
			continue
		}
		t := th.Threshold(c.Name)
		if c.Increase <= t.PerHour {
			continue
		}
		risen = append(risen, fmt.Sprintf("%s +%d (more than %d an hour, %s)", c.Name, c.Increase, t.PerHour, thresholdSource(t)))
		switch {
		case slices.Contains(physicalCounters, c.Name):
			kinds = appendOnce(kinds, "physical")
		case slices.Contains(lossCounters, c.Name):
			kinds = appendOnce(kinds, "loss")
		default:
			kinds = appendOnce(kinds, "congestion")
		}
	}
	if read == 0 {
		d.ok("counters", s, name+": no error counter available ("+strings.Join(firstFew(missing, 3), ", ")+"): not judged")
		return
	}
	over := overText(v.Now, pv.From)
	if len(saturated) > 0 {
		d.warn("counter-saturated", s,
			fmt.Sprintf("%s: %s: an InfiniBand PortCounter stops at its maximum, so its rises can no longer be seen", name, strings.Join(saturated, ", ")),
			fmt.Sprintf("reset the port's counters: perfquery -R -C %s -P %d (infiniband-diags)", dev.Name, p.Number))
	}
	if len(risen) > 0 {
		d.fail("counter-increase", s, fmt.Sprintf("%s: error counters rose %s: %s", name, over, strings.Join(risen, "; ")), counterFix(dev, p, kinds))
	} else {
		text := fmt.Sprintf("%s: %d error counters steady %s", name, read, over)
		if len(missing) > 0 {
			text += "; not available: " + strings.Join(firstFew(missing, 3), ", ")
		}
		d.ok("counters", s, text)
	}
	d.checkFlaps(dev, p, pv, v, linkDowned)
}

// checkFlaps: how often the port lost its link within the hour, from
// link_downed (which also sees InfiniBand losses shorter than the 10 s
// port poll) and, on an Ethernet port, the carrier losses rtnetlink
// reported for its netdev; the larger count, as both may see one loss.
func (d *diag) checkFlaps(dev *host.Device, p *host.Port, pv health.PortView, v *health.View, linkDowned uint64) {
	downs, from := linkDowned, "link_downed"
	if c := uint64(v.CarrierLosses[pv.Netdev]); pv.Netdev != "" && c > downs {
		downs, from = c, "carrier losses of "+pv.Netdev
	}
	t := d.pol.Doctor.Counters.Threshold("link_downed")
	if downs <= t.PerHour {
		return
	}
	d.fail("port-flapping", portSubject(dev.Name, p.Number),
		fmt.Sprintf("%s/%d lost its link %d times %s (%s; more than %d an hour, %s): the link flaps", dev.Name, p.Number, downs, overText(v.Now, pv.From), from, t.PerHour, thresholdSource(t)),
		counterFix(dev, p, []string{"physical"}))
}

func thresholdSource(t config.CounterThreshold) string {
	if t.Source.File == "" {
		return "the default"
	}
	return "[doctor.counters] at " + t.Source.String()
}

// overText says over which span a count was taken: the last hour, or
// since the first sample when that is more recent. The first sample's time
// is fixed, so the text does not change from one run to the next.
func overText(now, from time.Time) string {
	if now.Sub(from) >= health.Window {
		return "within the last hour"
	}
	return "since rdmad first read them at " + from.Format(time.RFC3339)
}

func counterFix(dev *host.Device, p *host.Port, kinds []string) string {
	var fixes []string
	for _, k := range kinds {
		switch k {
		case "physical":
			fixes = append(fixes, fmt.Sprintf("physical errors: reseat or replace the cable or transceiver and check the peer port (mlxlink -d %s -p %d shows the error rate)", dev.Name, p.Number))
		case "loss":
			fixes = append(fixes, "packets lost on the fabric: make RoCE traffic lossless ([[qos]] PFC on its priority, see the roce-lossless finding) and check the switch ports' drops")
		case "congestion":
			fixes = append(fixes, "congestion or discards: check PFC and ECN on the path, the switch's buffers, and that receivers post buffers fast enough")
		}
	}
	return strings.Join(fixes, "; ") + fmt.Sprintf("; raise a threshold in [doctor.counters] if this rate is normal here; perfquery -R -C %s -P %d resets the counters", dev.Name, p.Number)
}

func appendOnce(s []string, v string) []string {
	if slices.Contains(s, v) {
		return s
	}
	return append(s, v)
}

func firstFew(s []string, n int) []string {
	if len(s) <= n {
		return s
	}
	return append(append([]string{}, s[:n]...), fmt.Sprintf("%d more", len(s)-n))
}
