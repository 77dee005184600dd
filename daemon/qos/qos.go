// Package qos keeps lossless RoCE ([[qos]]) on the netdev of each selected
// Ethernet RDMA port: Priority Flow Control and DSCP trust through DCB
// netlink (daemon/dcb), and for mlx4 the host-wide mlx4_en PFC module
// options in rdmad's own modprobe.d file (MLX4Part). The adapter forgets
// both at every reboot, driver reload and firmware reset, so the device
// part runs on every arrival and netdev registration, in the same pass as
// the RoCE mode and TOS.
//
// Every write is read first (trust and the DSCP map live in firmware and
// survive a driver reload), checked through the status byte of the reply
// (a driver acknowledges what it refuses) and read back. DCBX mode is
// never changed, and a netdev whose DCB another agent owns is not written.
package qos

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/dcb"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/reconcile"
)

// Kinds of the actions this part reports. A Changed PFC action's Old and
// New are PFCState values, a Changed trust action's TrustState values: the
// netdev and what it held, so Undo can put it back.
const (
	PFC   = reconcile.KindQoSPFC   // PFC priorities of the port's netdev
	Trust = reconcile.KindQoSTrust // DSCP trust: the DSCP entries of the APP table
	// Settings is a rule that selects a port QoS does not apply to
	// (InfiniBand): reported not applicable, with the reason.
	Settings = reconcile.KindQoS
	// VF is a virtual function a rule selects: DCB lives on its PF. Not
	// applicable, and no drift.
	VF = reconcile.KindQoSVF
	// Owner is a netdev whose DCB another agent manages (firmware DCBX,
	// lldpad): not written, not applicable; its values still count as
	// drift when they differ.
	Owner = reconcile.KindQoSOwner
)

// PFCState is the PFC of a netdev, the Old and New of a PFC action.
type PFCState struct {
	Netdev string
	PFC    dcb.PFC
}

// Priorities lists the priorities with PFC on (the service compares it
// with what a SetQoS call asked for).
func (s PFCState) Priorities() []uint8 { return s.PFC.Priorities() }

// TrustMode is the trust the entries amount to.
func (s TrustState) TrustMode() config.QoSTrust { return s.Trust }

// TrustState is the DSCP entries of a netdev's APP table, the Old and New
// of a trust action.
type TrustState struct {
	Netdev string
	Trust  config.QoSTrust // what the entries amount to
	DSCP   []dcb.App       // the DSCP entries, in the kernel's order
}

// Kinds implements reconcile.Part.
func (*Part) Kinds() []reconcile.Kind { return []reconcile.Kind{PFC, Trust, Settings, VF, Owner} }

// Undo implements reconcile.Part: a netdev's previous PFC, or its previous
// DSCP entries, are written back and read back.
func (p *Part) Undo(_ context.Context, a reconcile.Action) error {
	switch a.Kind {
	case PFC:
		old, ok := a.Old.(PFCState)
		if !ok {
			return fmt.Errorf("qos: the previous PFC of %s is not known", a.Subject)
		}
		if err := p.DCB.SetPFC(old.Netdev, old.PFC); err != nil {
			return fmt.Errorf("qos: %w", err)
		}
		got, err := p.DCB.Get(old.Netdev)
		if err != nil {
			return fmt.Errorf("qos: read back: %w", err)
		}
		if got.PFC == nil || got.PFC.Enabled != old.PFC.Enabled {
			return fmt.Errorf("qos: %s: put back PFC %s but the driver kept another", old.Netdev, FormatPrios(old.PFC.Priorities()))
		}
		return nil
	case Trust:
		old, ok := a.Old.(TrustState)
		if !ok {
			return fmt.Errorf("qos: the previous DSCP entries of %s are not known", a.Subject)
		}
		ie, err := p.DCB.Get(old.Netdev)
		if err != nil {
			return fmt.Errorf("qos: %w", err)
		}
		del, add := diffApps(dscpEntries(ie.Apps), old.DSCP)
		if err := p.writeApps(old.Netdev, del, add); err != nil {
			return fmt.Errorf("qos: %w", err)
		}
		got, err := p.DCB.Get(old.Netdev)
		if err != nil {
			return fmt.Errorf("qos: read back: %w", err)
		}
		if d, a := diffApps(dscpEntries(got.Apps), old.DSCP); len(d)+len(a) > 0 {
			return fmt.Errorf("qos: %s: put back %d DSCP entries but the driver kept another table", old.Netdev, len(old.DSCP))
		}
		return nil
	}
	return fmt.Errorf("qos: %s %s: %w", a.Subject, a.Kind, reconcile.ErrNotUndoable)
}

func dscpEntries(apps []dcb.App) []dcb.App {
	var out []dcb.App
	for _, a := range apps {
		if a.Selector == dcb.SelDSCP {
			out = append(out, a)
		}
	}
	return out
}

// diffApps returns the entries of have not in want and of want not in
// have (as sets).
func diffApps(have, want []dcb.App) (del, add []dcb.App) {
	in := func(set []dcb.App, a dcb.App) bool {
		for _, x := range set {
			if x == a {
				return true
			}
		}
		return false
	}
	for _, a := range have {
		if !in(want, a) {
			del = append(del, a)
		}
	}
	for _, a := range want {
		if !in(have, a) && !in(add, a) {
			add = append(add, a)
		}
	}
	return del, add
}

// MLX4Driver is the PCI driver of ConnectX-3 devices.
const MLX4Driver = "mlx4_core"

// Part is the QoS device part.
type Part struct {
	Host *host.Host
	DCB  dcb.Kernel
}

// Apply sets PFC and trust on the netdev of every port of dev that a
// [[qos]] rule selects. A netdev that refuses fails alone.
func (p *Part) Apply(_ context.Context, pol *config.Policy, dev *host.Device) []reconcile.Action {
	target := reconcile.TargetOf(dev)
	var acts []reconcile.Action
	pf := ""
	vf := p.Host.IsVF(dev)
	if vf {
		pf = p.pfNetdev(dev)
	}
	for i := range dev.Ports {
		port := &dev.Ports[i]
		want := pol.QoSFor(target, port.Number)
		if want.Empty() {
			continue
		}
		subject := reconcile.PortSubject(dev.Name, port.Number)
		na := func(kind reconcile.Kind, format string, args ...any) {
			acts = append(acts, reconcile.Action{Subject: subject, Kind: kind, Status: reconcile.NotApplicable,
				Err: fmt.Errorf(format, args...), Source: want.FirstSource().String()})
		}
		switch tr := dev.PortTransport(port); {
		case tr != host.TransportRoCE && tr != host.TransportIWARP:
			na(Settings, "port transport is %s, QoS applies to the netdev of Ethernet ports (RoCE, iWARP)", tr)
			continue
		case vf && pf != "":
			na(VF, "virtual function: DCB exists only on the physical function, whose traffic class it follows; QoS is set on the PF %s", pf)
			continue
		case vf:
			na(VF, "virtual function: DCB exists only on the physical function, whose traffic class it follows; QoS is set on the PF")
			continue
		}
		netdev := p.Host.PortNetdev(dev, port)
		if netdev == "" {
			acts = append(acts, failAll(subject, want, "", errors.New("the port has no netdev"))...)
			continue
		}
		acts = append(acts, p.applyPort(dev, port, subject, netdev, want)...)
	}
	return acts
}

// pfNetdev names the netdevs of a VF's physical function ("" when sysfs
// does not say).
func (p *Part) pfNetdev(dev *host.Device) string {
	names, err := p.Host.ReadDirNames(path.Join(host.ClassInfiniband, dev.Name, "device", "physfn", "net"))
	if err != nil {
		return ""
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// failAll fails every declared setting of the port with err.
func failAll(subject reconcile.Subject, want config.QoSDesired, from string, err error) []reconcile.Action {
	var acts []reconcile.Action
	if want.HasPFC {
		acts = append(acts, reconcile.Action{Subject: subject, Kind: PFC, From: from, To: FormatPrios(want.PFC),
			Status: reconcile.Failed, Err: err, Source: want.PFCSource.String()})
	}
	if want.Trust != "" {
		acts = append(acts, reconcile.Action{Subject: subject, Kind: Trust, To: string(want.Trust),
			Status: reconcile.Failed, Err: err, Source: want.TrustSource.String()})
	}
	return acts
}

func (p *Part) applyPort(dev *host.Device, port *host.Port, subject reconcile.Subject, netdev string, want config.QoSDesired) []reconcile.Action {
	ie, err := p.DCB.Get(netdev)
	if err != nil {
		if dcb.Unsupported(err) {
			err = fmt.Errorf("%s does not support DCB: PFC and trust cannot be set: %w", netdev, err)
		} else {
			err = fmt.Errorf("qos: %w", err)
		}
		return failAll(subject, want, "", err)
	}
	observe(port, ie)
	if owner := p.owner(netdev, ie); owner != "" {
		return []reconcile.Action{{Subject: subject, Kind: Owner, Status: reconcile.NotApplicable,
			Err:    fmt.Errorf("DCB of %s is managed by %s: rdmad does not write it", netdev, owner),
			Source: want.FirstSource().String()}}
	}
	var acts []reconcile.Action
	if want.HasPFC {
		acts = append(acts, p.setPFC(port, subject, netdev, ie, want))
	}
	switch {
	case want.Trust != "" && dev.Driver == MLX4Driver:
		acts = append(acts, reconcile.Action{Subject: subject, Kind: Trust, To: string(want.Trust), Status: reconcile.Failed,
			Err: fmt.Errorf("mlx4 (ConnectX-3) has no DCB APP table support: trust cannot be set on %s; remove trust from the rule at %s (pfc is applied)",
				netdev, want.TrustSource),
			Source: want.TrustSource.String()})
	case want.Trust != "":
		acts = append(acts, p.setTrust(port, subject, netdev, want))
	case len(want.DSCPPrio) > 0:
		acts = append(acts, reconcile.Action{Subject: subject, Kind: Trust, Status: reconcile.NotApplicable,
			Err: errors.New(`dscp_prio applies with trust = "dscp", which no rule sets for this port`), Source: want.FirstSource().String()})
	}
	return acts
}

// owner says who else manages the netdev's DCB ("" when the host may
// write it): firmware (DCBX capabilities lack host mode or say LLD
// managed), or lldpad.
func (p *Part) owner(netdev string, ie dcb.IEEE) string {
	caps, known := ie.DCBX, ie.HasDCBX
	if !known {
		if c, err := p.DCB.DCBX(netdev); err == nil {
			caps, known = c, true
		}
	}
	if known && (caps&dcb.CapHost == 0 || caps&dcb.CapLLDManaged != 0) {
		return fmt.Sprintf("the adapter's firmware (DCBX capabilities %#02x: %s)", caps, describeCaps(caps))
	}
	if LLDPadManages(p.Host, netdev) {
		return "lldpad (it runs and its configuration names " + netdev + ")"
	}
	return ""
}

func describeCaps(c uint8) string {
	var out []string
	for _, f := range []struct {
		bit  uint8
		name string
	}{{dcb.CapHost, "host"}, {dcb.CapLLDManaged, "LLD-managed"}, {dcb.CapVerCEE, "CEE"}, {dcb.CapVerIEEE, "IEEE"}, {dcb.CapStatic, "static"}} {
		if c&f.bit != 0 {
			out = append(out, f.name)
		}
	}
	if c&dcb.CapHost == 0 {
		out = append(out, "no host mode")
	}
	return strings.Join(out, ", ")
}

// lldpad's files, as openlldp (github.com/intel/openlldp) defines them:
// include/lldpad.h PID_FILE "/var/run/lldpad.pid" (/var/run is /run),
// include/config.h DEFAULT_CFG_FILE "/var/lib/lldpad/lldpad.conf".
const (
	LLDPadPIDFile  = "run/lldpad.pid"
	LLDPadConfFile = "var/lib/lldpad/lldpad.conf"
)

// LLDPadManages reports whether lldpad runs (its pid file names a live
// lldpad process) and its configuration names netdev. Reads are bounded.
func LLDPadManages(h *host.Host, netdev string) bool {
	if _, ok := LLDPadPID(h); !ok {
		return false
	}
	groups, err := LLDPadGroups(h)
	return err == nil && slices.Contains(groups, netdev)
}

// LLDPadPID is the pid of a running lldpad: its pid file names a process
// whose comm is lldpad. lldpad writes the file as a zeroed 32-byte buffer
// holding "%u\n" (openlldp lldpad.c: memset, sprintf, write(fd, buf,
// sizeof(buf))), so the pid is followed by a newline and NULs.
func LLDPadPID(h *host.Host) (string, bool) {
	raw, err := h.ReadString(LLDPadPIDFile)
	if err != nil {
		return "", false
	}
	pid := strings.TrimSpace(strings.TrimRight(raw, "\x00"))
	if n, err := strconv.Atoi(pid); err != nil || n <= 0 {
		return "", false
	}
	comm, err := h.ReadString(path.Join("proc", pid, "comm"))
	if err != nil || strings.TrimSpace(comm) != "lldpad" {
		return "", false
	}
	return pid, true
}

// LLDPadGroups lists the names of the groups of lldpad's configuration
// (libconfig: `name : {`), in file order: its interfaces (one group per
// port it configures, `ens1f0np0 : {`) among sections (`dcbx`, `lldp`,
// `tlvid00000001`...). The error says the file could not be read (absent
// included: in the DaemonSet /var/lib/lldpad is not mounted), which is not
// the same as a configuration naming no interface.
func LLDPadGroups(h *host.Host) ([]string, error) {
	conf, err := h.ReadFile(LLDPadConfFile)
	if err != nil {
		return nil, fmt.Errorf("qos: lldpad configuration: %w", err)
	}
	var out []string
	for _, line := range strings.Split(string(conf), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[1] == ":" && !slices.Contains(out, f[0]) {
			out = append(out, f[0])
		}
	}
	return out, nil
}

// observe records what the kernel showed for the port's netdev.
func observe(port *host.Port, ie dcb.IEEE) {
	port.QoSKnown = true
	port.QoSPFC = []uint8{}
	if ie.PFC != nil {
		port.QoSPFC = ie.PFC.Priorities()
	}
	port.QoSDSCP = ie.DSCPMap()
	port.QoSTrust = TrustOf(ie)
}

// TrustOf is the trust the APP table gives on mlx5: dscp when it holds
// DSCP entries, pcp when none.
func TrustOf(ie dcb.IEEE) string {
	for _, a := range ie.Apps {
		if a.Selector == dcb.SelDSCP {
			return string(config.TrustDSCP)
		}
	}
	return string(config.TrustPCP)
}

// FormatPrios renders priorities as the config writes them: "[3, 4]", "[]".
func FormatPrios(ps []uint8) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = strconv.Itoa(int(p))
	}
	return "[" + strings.Join(s, ", ") + "]"
}

func (p *Part) setPFC(port *host.Port, subject reconcile.Subject, netdev string, ie dcb.IEEE, want config.QoSDesired) reconcile.Action {
	mask := want.PFCMask()
	act := reconcile.Action{Subject: subject, Kind: PFC, To: FormatPrios(want.PFC), Source: want.PFCSource.String()}
	if ie.PFC == nil {
		act.Status, act.Err = reconcile.Failed, fmt.Errorf("%s reports no PFC (its driver has no ieee_getpfc): PFC cannot be set", netdev)
		return act
	}
	act.From = FormatPrios(ie.PFC.Priorities())
	next := *ie.PFC
	next.Enabled = mask
	act.Old, act.New = PFCState{Netdev: netdev, PFC: *ie.PFC}, PFCState{Netdev: netdev, PFC: next}
	if ie.PFC.Enabled == mask {
		act.Status = reconcile.Unchanged
		return act
	}
	if n := len(want.PFC); ie.PFC.Cap != 0 && n > int(ie.PFC.Cap) {
		act.Status, act.Err = reconcile.Failed, fmt.Errorf("%s supports PFC on at most %d priorities, %d declared", netdev, ie.PFC.Cap, n)
		return act
	}
	if err := p.DCB.SetPFC(netdev, next); err != nil {
		act.Status, act.Err = reconcile.Failed, fmt.Errorf("qos: %w", err)
		p.reread(port, netdev)
		return act
	}
	got, err := p.DCB.Get(netdev)
	if err != nil {
		act.Status, act.Err = reconcile.Failed, fmt.Errorf("qos: read back: %w", err)
		return act
	}
	observe(port, got)
	if got.PFC == nil || got.PFC.Enabled != mask {
		act.Status, act.Err = reconcile.Failed, fmt.Errorf("qos: %s: wrote PFC %s but the driver kept %s", netdev, act.To, FormatPrios(port.QoSPFC))
		return act
	}
	act.Status = reconcile.Changed
	return act
}

// writeApps deletes then adds APP entries, one per message, and stops at
// the first the driver refuses (the error names it).
func (p *Part) writeApps(netdev string, del, add []dcb.App) error {
	for _, a := range del {
		if err := p.DCB.DelApp(netdev, a); err != nil {
			return err
		}
	}
	for _, a := range add {
		if err := p.DCB.SetApp(netdev, a); err != nil {
			return err
		}
	}
	return nil
}

// reread refreshes the observed values after a refused write.
func (p *Part) reread(port *host.Port, netdev string) {
	if ie, err := p.DCB.Get(netdev); err == nil {
		observe(port, ie)
	}
}

// TrustPlan is what makes the APP table's DSCP entries the declared ones:
// entries to delete (wrong priority, repeated, out of range) and entries to
// add. Trust pcp deletes every DSCP entry.
type TrustPlan struct {
	Del, Add []dcb.App
}

// Empty reports whether the table is already as declared.
func (t TrustPlan) Empty() bool { return len(t.Del) == 0 && len(t.Add) == 0 }

// PlanTrust compares the APP table apps with the declared trust.
func PlanTrust(apps []dcb.App, want config.QoSDesired) TrustPlan {
	var plan TrustPlan
	if want.Trust == config.TrustPCP {
		for _, a := range apps {
			if a.Selector == dcb.SelDSCP {
				plan.Del = append(plan.Del, a)
			}
		}
		return plan
	}
	table := want.DSCPTable()
	var have [64]bool
	for _, a := range apps {
		if a.Selector != dcb.SelDSCP {
			continue
		}
		if a.Protocol < 64 && a.Priority == table[a.Protocol] && !have[a.Protocol] {
			have[a.Protocol] = true
			continue
		}
		plan.Del = append(plan.Del, a)
	}
	for d := range table {
		if !have[d] {
			plan.Add = append(plan.Add, dcb.DSCP(uint8(d), table[d]))
		}
	}
	return plan
}

func describeTrust(apps []dcb.App, want config.QoSDesired) string {
	ie := dcb.IEEE{Apps: apps}
	t := TrustOf(ie)
	if t == string(config.TrustDSCP) && want.Trust == config.TrustDSCP {
		if plan := PlanTrust(apps, want); !plan.Empty() {
			return fmt.Sprintf("dscp (%d of 64 entries differ)", max(len(plan.Add), len(plan.Del)))
		}
	}
	return t
}

// wantedEntries is the DSCP entries trust want gives: the full table for
// dscp, none for pcp.
func wantedEntries(want config.QoSDesired) []dcb.App {
	if want.Trust != config.TrustDSCP {
		return nil
	}
	return PlanTrust(nil, want).Add
}

func (p *Part) setTrust(port *host.Port, subject reconcile.Subject, netdev string, want config.QoSDesired) reconcile.Action {
	act := reconcile.Action{Subject: subject, Kind: Trust, To: string(want.Trust), Source: want.TrustSource.String()}
	ie, err := p.DCB.Get(netdev) // PFC may have changed it; the table is read as it is now
	if err != nil {
		act.Status, act.Err = reconcile.Failed, fmt.Errorf("qos: %w", err)
		return act
	}
	act.From = describeTrust(ie.Apps, want)
	act.Old = TrustState{Netdev: netdev, Trust: config.QoSTrust(TrustOf(ie)), DSCP: dscpEntries(ie.Apps)}
	act.New = TrustState{Netdev: netdev, Trust: want.Trust, DSCP: wantedEntries(want)}
	plan := PlanTrust(ie.Apps, want)
	if plan.Empty() {
		act.Status = reconcile.Unchanged
		return act
	}
	if err := p.writeApps(netdev, plan.Del, plan.Add); err != nil {
		act.Status, act.Err = reconcile.Failed, fmt.Errorf("qos: %w", err)
		p.reread(port, netdev)
		return act
	}
	got, err := p.DCB.Get(netdev)
	if err != nil {
		act.Status, act.Err = reconcile.Failed, fmt.Errorf("qos: read back: %w", err)
		return act
	}
	observe(port, got)
	if left := PlanTrust(got.Apps, want); !left.Empty() {
		act.Status, act.Err = reconcile.Failed, fmt.Errorf("qos: %s: wrote the DSCP table for trust %s but the driver kept %s", netdev, want.Trust, describeTrust(got.Apps, want))
		return act
	}
	act.Status = reconcile.Changed
	return act
}
