package doctor

import (
	"fmt"
	"strconv"

	"github.com/rdmad/rdmad/daemon/config"
)

// checkRules: every [[roce]] and [[vpi]] rule selects a port of a present
// device. A rule that selects nothing is applied to nothing, silently: a
// typo in a device name, a PCI address from another host, or a port the
// device does not have. It is a warning, not a failure: a rule may wait
// for a device that appears later (a Soft-RoCE link, an SR-IOV VF).
func (d *diag) checkRules() {
	type rule struct {
		table string
		src   config.Position
		sel   config.Selector
		port  int
	}
	var rules []rule
	for _, r := range d.pol.RoCE {
		rules = append(rules, rule{"[[roce]]", r.Source, r.Selector, r.Port})
	}
	for _, r := range d.pol.VPI {
		rules = append(rules, rule{"[[vpi]]", r.Source, r.Selector, r.Port})
	}
	if len(rules) == 0 {
		return
	}
	unmatched := 0
	for _, r := range rules {
		if d.selectsAPort(r.sel, r.port) {
			continue
		}
		unmatched++
		what := "no device on this host"
		if r.port != 0 && d.selectsAPort(r.sel, 0) {
			what = "no device with port " + strconv.Itoa(r.port)
		}
		d.warn("rule-unmatched", hostSubject,
			fmt.Sprintf("the %s rule at %s (%s) selects %s: it applies to nothing until one appears", r.table, r.src, selectorText(r.sel, r.port), what),
			fmt.Sprintf("compare the rule at %s with the names, PCI addresses, drivers and ports rdmactl status shows; delete it if the device is gone for good", r.src))
	}
	if unmatched == 0 {
		d.ok("rules-matched", hostSubject, fmt.Sprintf("every [[roce]] and [[vpi]] rule (%d) selects a port of a present device", len(rules)))
	}
}

// selectsAPort reports whether sel picks a present device that has port
// (0: any port).
func (d *diag) selectsAPort(sel config.Selector, port int) bool {
	for i := range d.devs {
		dev := &d.devs[i]
		if !sel.Matches(roceTarget(dev)) {
			continue
		}
		if port == 0 || dev.Port(port) != nil {
			return true
		}
	}
	return false
}

// selectorText shows a rule's selector, as its file spells it.
func selectorText(sel config.Selector, port int) string {
	s := sel.String()
	if s == "" {
		s = "every device"
	}
	if port != 0 {
		s += fmt.Sprintf(" port %d", port)
	}
	return s
}
