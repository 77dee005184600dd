package qos

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/dcb"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/initramfs"
	"github.com/rdmad/rdmad/daemon/reconcile"
)

// Check implements reconcile.Checker: is each RoCE port's traffic
// lossless? Its TOS gives the DSCP (TOS >> 2); with DSCP trust the APP
// table (else the default DSCP >> 3) gives the priority, and PFC must be
// on for that priority. A netdev with PFC on only for priorities no RoCE
// TOS maps to is a warning too, and so is a [[qos]] rule on a netdev
// whose DCB another agent manages. Virtual functions are skipped (their
// PF carries DCB); so are netdevs without DCB, and ports with TOS 0 that
// no rule declares. Whether each declared setting holds is in the records.
func (p *Part) Check(_ context.Context, in *reconcile.CheckInput) []reconcile.Note {
	c := &checker{p: p, in: in}
	c.lossless()
	return c.notes
}

type checker struct {
	p     *Part
	in    *reconcile.CheckInput
	notes []reconcile.Note
}

func (c *checker) note(sev reconcile.Severity, id string, s reconcile.Subject, finding, fix string) {
	c.notes = append(c.notes, reconcile.Note{ID: id, Subject: s, Severity: sev, Finding: finding, Fix: fix})
}

// portTOS is the port's RoCE TOS, as its records hold it: the declared
// one, else the kernel's; ok false when neither is known. It reads the
// records of the key that declares a TOS, through the value's Wire.
func portTOS(recs []reconcile.Record) (tos int, declared, ok bool) {
	for _, r := range recs {
		if r.Setting == nil || r.Setting.Key != config.KeyRoCETOS {
			continue
		}
		if w, isWired := r.Declared.(reconcile.Wired); isWired && r.IsDeclared() {
			if v, isInt := w.Wire(true).(int32); isInt {
				return int(v), true, true
			}
		}
		if w, isWired := r.Observed.(reconcile.Wired); isWired {
			if v, isInt := w.Wire(false).(int32); isInt {
				return int(v), false, true
			}
		}
	}
	return 0, false, false
}

// netdevDCB is what the check knows of a netdev's DCB.
type netdevDCB struct {
	trust string          // "dscp" or "pcp"
	pfc   []uint8         // priorities with PFC on
	dscp  map[uint8]uint8 // the APP table's DSCP entries
	ie    dcb.IEEE
}

// dcbOf reads the DCB of netdev; ok is false when it has none (a veth,
// virtio).
func (c *checker) dcbOf(netdev string) (netdevDCB, bool) {
	if c.p.DCB == nil {
		return netdevDCB{}, false
	}
	ie, err := c.p.DCB.Get(netdev)
	if err != nil || ie.PFC == nil {
		return netdevDCB{}, false
	}
	return netdevDCB{trust: TrustOf(ie), pfc: ie.PFC.Priorities(), dscp: ie.DSCPMap(), ie: ie}, true
}

func (c *checker) lossless() {
	type use struct {
		prios []uint8
		ports []string
		pfc   []uint8
	}
	uses := map[string]*use{}
	var netdevs []string
	var vfs []string
	h := c.p.Host
	for i := range c.in.State.Devices {
		ds := &c.in.State.Devices[i]
		dev := &ds.Device
		vf := h.IsVF(dev)
		for j := range ds.Ports {
			ps := &ds.Ports[j]
			if ps.Transport != host.TransportRoCE {
				continue
			}
			declaredQoS := c.in.Policy.QoSFor(reconcile.TargetOf(dev), ps.Number)
			name := reconcile.PortSubject(dev.Name, ps.Number).String()
			if vf {
				if !declaredQoS.Empty() {
					vfs = append(vfs, name)
				}
				continue
			}
			tos, tosDeclared, _ := portTOS(ps.Records)
			netdev := h.PortNetdev(dev, &ps.Port)
			if netdev == "" || (tos <= 0 && !tosDeclared && declaredQoS.Empty()) {
				continue
			}
			st, ok := c.dcbOf(netdev)
			if !ok {
				continue
			}
			// Who owns the netdev's DCB matters to any declared QoS, with
			// or without a TOS on the port.
			if !declaredQoS.Empty() {
				c.owner(name, netdev, st, declaredQoS)
			}
			if tos <= 0 && !tosDeclared {
				continue
			}
			s := reconcile.PortSubject(dev.Name, ps.Number)
			dscp := uint8(tos >> 2)
			if st.trust != string(config.TrustDSCP) {
				if len(st.pfc) == 0 {
					c.note(reconcile.SeverityWarn, "roce-lossless", s,
						fmt.Sprintf("RoCE on %s uses TOS %d = DSCP %d, but %s trusts PCP (the priority is the VLAN egress map's) and PFC is off for every priority: RoCE traffic is lossy", netdev, tos, dscp, netdev),
						losslessFix(c.in.Policy.API, dev.Name, ps.Number, []uint8{dscp >> 3}))
				} else {
					c.note(reconcile.SeverityOK, "roce-lossless", s,
						fmt.Sprintf("RoCE on %s uses TOS %d = DSCP %d; %s trusts PCP, so its priority depends on the VLAN egress map (ip -d link show); PFC on for %s", netdev, tos, dscp, netdev, FormatPrios(st.pfc)), "")
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
				c.rest(s, dev, netdev, st, declaredQoS, fmt.Sprintf("RoCE on %s uses TOS %d = DSCP %d -> priority %d, PFC on for %d", netdev, tos, dscp, prio, prio), prio)
				continue
			}
			pfc := append(slices.Clone(st.pfc), prio)
			slices.Sort(pfc)
			c.note(reconcile.SeverityWarn, "roce-lossless", s,
				fmt.Sprintf("RoCE on %s uses TOS %d = DSCP %d -> priority %d, PFC off for %d: RoCE traffic is lossy", netdev, tos, dscp, prio, prio),
				losslessFix(c.in.Policy.API, dev.Name, ps.Number, pfc))
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
			c.note(reconcile.SeverityWarn, "roce-pfc-unused", reconcile.NetdevSubject(n),
				fmt.Sprintf("PFC is on for priorities %s of %s, but no RoCE TOS there maps to one of them (%s use %s)", FormatPrios(u.pfc), n, strings.Join(u.ports, " "), FormatPrios(u.prios)),
				"set pfc to the priority RoCE uses (see roce-lossless), or the TOS to one whose DSCP maps to a PFC priority")
		}
	}
	if len(vfs) > 0 {
		c.note(reconcile.SeverityOK, "qos-vf", reconcile.HostSubject(), fmt.Sprintf("[[qos]] selects virtual functions (%s): DCB exists only on their physical functions, whose traffic class they follow; QoS is set on the PFs", strings.Join(vfs, " ")), "")
	}
}

// rest checks the chain past PFC on the RoCE priority: global pause off,
// ECN on for every PFC priority (where the driver has per-priority ECN),
// and, on mlx5, the lossless headroom sized for the cable (cable_length,
// which has effect only once the host owns the buffers: buffer_size).
func (c *checker) rest(s reconcile.Subject, dev *host.Device, netdev string, st netdevDCB, want config.QoSDesired, chain string, prio uint8) {
	var problems, keys, parts []string
	if pause, err := ReadPause(c.p.ethtool(), netdev); err == nil {
		if pause.Pause.RX || pause.Pause.TX {
			problems = append(problems, fmt.Sprintf("global pause is %s on %s: a port that runs PFC should not also send or honour 802.3x pause (it stops every priority)", pause, netdev))
			keys = append(keys, "pause = false")
		} else {
			parts = append(parts, "pause off")
		}
	}
	switch e, err := readOFEDECN(c.p.Host, netdev); {
	case err != nil:
	case !e.Present:
		parts = append(parts, "ECN per priority is the firmware's (ROCE_CC_PRIO_MASK)")
	default:
		var off []uint8
		for _, p := range st.pfc {
			if e.On()&(1<<p) == 0 {
				off = append(off, p)
			}
		}
		if len(off) > 0 {
			problems = append(problems, fmt.Sprintf("ECN is off for PFC priorities %s: DCQCN does not slow the senders before PFC pauses the link", FormatPrios(off)))
			keys = append(keys, "ecn = "+FormatPrios(dcb.Bits(e.On()|config.PrioMask(off))))
		} else {
			parts = append(parts, "ECN on")
		}
	}
	// mlx5 reports a cable length where its port buffers (and so the
	// lossless headroom) are configurable; elsewhere there is nothing to
	// declare.
	cable, size := config.QoSCableLength.Of(want.LosslessDesired), config.QoSBufferSize.Of(want.LosslessDesired)
	if _, err := CableLengthOf(netdev, dev.Driver, st.ie); err == nil {
		switch {
		case cable.Set && !size.Set && !config.QoSPrioBuffer.Of(want.LosslessDesired).Set:
			problems = append(problems, fmt.Sprintf("cable_length %d (at %s) has no effect while the firmware owns the port buffers: mlx5 resizes the headroom for it only once the host sets the buffers", cable.Value, cable.Source))
			keys = append(keys, "buffer_size = [...] (takes buffer ownership from the firmware until the driver reloads)")
		case cable.Set || size.Set:
			parts = append(parts, "headroom declared")
		default:
			problems = append(problems, fmt.Sprintf("no cable_length or buffer_size declared for %s: mlx5 reserves headroom for its default 7 m of cable, too little for a longer one", netdev))
			keys = append(keys, "cable_length = <metres>")
		}
	}
	if len(problems) == 0 {
		finding := chain + ": lossless"
		if len(parts) > 0 {
			finding += " (" + strings.Join(parts, ", ") + ")"
		}
		c.note(reconcile.SeverityOK, "roce-lossless", s, finding, "")
		return
	}
	c.note(reconcile.SeverityWarn, "roce-lossless", s, chain+", but "+strings.Join(problems, "; "),
		fmt.Sprintf("add to the [[qos]] rule of %s/%d: %s", dev.Name, s.Port, strings.Join(keys, ", ")))
}

// owner warns when a [[qos]] rule selects a netdev whose DCB another agent
// manages (the part's own judgement, Part.owner): rdmad does not write it.
func (c *checker) owner(port, netdev string, st netdevDCB, want config.QoSDesired) {
	owner := c.p.owner(netdev, st.ie)
	if owner == "" {
		return
	}
	c.note(reconcile.SeverityWarn, "qos-owner", reconcile.NetdevSubject(netdev),
		fmt.Sprintf("[[qos]] at %s selects %s, but DCB of %s is managed by %s: rdmad does not write it", want.FirstSource(), port, netdev, owner),
		ownerFix(netdev, owner, want))
}

// ownerFix is how DCB goes to the host: for firmware DCBX the run-time
// switch (host ieee: plain host drops the IEEE bit on mlx5 and bnxt_en
// refuses it), the persistent one (mlx5's firmware parameters, port 1 and
// 2) and dcbx = "host"; for lldpad its own switch.
func ownerFix(netdev, owner string, want config.QoSDesired) string {
	if strings.HasPrefix(owner, "lldpad") {
		return "stop lldpad managing " + netdev + " (lldptool -T -i " + netdev + " -V PFC enableTx=no, or stop lldpad), or remove the rule"
	}
	return fmt.Sprintf("hand DCB to the host: at run time dcb dcbx set dev %s host ieee (or dcbx = \"host\" in the rule at %s, and rdmad does it); persistently on mlx5 mlxconfig -d <device> set LLDP_NB_DCBX_P1=0 LLDP_NB_RX_MODE_P1=0 LLDP_NB_TX_MODE_P1=0 (P2 for port 2) and a firmware reset; or remove the rule", netdev, want.FirstSource())
}

// losslessFix is the [[qos]] rule that makes a port lossless, as one TOML
// line a drop-in can hold, and the rdmactl command that does the same.
func losslessFix(api config.API, dev string, port int, pfc []uint8) string {
	list := make([]string, len(pfc))
	for i, p := range pfc {
		list[i] = fmt.Sprint(p)
	}
	cmd := " (" + api.Refusal() + ")"
	if api.Allows(true) == nil {
		cmd = fmt.Sprintf(" (or: rdmactl qos set %s/%d --trust dscp --pfc %s --persist)", dev, port, strings.Join(list, ","))
	}
	return fmt.Sprintf("declare the [[qos]] rule in a drop-in such as /etc/rdma/rdmad.d/50-qos.toml: qos = [{ device = %q, port = %d, trust = \"dscp\", pfc = [%s] }]%s, and the same no-drop priority on the switch",
		config.Exact(dev).Text(), port, strings.Join(list, ", "), cmd)
}

// Check implements reconcile.Checker for the mlx4_en options file: mlx4_en
// reads it when it loads, so where mlx4_en loads from the initramfs
// (its generator's configuration lists mlx4_en), an image built before
// the file changed gives the next boot the old PFC options
// (qos-mlx4-initramfs-stale).
func (m *MLX4Part) Check(_ context.Context, _ *reconcile.CheckInput) []reconcile.Note {
	if !m.Host.Exists(MLX4File) {
		return nil
	}
	boot := initramfs.Read(m.Host, MLX4File, initramfs.Module{Brings: initramfs.Named("mlx4_en")})
	if !boot.Stale {
		return nil
	}
	return []reconcile.Note{{ID: "qos-mlx4-initramfs-stale", Subject: reconcile.HostSubject(), Severity: reconcile.SeverityWarn,
		Finding: fmt.Sprintf("mlx4_en loads from the initramfs (%s), and /%s was built before /%s changed: the next boot loads mlx4_en with the old PFC options", boot.From, boot.Image, MLX4File),
		Fix:     boot.Rebuild}}
}

// OtherManager implements reconcile.Contender: lldpad, when it runs.
func (p *Part) OtherManager(in *reconcile.CheckInput, r reconcile.Record) string {
	if r.Setting != PFC.Setting() && r.Setting != Trust.Setting() {
		return ""
	}
	if pid, ok := LLDPadPID(in.Host); ok {
		return "lldpad (pid " + pid + ")"
	}
	return ""
}
