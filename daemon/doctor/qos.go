package doctor

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/dcb"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/qos"
)

// netdevDCB is what doctor knows of a netdev's DCB.
type netdevDCB struct {
	trust   string          // "dscp" or "pcp"
	pfc     []uint8         // priorities with PFC on
	dscp    map[uint8]uint8 // the APP table's DSCP entries
	caps    uint8           // DCBX capabilities, when hasCaps
	hasCaps bool
}

// dcbOf is the DCB of port p's netdev: as the qos part last read it, else
// read now through Input.DCB. ok is false when it is not known (no reader,
// no DCB on the netdev: a veth, virtio).
func (d *diag) dcbOf(p *host.Port, netdev string) (netdevDCB, bool) {
	if d.in.DCB == nil {
		if p.QoSKnown {
			return netdevDCB{trust: p.QoSTrust, pfc: p.QoSPFC, dscp: p.QoSDSCP}, true
		}
		return netdevDCB{}, false
	}
	ie, err := d.in.DCB.Get(netdev)
	if err != nil || ie.PFC == nil {
		return netdevDCB{}, false
	}
	return netdevDCB{trust: qos.TrustOf(ie), pfc: ie.PFC.Priorities(), dscp: ie.DSCPMap(), caps: ie.DCBX, hasCaps: ie.HasDCBX}, true
}

// checkLossless: is each RoCE port's traffic lossless? Its TOS gives the
// DSCP (TOS >> 2); with DSCP trust the APP table (else the default DSCP >>
// 3) gives the priority, and PFC must be on for that priority. A netdev
// with PFC on only for priorities no RoCE TOS maps to is a warning too.
// Virtual functions are skipped (their PF carries DCB); so are netdevs
// without DCB, and ports with TOS 0 that no rule declares.
func (d *diag) checkLossless() {
	type use struct {
		prios []uint8
		ports []string
		pfc   []uint8
	}
	uses := map[string]*use{}
	var netdevs []string
	var vfs []string
	for i := range d.devs {
		dev := &d.devs[i]
		vf := d.h.IsVF(dev)
		for j := range dev.Ports {
			p := &dev.Ports[j]
			if dev.PortTransport(p) != host.TransportRoCE {
				continue
			}
			t := roceTarget(dev)
			want := d.pol.RoCEFor(t, p.Number)
			declaredQoS := d.pol.QoSFor(t, p.Number)
			name := fmt.Sprintf("%s/%d", dev.Name, p.Number)
			if vf {
				if !declaredQoS.Empty() {
					vfs = append(vfs, name)
				}
				continue
			}
			tos := p.RoCETOS
			if want.TOS != nil {
				tos = *want.TOS
			}
			netdev := d.h.PortNetdev(dev, p)
			if netdev == "" || (tos <= 0 && want.TOS == nil && declaredQoS.Empty()) {
				continue
			}
			st, ok := d.dcbOf(p, netdev)
			if !ok {
				continue
			}
			// Who owns the netdev's DCB matters to any declared QoS, with
			// or without a TOS on the port.
			if !declaredQoS.Empty() {
				d.checkOwner(name, netdev, st, declaredQoS)
			}
			if tos <= 0 && want.TOS == nil {
				continue
			}
			s := portSubject(dev.Name, p.Number)
			dscp := uint8(tos >> 2)
			if st.trust != string(config.TrustDSCP) {
				if len(st.pfc) == 0 {
					d.warn("roce-lossless", s,
						fmt.Sprintf("RoCE on %s uses TOS %d = DSCP %d, but %s trusts PCP (the priority is the VLAN egress map's) and PFC is off for every priority: RoCE traffic is lossy", netdev, tos, dscp, netdev),
						qosFix(dev.Name, p.Number, []uint8{dscp >> 3}))
				} else {
					d.ok("roce-lossless", s,
						fmt.Sprintf("RoCE on %s uses TOS %d = DSCP %d; %s trusts PCP, so its priority depends on the VLAN egress map (ip -d link show); PFC on for %s", netdev, tos, dscp, netdev, qos.FormatPrios(st.pfc)))
				}
				continue
			}
			prio := dscp >> 3
			if v, ok := st.dscp[dscp]; ok {
				prio = v
			}
			u := uses[netdev]
			if u == nil {
				u = &use{pfc: st.pfc}
				uses[netdev] = u
				netdevs = append(netdevs, netdev)
			}
			if !slices.Contains(u.prios, prio) {
				u.prios = append(u.prios, prio)
			}
			u.ports = append(u.ports, name)
			if slices.Contains(st.pfc, prio) {
				d.ok("roce-lossless", s, fmt.Sprintf("RoCE on %s uses TOS %d = DSCP %d -> priority %d, PFC on for %d: lossless", netdev, tos, dscp, prio, prio))
				continue
			}
			pfc := append(slices.Clone(st.pfc), prio)
			slices.Sort(pfc)
			d.warn("roce-lossless", s,
				fmt.Sprintf("RoCE on %s uses TOS %d = DSCP %d -> priority %d, PFC off for %d: RoCE traffic is lossy", netdev, tos, dscp, prio, prio),
				qosFix(dev.Name, p.Number, pfc))
		}
	}
	sort.Strings(netdevs)
	for _, n := range netdevs {
		u := uses[n]
		if len(u.pfc) == 0 {
			continue
		}
		hit := false
		for _, p := range u.prios {
			hit = hit || slices.Contains(u.pfc, p)
		}
		if !hit {
			slices.Sort(u.prios)
			d.warn("roce-pfc-unused", netdevSubject(n),
				fmt.Sprintf("PFC is on for priorities %s of %s, but no RoCE TOS there maps to one of them (%s use %s)", qos.FormatPrios(u.pfc), n, strings.Join(u.ports, " "), qos.FormatPrios(u.prios)),
				"set pfc to the priority RoCE uses (see roce-lossless), or the TOS to one whose DSCP maps to a PFC priority")
		}
	}
	if len(vfs) > 0 {
		d.ok("qos-vf", hostSubject, fmt.Sprintf("[[qos]] selects virtual functions (%s): DCB exists only on their physical functions, whose traffic class they follow; QoS is set on the PFs", strings.Join(vfs, " ")))
	}
	if exists(d.h, qos.MLX4File) {
		d.checkInitramfs(qos.MLX4File, initramfsCheck{
			id: "qos-mlx4-initramfs-stale", module: "mlx4_en",
			needs:       func(m string) bool { return host.NormalizeModule(m) == "mlx4_en" },
			consequence: "the next boot loads mlx4_en with the old PFC options (pfctx/pfcrx)",
		})
	}
}

// checkOwner warns when a [[qos]] rule selects a netdev whose DCB another
// agent manages: rdmad does not write it.
func (d *diag) checkOwner(port, netdev string, st netdevDCB, want config.QoSDesired) {
	owner := ""
	switch {
	case st.hasCaps && (st.caps&dcb.CapHost == 0 || st.caps&dcb.CapLLDManaged != 0):
		owner = fmt.Sprintf("the adapter's firmware (DCBX capabilities %#02x)", st.caps)
	case qos.LLDPadManages(d.h, netdev):
		owner = "lldpad"
	default:
		return
	}
	d.warn("qos-owner", netdevSubject(netdev),
		fmt.Sprintf("[[qos]] at %s selects %s, but DCB of %s is managed by %s: rdmad does not write it", want.FirstSource(), port, netdev, owner),
		"hand DCB to the host (for firmware: set the adapter's DCBX to host/OS-controlled mode with the vendor tool; for lldpad: lldptool -T -i "+netdev+" -V PFC enableTx=no, or stop lldpad), or remove the rule")
}

// qosFix is the [[qos]] rule that makes a port lossless, as one TOML line
// a drop-in can hold, and the rdmactl command that does the same.
func qosFix(dev string, port int, pfc []uint8) string {
	list := make([]string, len(pfc))
	var args []string
	for i, p := range pfc {
		list[i] = fmt.Sprint(p)
		args = append(args, fmt.Sprint(p))
	}
	return fmt.Sprintf("declare the [[qos]] rule in a drop-in such as /etc/rdma/rdmad.d/50-qos.toml: qos = [{ device = %q, port = %d, trust = \"dscp\", pfc = [%s] }] (or: rdmactl qos set %s/%d --trust dscp --pfc %s --persist), and the same no-drop priority on the switch",
		config.Exact(dev).Text(), port, strings.Join(list, ", "), dev, port, strings.Join(args, ","))
}
