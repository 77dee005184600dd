package doctor

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host"
)

// checkRules: every [[roce]] and [[vpi]] rule applies to a port of a
// present device, as the reconciler applies it: the selector, the port,
// and what the setting needs (a RoCE port; an mlx4 VPI device). A rule that
// applies to nothing does nothing, silently: a typo in a device name, a
// PCI address from another host, a port the device lacks, a RoCE rule on
// InfiniBand ports. It is a warning, not a failure: a rule may wait for a
// device that appears later (a Soft-RoCE link, an SR-IOV VF).
func (d *diag) checkRules() {
	type rule struct {
		table string
		src   config.Position
		sel   config.Selector
		port  int
		// fits says whether the setting applies to a selected port.
		fits    func(*host.Device, *host.Port) bool
		notFits string
	}
	var rules []rule
	for _, r := range d.pol.RoCE {
		rules = append(rules, rule{"[[roce]]", r.Source, r.Selector, r.Port,
			func(dev *host.Device, p *host.Port) bool { return dev.PortTransport(p) == host.TransportRoCE },
			"only ports that are not RoCE (Ethernet), where mode and TOS do not apply"})
	}
	for _, r := range d.pol.VPI {
		rules = append(rules, rule{"[[vpi]]", r.Source, r.Selector, r.Port,
			func(dev *host.Device, _ *host.Port) bool { return dev.Driver == host.DriverMLX4 },
			"only devices that are not mlx4 VPI adapters (driver " + host.DriverMLX4 + ")"})
	}
	if len(rules) == 0 {
		return
	}
	unmatched := 0
	for _, r := range rules {
		selected, withPort := false, false
		applies := false
		for i := range d.devs {
			dev := &d.devs[i]
			if !r.sel.Matches(roceTarget(dev)) {
				continue
			}
			selected = true
			for j := range dev.Ports {
				p := &dev.Ports[j]
				if r.port != 0 && p.Number != r.port {
					continue
				}
				withPort = true
				applies = applies || r.fits(dev, p)
			}
		}
		if applies {
			continue
		}
		unmatched++
		what := "no device on this host"
		switch {
		case withPort:
			what = r.notFits
		case selected && r.port != 0:
			what = "no device with port " + strconv.Itoa(r.port)
		case selected:
			what = "only devices without ports"
		}
		where := "at " + r.src.String()
		fix := fmt.Sprintf("compare the rule at %s with the names, PCI addresses, drivers and ports rdmactl status shows; delete it if the device is gone for good", r.src)
		if r.src.IsRuntime() {
			where = "set at runtime (rdmactl roce set without --persist)"
			fix = "nothing to do if the device comes back; the rule lasts until rdmad restarts"
		}
		d.warn("rule-unmatched", hostSubject,
			fmt.Sprintf("the %s rule %s (%s) selects %s: it applies to nothing until that changes", r.table, where, selectorText(r.sel, r.port), what),
			fix)
	}
	if unmatched == 0 {
		d.ok("rules-matched", hostSubject, fmt.Sprintf("every [[roce]] and [[vpi]] rule (%d) applies to a port of a present device", len(rules)))
	}
}

// selectorText shows a rule's selector as its file spells it. The values
// are not quoted here: the finding is escaped once, when published.
func selectorText(sel config.Selector, port int) string {
	var parts []string
	for _, kv := range [][2]string{{"device", sel.Device.Text()}, {"guid", sel.GUID}, {"pci", sel.PCI}, {"netdev", sel.Netdev}, {"driver", sel.Driver}} {
		if kv[1] != "" {
			parts = append(parts, kv[0]+`="`+kv[1]+`"`)
		}
	}
	if port != 0 {
		parts = append(parts, "port "+strconv.Itoa(port))
	}
	if len(parts) == 0 {
		return "every device"
	}
	return strings.Join(parts, " ")
}
