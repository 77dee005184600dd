package doctor

import (
	"fmt"
	"path"
	"strconv"
	"strings"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host"
)

// What [[expect]] declares, judged: the speed of each port that is up,
// the PCIe link of each function; expect_missing.go judges the devices
// the rules require.

// parseRate reads sysfs ports/N/rate, "100 Gb/sec (4X EDR)": the rate in
// Gb/s and the width in lanes (0 when it does not say).
func parseRate(s string) (gbps float64, width int, ok bool) {
	f := strings.Fields(s)
	if len(f) < 2 || f[1] != "Gb/sec" {
		return 0, 0, false
	}
	gbps, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return 0, 0, false
	}
	if len(f) >= 3 {
		width, _ = config.ParseWidth(strings.TrimPrefix(f[2], "("))
	}
	return gbps, width, true
}

func formatGbps(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) + " Gb/s" }

// checkSpeed fails a port that is up below the rate or width an
// [[expect]] rule declares (a link trained at HDR instead of NDR, at 2X
// instead of 4X); true when nothing failed.
func (d *diag) checkSpeed(dev *host.Device, p *host.Port, want config.Expectation) bool {
	if want.Rate == 0 && want.Width == 0 {
		return true
	}
	s := portSubject(dev.Name, p.Number)
	name := fmt.Sprintf("%s/%d", dev.Name, p.Number)
	gbps, width, ok := parseRate(p.Rate)
	if !ok {
		d.fail("port-rate-low", s, fmt.Sprintf("%s: its rate cannot be read (%q), and [[expect]] at %s declares one", name, p.Rate, want.RateSource),
			"cat /sys/class/infiniband/"+dev.Name+"/ports/"+strconv.Itoa(p.Number)+"/rate; ibstat "+dev.Name)
		return false
	}
	good := true
	if want.Rate != 0 && gbps < want.Rate {
		good = false
		d.fail("port-rate-low", s, fmt.Sprintf("%s runs at %s (%s), below the %s [[expect]] at %s declares", name, formatGbps(gbps), p.Rate, formatGbps(want.Rate), want.RateSource),
			speedFix(dev, p))
	}
	if want.Width != 0 && width != 0 && width < want.Width {
		good = false
		d.fail("port-width-low", s, fmt.Sprintf("%s trained at %dX (%s), narrower than the %dX [[expect]] at %s declares: lanes are down", name, width, p.Rate, want.Width, want.WidthSource),
			speedFix(dev, p))
	}
	return good
}

func speedFix(dev *host.Device, p *host.Port) string {
	return fmt.Sprintf("check the cable (its rating and seating) and the peer port's speed; ibstat %s %d, or mlxlink -d %s -p %d, shows what was negotiated", dev.Name, p.Number, dev.Name, p.Number)
}

// expectedText ends an ok finding of a port that meets its expectations.
func expectedText(want config.Expectation) string {
	var parts []string
	if want.State == config.ExpectUp {
		parts = append(parts, "up")
	}
	if want.Rate != 0 {
		parts = append(parts, "at least "+formatGbps(want.Rate))
	}
	if want.Width != 0 {
		parts = append(parts, "at least "+strconv.Itoa(want.Width)+"X")
	}
	if len(parts) == 0 {
		return ""
	}
	src := want.StateSource
	if src.File == "" {
		src = want.RateSource
	}
	if src.File == "" {
		src = want.WidthSource
	}
	return "; as expected (" + strings.Join(parts, ", ") + ", [[expect]] at " + src.String() + ")"
}

// pcieSpeed reads current_link_speed and max_link_speed: "8.0 GT/s PCIe",
// "16.0 GT/s PCIe", older kernels "8 GT/s"; "Unknown" is not a speed.
func pcieSpeed(s string) (float64, bool) {
	f := strings.Fields(s)
	if len(f) < 2 || f[1] != "GT/s" {
		return 0, false
	}
	v, err := strconv.ParseFloat(f[0], 64)
	return v, err == nil && v > 0
}

// pcieWidth reads current_link_width and max_link_width ("16"; "x16" on
// some kernels).
func pcieWidth(s string) (int, bool) {
	n, err := strconv.Atoi(strings.TrimPrefix(strings.TrimSpace(s), "x"))
	return n, err == nil && n > 0
}

// pcieLink reads a PCI function's link attribute pair (current or max).
func (d *diag) pcieLink(dev *host.Device, which string) (config.PCIeLink, bool) {
	base := path.Join(host.ClassInfiniband, dev.Name, "device")
	gts, ok1 := pcieSpeed(readAttr(d.h, path.Join(base, which+"_link_speed")))
	lanes, ok2 := pcieWidth(readAttr(d.h, path.Join(base, which+"_link_width")))
	return config.PCIeLink{GTs: gts, Lanes: lanes}, ok1 && ok2
}

// checkPCIe: each device's PCI function trained at what it can do (a card
// in a slot wired x8, a link that came up at Gen1), or at what [[expect]]
// pcie declares. Virtual functions are left out: their link is their
// physical function's.
func (d *diag) checkPCIe() {
	for i := range d.devs {
		dev := &d.devs[i]
		if dev.PCIAddress == "" || d.h.IsVF(dev) {
			continue
		}
		var want *config.PCIeLink
		var src config.Position
		for j := range dev.Ports {
			if e := d.pol.ExpectFor(roceTarget(dev), dev.Ports[j].Number); e.PCIe != nil && !d.unjudged[PortRef{dev.Name, dev.Ports[j].Number}] {
				want, src = e.PCIe, e.PCIeSource
				break
			}
		}
		cur, ok := d.pcieLink(dev, "current")
		s := deviceSubject(dev.Name)
		where := fmt.Sprintf("%s (%s)", dev.Name, dev.PCIAddress)
		fix := fmt.Sprintf("reseat the adapter or move it to a slot that runs it at full width and speed, and check the slot's firmware setting; lspci -vv -s %s shows LnkSta against LnkCap", dev.PCIAddress)
		if !ok {
			if want != nil {
				d.fail("pcie-link-degraded", s, fmt.Sprintf("%s: the PCIe link cannot be read, and [[expect]] at %s declares %s", where, src, want), "lspci -vv -s "+dev.PCIAddress)
			}
			continue
		}
		if want != nil {
			if cur.Below(*want) {
				d.fail("pcie-link-degraded", s, fmt.Sprintf("%s: PCIe link %s, below the %s [[expect]] at %s declares", where, cur, want, src), fix)
			} else {
				d.ok("pcie-link", s, fmt.Sprintf("%s: PCIe link %s, as expected (at least %s, [[expect]] at %s)", where, cur, want, src))
			}
			continue
		}
		max, ok := d.pcieLink(dev, "max")
		switch {
		case !ok:
			d.ok("pcie-link", s, fmt.Sprintf("%s: PCIe link %s", where, cur))
		case cur.Below(max):
			d.warn("pcie-link-degraded", s, fmt.Sprintf("%s: PCIe link %s, below the %s the device can do: less bandwidth to the host than the adapter has", where, cur, max), fix)
		default:
			d.ok("pcie-link", s, fmt.Sprintf("%s: PCIe link %s, the most the device can do", where, cur))
		}
	}
}

// judged reports whether findings about a port are made: not for a port
// an [[expect]] rule declares unused.
func (d *diag) judged(dev string, port int) bool { return !d.unjudged[PortRef{dev, port}] }
