package doctor

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/reconcile"
)

// checkExpectRules: the devices the [[expect]] rules require are here. A
// rule that names one device (exact name, GUID, PCI address) or declares
// a count fails with expect-missing when fewer devices (ports, with port)
// match than it expects: a dead adapter, a PCIe link that did not train,
// a driver that did not bind. Its ports and metrics vanish with it, so
// nothing else would say so. A glob or driver rule without count, and a
// rule that only declares a port unused, may rightly match nothing on a
// host of a fleet: expect-unmatched, ok.
func (d *diag) checkExpectRules() {
	if len(d.pol.Expect) == 0 {
		return
	}
	short := 0
	for _, r := range d.pol.Expect {
		have := d.expectMatches(r)
		switch least := r.Least(); {
		case least > 0 && have < least:
			short++
			d.expectMissing(r, have)
		case have == 0:
			why := "it requires no device: a glob or driver rule without count"
			if r.Exact() {
				why = "it requires no device: it only declares a port unused"
			}
			d.ok("expect-unmatched", hostSubject, fmt.Sprintf("the [[expect]] rule at %s (%s) matches nothing on this host; %s", r.Source, selectorText(r.Selector, r.Port), why))
		}
	}
	if short == 0 {
		d.ok("expect-rules-matched", hostSubject, fmt.Sprintf("every device the [[expect]] rules (%d) require is here", len(d.pol.Expect)))
	}
}

// expectMatches counts what r selects: the present devices it matches, or
// with port, those ports of them.
func (d *diag) expectMatches(r config.ExpectRule) int {
	n := 0
	for i := range d.devs {
		dev := &d.devs[i]
		if !r.Selector.Matches(roceTarget(dev)) {
			continue
		}
		if r.Port == 0 {
			n++
			continue
		}
		for _, p := range dev.Ports {
			if p.Number == r.Port {
				n++
			}
		}
	}
	return n
}

// expectMissing is the finding of rule r, which matches have devices (or
// ports) of the Least it expects: the selector, what it expects, the
// devices it selects that rdmad saw go since it started (their PCI
// address and driver), and the fix.
func (d *diag) expectMissing(r config.ExpectRule, have int) {
	what := "devices"
	if r.Port != 0 {
		what = "ports"
	}
	var text strings.Builder
	fmt.Fprintf(&text, "the [[expect]] rule at %s (%s) ", r.Source, selectorText(r.Selector, r.Port))
	seen := "rdmad has not seen it since it started"
	switch name := d.presentNamed(r); {
	case r.Count > 0:
		fmt.Fprintf(&text, "expects at least %d %s%s, %d here", r.Count, what, expectedOf(r), have)
		seen = "rdmad saw none of them go since it started"
	case r.Port != 0 && name != "":
		fmt.Fprintf(&text, "expects port %d%s, which %s does not have", r.Port, expectedOf(r), name)
		seen = ""
	default:
		fmt.Fprintf(&text, "expects the device it names%s, which is not here", expectedOf(r))
	}
	gone := d.departedFor(r)
	for i, g := range gone {
		sep := ", "
		if i == 0 {
			sep = "; rdmad saw "
		}
		fmt.Fprintf(&text, "%s%s (PCI %s, driver %s) go at %s", sep, g.Name, orNone(g.PCI), orNone(g.Driver), g.Gone.UTC().Format(time.RFC3339))
	}
	if len(gone) == 0 && seen != "" {
		text.WriteString("; " + seen)
	}
	d.fail(IDExpectMissing, d.missingSubject(r, gone), text.String(), missingFix(r, gone))
}

// expectedOf says what else r expects of the device: ", up at 200 Gb/s".
func expectedOf(r config.ExpectRule) string {
	var parts []string
	if r.State != "" {
		parts = append(parts, string(r.State))
	}
	if r.Rate != 0 {
		parts = append(parts, "at least "+formatGbps(r.Rate))
	}
	if r.Width != 0 {
		parts = append(parts, "at least "+strconv.Itoa(r.Width)+"X")
	}
	if r.PCIe != nil {
		parts = append(parts, "PCIe "+r.PCIe.String())
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// presentNamed is the present device r selects, "" when none.
func (d *diag) presentNamed(r config.ExpectRule) string {
	for i := range d.devs {
		if r.Selector.Matches(roceTarget(&d.devs[i])) {
			return d.devs[i].Name
		}
	}
	return ""
}

// departedFor lists the devices rdmad saw go since it started that r
// selects, oldest first.
func (d *diag) departedFor(r config.ExpectRule) []reconcile.Departed {
	if d.in.State == nil {
		return nil
	}
	var out []reconcile.Departed
	for _, g := range d.in.State.Departed {
		if r.Selector.Matches(g.Target) {
			out = append(out, g)
		}
	}
	return out
}

// missingSubject is the device a finding names: the one the rule names by
// name, or the one rdmad saw go; the host when neither tells.
func (d *diag) missingSubject(r config.ExpectRule, gone []reconcile.Departed) reconcile.Subject {
	switch {
	case r.Count == 0 && !r.Device.Empty() && !r.Device.Pattern:
		return deviceSubject(r.Device.Name)
	case len(gone) == 1:
		return deviceSubject(gone[0].Name)
	}
	return hostSubject
}

// missingFix says where to look: the PCI function, the kernel's log of
// the driver, and the rule to change if the device is gone for good.
func missingFix(r config.ExpectRule, gone []reconcile.Departed) string {
	pci := r.PCI
	if pci == "" && len(gone) > 0 {
		pci = gone[0].PCI
	}
	look := "lspci -nn | grep -i -e infiniband -e ethernet"
	if pci != "" && !strings.ContainsAny(pci, "*?[") {
		look = "lspci -vv -s " + pci
	}
	return fmt.Sprintf("check the adapter: %s (is the PCI function there, its link trained?), journalctl -k (the driver's errors: firmware, PCIe, probe); rdmactl status lists the devices rdmad sees. If the device is gone for good, change the rule at %s", look, r.Source)
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
