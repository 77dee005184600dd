package doctor

import (
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/health"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/reconcile"
)

// checkLinks: every declared soft link exists, or says what it waits for.
func (d *diag) checkLinks() {
	for _, l := range d.pol.Links {
		s := linkSubject(l.Name)
		add := fmt.Sprintf("rdma link add %s type %s netdev %s", l.Name, l.Type, l.Netdev)
		switch {
		case d.device(l.Name) != nil:
			d.ok("link-present", s, fmt.Sprintf("soft RDMA link %s (%s on %s, %s) exists", l.Name, l.Type, l.Netdev, l.Source))
		case !d.h.NetdevExists(l.Netdev):
			d.warn("link-waiting", s,
				fmt.Sprintf("soft RDMA link %s (%s) waits for network interface %s, which does not exist", l.Name, l.Source, l.Netdev),
				fmt.Sprintf("create %s, or change netdev of [[link]] %s at %s", l.Netdev, l.Name, l.Source))
		case l.Type == config.LinkSIW && d.kernelLacks("siw"):
			d.fail("link-missing", s,
				fmt.Sprintf("soft RDMA link %s (%s) is missing: this kernel has no siw module (Debian builds none)", l.Name, l.Source),
				fmt.Sprintf("use Soft-RoCE instead: type = \"rxe\" for [[link]] %s at %s", l.Name, l.Source))
		default:
			d.fail("link-missing", s,
				fmt.Sprintf("soft RDMA link %s (%s on %s, %s) does not exist%s", l.Name, l.Type, l.Netdev, l.Source, d.lastError(l.Name, 0)),
				add)
		}
	}
}

// kernelLacks reports whether the running kernel's modules.dep exists and
// has no module of that name, and it is not built in or loaded.
func (d *diag) kernelLacks(module string) bool {
	deps := d.moduleDeps()
	if deps == nil || d.loadedModules()[module] {
		return false
	}
	_, ok := deps[module]
	return !ok && len(d.missingModules(module)) == 1
}

// moduleDeps is the running kernel's modules.dep (host.ModuleDeps), read
// once per run; nil when it cannot be read.
func (d *diag) moduleDeps() map[string][]string {
	if d.modDeps == nil {
		if deps, err := d.h.ModuleDeps(); err == nil {
			d.modDeps = deps
		}
	}
	return d.modDeps
}

func (d *diag) device(name string) *host.Device {
	for i := range d.devs {
		if d.devs[i].Name == name {
			return &d.devs[i]
		}
	}
	return nil
}

// lastError quotes the last reconcile error of a port or device, for the
// end of a finding: "" when there is none.
func (d *diag) lastError(dev string, port int) string {
	if e := d.in.Errors[PortRef{dev, port}]; e != "" {
		return " (last pass: " + firstLine(e) + ")"
	}
	return ""
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// checkPorts: devices present, and each port as the site expects it
// ([[expect]]): without an expectation a port that is down, uncabled or
// polling is a warning (a second port left unused is common), with
// state = "up" it fails, with state = "down" nothing is judged.
func (d *diag) checkPorts() {
	if len(d.devs) == 0 {
		d.fail("no-device", hostSubject, "no RDMA device: /"+host.ClassInfiniband+" is empty",
			"load the adapter's driver (modprobe mlx5_ib, mlx4_ib, hfi1...), or add a Soft-RoCE device: "+
				d.pol.API.Declaring("rdmactl link add rxe0 --type rxe --netdev IF --persist", true,
					`declare it in /etc/rdma/rdmad.toml: [[link]] name = "rxe0", type = "rxe", netdev = "IF"`))
		return
	}
	for i := range d.devs {
		dev := &d.devs[i]
		if len(dev.Ports) == 0 {
			d.fail("port-not-active", deviceSubject(dev.Name), "device "+dev.Name+" has no ports in sysfs", "journalctl -k -g "+dev.Name)
			continue
		}
		for j := range dev.Ports {
			d.checkPort(dev, &dev.Ports[j])
		}
	}
}

// fabricManaged reports whether a transport needs a subnet manager.
func fabricManaged(t host.Transport) bool {
	return t == host.TransportInfiniBand || t == host.TransportOPA
}

// SMGrace is how long a port with its link up may wait for a subnet
// manager before doctor fails it: from the first time the running rdmad
// saw the link up (or from rdmad's start). A subnet manager sweeps within
// seconds of a new link; a port still unconfigured after two minutes has
// none.
const SMGrace = 2 * time.Minute

func (d *diag) checkPort(dev *host.Device, p *host.Port) {
	s := portSubject(dev.Name, p.Number)
	t := dev.PortTransport(p)
	name := fmt.Sprintf("%s/%d", dev.Name, p.Number)
	state := fmt.Sprintf("state %s, physical state %s", orUnknown(p.State), orUnknown(p.PhysState))
	netdev := portNetdev(dev, p)
	want := d.pol.ExpectFor(roceTarget(dev), p.Number)
	if want.State == config.ExpectDown {
		d.unjudged[PortRef{dev.Name, p.Number}] = true
		d.ok("port-expected-down", s, fmt.Sprintf("%s (%s) is not judged: unused by design, [[expect]] state = \"down\" at %s", name, state, want.StateSource))
		return
	}
	sev, expected := SeverityWarn, ""
	if want.State == config.ExpectUp {
		sev, expected = SeverityFail, fmt.Sprintf("; [[expect]] at %s says up", want.StateSource)
	}
	up := p.State == "ACTIVE" && (p.PhysState == "LinkUp" || p.PhysState == "")
	if !up && netdev != "" && !fabricManaged(t) {
		// An Ethernet port follows its netdev, and mlx5 reports physical
		// state Disabled both for an interface set down and for one
		// without carrier: the netdev's flags tell them apart.
		switch d.netdevLink(netdev) {
		case linkAdminDown:
			d.add(sev, "port-admin-down", s, name+" is down: its network interface "+netdev+" is administratively down ("+state+")"+expected,
				"ip link set dev "+netdev+" up, and bring it up in its network configuration (NetworkManager, systemd-networkd, ifupdown)")
			return
		case linkNoCarrier:
			d.add(sev, "port-no-carrier", s, name+" has no link: "+netdev+" is up but has no carrier ("+state+")"+expected,
				"check the cable, the transceiver and the switch port: ethtool "+netdev)
			return
		}
	}
	switch {
	case p.PhysState == "Disabled":
		fix := "ip link set dev " + netdev + " up"
		if netdev == "" || fabricManaged(t) {
			fix = fmt.Sprintf("enable the port: ibportstate -C %s -P %d -D 0 %d enable (or on the switch)", dev.Name, p.Number, p.Number)
		}
		d.add(sev, "port-disabled", s, name+" is administratively disabled: "+state+expected, fix)
	case p.PhysState != "" && p.PhysState != "LinkUp":
		fix := fmt.Sprintf("check the cable and the peer port: ibstat %s %d", dev.Name, p.Number)
		if netdev != "" && !fabricManaged(t) {
			fix = "check the cable and the switch port: ethtool " + netdev
		}
		d.add(sev, "port-link-down", s, name+" has no physical link (uncabled, or the peer is down): "+state+expected, fix)
	case fabricManaged(t) && (p.State == "INIT" || p.State == "ARMED" || (p.State == "ACTIVE" && !lidSet(p.SMLID))):
		d.noSubnetManager(dev, p, t, state)
	case p.State != "ACTIVE":
		d.add(sev, "port-not-active", s, name+" is not ACTIVE: "+state+d.lastError(dev.Name, p.Number)+expected,
			fmt.Sprintf("rdma link show %s; journalctl -k -g %s", name, dev.Name))
	default:
		desc := []string{"ACTIVE", p.PhysState}
		if p.Rate != "" {
			desc = append(desc, p.Rate)
		}
		if p.LinkLayer != "" {
			desc = append(desc, p.LinkLayer)
		}
		if fabricManaged(t) {
			desc = append(desc, "LID "+p.LID+", SM LID "+p.SMLID)
		}
		if netdev != "" {
			desc = append(desc, "netdev "+netdev)
		}
		if d.checkSpeed(dev, p, want) {
			d.ok("port-active", s, name+": "+strings.Join(desc, ", ")+expectedText(want))
		}
	}
}

// noSubnetManager: an InfiniBand or Omni-Path port with its link up that
// no subnet manager has configured. Within SMGrace of the link coming up
// it is a warning (the SM sweeps soon), then a failure.
func (d *diag) noSubnetManager(dev *host.Device, p *host.Port, t host.Transport, state string) {
	s := portSubject(dev.Name, p.Number)
	finding := fmt.Sprintf("%s/%d: link up but no subnet manager has configured it (%s, sm_lid %s)", dev.Name, p.Number, state, orUnknown(p.SMLID))
	if since, ok := d.linkUpSince(dev.Name, p.Number); ok {
		if up := d.now().Sub(since); up < SMGrace {
			d.warn("port-no-sm", s, fmt.Sprintf("%s; link up for %s: this fails once it has been up for %s", finding, up.Round(time.Second), SMGrace), smFix(t))
			return
		}
	}
	d.fail("port-no-sm", s, finding, smFix(t))
}

// now is the time of the run: the history's, else the clock's.
func (d *diag) now() time.Time {
	if d.in.Health != nil {
		return d.in.Health.Now
	}
	return time.Now()
}

// linkUpSince is when the running rdmad saw the port's link come up, no
// earlier than rdmad's start; a port it has not seen up yet came up now.
// ok is false without a history.
func (d *diag) linkUpSince(dev string, port int) (time.Time, bool) {
	v := d.in.Health
	if v == nil {
		return time.Time{}, false
	}
	pv, ok := v.Ports[health.PortKey{Device: dev, Port: port}]
	if !ok || pv.LinkUpSince.IsZero() {
		return v.Now, true
	}
	if pv.LinkUpSince.Before(v.Start) {
		return v.Start, true
	}
	return pv.LinkUpSince, true
}

func smFix(t host.Transport) string {
	if t == host.TransportOPA {
		return "start the fabric manager on one host of the fabric: systemctl enable --now opafm (or the switch's)"
	}
	return "start a subnet manager on one host of the fabric: systemctl enable --now opensm (or enable the switch's SM)"
}

// lidSet reports whether a sysfs LID ("0x1") is assigned: 0 means no
// subnet manager has set it.
func lidSet(s string) bool {
	v, err := strconv.ParseUint(s, 0, 16)
	return err == nil && v != 0
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// portNetdev is the network interface of an Ethernet port: its GID table's,
// else the device's only one (a port that is down may have no GIDs).
func portNetdev(dev *host.Device, p *host.Port) string {
	if len(p.Netdevs) > 0 {
		return p.Netdevs[0]
	}
	if dev.Parent != "" {
		return dev.Parent
	}
	if len(dev.Ports) == 1 && len(dev.Netdevs) == 1 {
		return dev.Netdevs[0]
	}
	return ""
}

// roceTarget is the selector target of a device, as reconcile builds it.
func roceTarget(dev *host.Device) config.Target { return reconcile.TargetOf(dev) }

// checkIPoIB: every IPoIB interface (type 32) with its mode and MTU, and
// whether they fit each other. The port's IB MTU is not in sysfs (it is a
// verbs query, ibv_devinfo's active_mtu), but the kernel clamps a datagram
// MTU to it, so the limits checked are the protocol's: datagram carries at
// most the largest IB MTU less the 4-byte IPoIB header (4092), connected
// mode at most 65520.
func (d *diag) checkIPoIB() {
	names, err := boundedDir(d.h, host.ClassNet)
	if err != nil {
		return
	}
	for _, n := range names {
		base := path.Join(host.ClassNet, n)
		if readAttr(d.h, path.Join(base, "type")) != "32" { // ARPHRD_INFINIBAND
			continue
		}
		s := netdevSubject(n)
		mode := readAttr(d.h, path.Join(base, "mode"))
		mtu, err := strconv.Atoi(readAttr(d.h, path.Join(base, "mtu")))
		if err != nil {
			mtu = 0
		}
		where := d.ipoibPort(n)
		desc := fmt.Sprintf("IPoIB %s%s: %s mode, MTU %d", n, where, orUnknown(mode), mtu)
		switch {
		case mode == "datagram" && mtu > 4092:
			d.fail("ipoib-mtu-too-large", s, desc+": datagram mode carries at most the IB MTU less 4 bytes (4092 at IB MTU 4096)",
				fmt.Sprintf("ip link set dev %s mtu 4092, or use connected mode: echo connected > /sys/class/net/%s/mode (nmcli: infiniband.transport-mode connected)", n, n))
		case mode == "connected" && mtu > 65520:
			d.fail("ipoib-mtu-too-large", s, desc+": connected mode carries at most 65520",
				"ip link set dev "+n+" mtu 65520")
		case mode == "connected" && mtu > 0 && mtu <= 4092:
			d.warn("ipoib-connected-small-mtu", s, desc+": connected mode gains nothing over datagram at this MTU and costs kernel memory",
				fmt.Sprintf("ip link set dev %s mtu 65520 (nmcli connection modify %s infiniband.mtu 65520)", n, n))
		default:
			d.ok("ipoib", s, desc)
		}
	}
}

// ipoibPort names the RDMA port an IPoIB interface sits on, " on mlx4_0/1",
// from its PCI function and dev_port (port - 1, as ipoib_parent_init sets
// it); "" for a child (P_Key) interface or when it cannot be told.
func (d *diag) ipoibPort(netdev string) string {
	base := path.Join(host.ClassNet, netdev)
	link, err := readlinkHost(d.h, path.Join(base, "device"))
	if err != nil {
		return ""
	}
	pci := path.Base(link)
	port := 1
	if v, err := strconv.Atoi(readAttr(d.h, path.Join(base, "dev_port"))); err == nil {
		port = v + 1
	}
	for i := range d.devs {
		if d.devs[i].PCIAddress == pci && d.devs[i].Port(port) != nil {
			return fmt.Sprintf(" on %s/%d", d.devs[i].Name, port)
		}
	}
	return ""
}
