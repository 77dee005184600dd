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
	"log/slog"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/dcb"
	"github.com/rdmad/rdmad/daemon/ethtool"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/reconcile"
)

// The part's settings on the ports [[qos]] selects.
var (
	// PFC is the PFC priorities of the port's netdev.
	PFC = reconcile.NewSetting[PFCValue](reconcile.Setting{Name: "qos_pfc", Kind: "qos pfc", Key: config.KeyQoSPFC, Title: "PFC", Gauge: pfcGauge, Tools: dcbTools, Valid: validPFC})
	// Trust is DSCP trust: the DSCP entries of the netdev's APP table.
	Trust = reconcile.NewSetting[TrustValue](reconcile.Setting{Name: "qos_trust", Kind: "qos trust", Key: config.KeyQoSTrust, Title: "QoS trust", Gauge: trustGauge, Tools: dcbTools, Valid: validTrust})
)

// PFCValue is the PFC of a netdev: what it held, so Undo can put it back.
type PFCValue struct {
	Netdev string
	PFC    dcb.PFC
}

// String is the priorities with PFC on, as the config writes them: "[3]".
func (v PFCValue) String() string { return FormatPrios(v.PFC.Priorities()) }

// Wire implements reconcile.Wired: Port.QoSPFC and DesiredQoSPFC are ay.
func (v PFCValue) Wire(bool) any { return []byte(v.PFC.Priorities()) }

func pfcHolds(have, want PFCValue) bool { return have.PFC.Enabled == want.PFC.Enabled }

// TrustValue is the DSCP entries of a netdev's APP table and the trust
// they amount to.
type TrustValue struct {
	Netdev string
	Trust  config.QoSTrust // what the entries amount to
	DSCP   []dcb.App       // the DSCP entries, in the kernel's order (declared: the full table trust dscp writes)
}

// String is the trust, with how many DSCP entries differ from the full
// table when trust is dscp but the table is not whole.
func (v TrustValue) String() string {
	if v.Trust == config.TrustDSCP && len(v.DSCP) != 64 {
		return fmt.Sprintf("dscp (%d of 64 DSCP entries)", len(v.DSCP))
	}
	return string(v.Trust)
}

// Wire implements reconcile.Wired: Port.QoSTrust and DesiredQoSTrust.
func (v TrustValue) Wire(bool) any { return string(v.Trust) }

// trustHolds: the APP table's DSCP entries are exactly the declared ones,
// each once.
func trustHolds(have, want TrustValue) bool {
	del, add := planEntries(have.DSCP, want.DSCP)
	return len(del)+len(add) == 0
}

func trustOf(netdev string, ie dcb.IEEE) TrustValue {
	return TrustValue{Netdev: netdev, Trust: config.QoSTrust(TrustOf(ie)), DSCP: dscpEntries(ie.Apps)}
}

// Kinds implements reconcile.Part.
func (p *Part) Kinds() []reconcile.Kind {
	var out []reconcile.Kind
	for _, s := range p.Settings() {
		out = append(out, s.Kind)
	}
	return out
}

// Settings implements reconcile.Part.
func (*Part) Settings() []*reconcile.Setting {
	return append([]*reconcile.Setting{PFC.Setting(), Trust.Setting()}, losslessSettings()...)
}

// Undo implements reconcile.Part: a netdev's previous PFC, or its previous
// DSCP entries, are written back and read back.
func (p *Part) Undo(_ context.Context, a reconcile.Action) error {
	switch a.Kind {
	case PFC.Kind():
		old, ok := PFC.Old(a)
		if !ok || old.Netdev == "" {
			return fmt.Errorf("the previous PFC of %s is not known", a.Subject)
		}
		if err := p.DCB.SetPFC(old.Netdev, old.PFC); err != nil {
			return err
		}
		got, err := p.readPFC(old.Netdev)
		if err != nil {
			return fmt.Errorf("read it back: %w", err)
		}
		if !pfcHolds(got, old) {
			return fmt.Errorf("%s: put back PFC %s but the driver kept %s", old.Netdev, old, got)
		}
		return nil
	case Trust.Kind():
		old, ok := Trust.Old(a)
		if !ok || old.Netdev == "" {
			return fmt.Errorf("the previous DSCP entries of %s are not known", a.Subject)
		}
		if err := p.writeTrust(old.Netdev, old); err != nil {
			return err
		}
		got, err := p.readTrust(old.Netdev)
		if err != nil {
			return fmt.Errorf("read it back: %w", err)
		}
		if !trustHolds(got, old) {
			return fmt.Errorf("%s: put back %d DSCP entries but the driver kept another table", old.Netdev, len(old.DSCP))
		}
		return nil
	}
	if handled, err := p.undoLossless(a); handled {
		return err
	}
	return fmt.Errorf("%s %s: %w", a.Subject, a.Kind, reconcile.ErrNotUndoable)
}

func (p *Part) readPFC(netdev string) (PFCValue, error) {
	ie, err := p.DCB.Get(netdev)
	if err != nil {
		return PFCValue{}, err
	}
	if ie.PFC == nil {
		return PFCValue{}, fmt.Errorf("%s reports no PFC (its driver has no ieee_getpfc)", netdev)
	}
	return PFCValue{Netdev: netdev, PFC: *ie.PFC}, nil
}

func (p *Part) readTrust(netdev string) (TrustValue, error) {
	ie, err := p.DCB.Get(netdev)
	if err != nil {
		return TrustValue{}, err
	}
	return trustOf(netdev, ie), nil
}

// writeTrust makes the APP table's DSCP entries want's: the entries not
// wanted go first, then the missing ones are added.
func (p *Part) writeTrust(netdev string, want TrustValue) error {
	have, err := p.readTrust(netdev)
	if err != nil {
		return err
	}
	del, add := planEntries(have.DSCP, want.DSCP)
	return p.writeApps(netdev, del, add)
}

// writeApps deletes then adds APP entries, one per message, and stops at
// the first the driver refuses (the error names it): a failing entry of a
// message leaves the earlier ones of the same message applied.
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

func dscpEntries(apps []dcb.App) []dcb.App {
	var out []dcb.App
	for _, a := range apps {
		if a.Selector == dcb.SelDSCP {
			out = append(out, a)
		}
	}
	return out
}

// planEntries is what makes the DSCP entries have into want: the entries
// to delete (not wanted, or a repeat of one kept) and those to add.
func planEntries(have, want []dcb.App) (del, add []dcb.App) {
	kept := map[dcb.App]bool{}
	for _, a := range have {
		if slices.Contains(want, a) && !kept[a] {
			kept[a] = true
			continue
		}
		del = append(del, a)
	}
	for _, a := range want {
		if !kept[a] {
			kept[a] = true
			add = append(add, a)
		}
	}
	return del, add
}

// MLX5Driver is the PCI driver of ConnectX-4 and later (mlx5); ConnectX-3
// is host.DriverMLX4.
const MLX5Driver = "mlx5_core"

// Part is the QoS device part.
type Part struct {
	Host *host.Host
	DCB  dcb.Kernel
	// Ethtool sets global pause and the PFC storm timeout; nil: those
	// settings fail, named.
	Ethtool ethtool.Kernel
	Log     *slog.Logger // nil: slog.Default
}

func (p *Part) log() *slog.Logger {
	if p.Log == nil {
		return slog.Default()
	}
	return p.Log
}

func (p *Part) ethtool() ethtool.Kernel {
	if p.Ethtool == nil {
		return ethtool.Unavailable(errNoEthtool)
	}
	return p.Ethtool
}

var errNoEthtool = errors.New("this rdmad has no ethtool access (global pause and the PFC storm timeout cannot be set)")

// Apply keeps PFC and trust on the netdev of every port of the device a
// [[qos]] rule selects. A netdev that refuses fails alone.
func (p *Part) ApplyDevice(_ context.Context, run *reconcile.DeviceRun) {
	dev := run.Device
	target := reconcile.TargetOf(dev)
	// Whether the device is a virtual function takes up to three reads:
	// made once, and only for a port that needs it (a pass of `rdmad
	// --once` with no [[qos]] rule needs none).
	known, vf, pf := false, false, ""
	isVF := func() bool {
		if !known {
			known, vf = true, p.Host.IsVF(dev)
			if vf {
				pf = p.pfNetdev(dev)
			}
		}
		return vf
	}
	for i := range dev.Ports {
		port := &dev.Ports[i]
		want := run.Policy.QoSFor(target, port.Number)
		subject := reconcile.PortSubject(dev.Name, port.Number)
		if want.Empty() {
			// Not declared: the daemon still publishes what the netdev of
			// a RoCE port holds (rdmactl qos show), VFs aside (their DCB
			// is their PF's).
			if tr := dev.PortTransport(port); run.Publish && (tr == host.TransportRoCE || tr == host.TransportIWARP) && !isVF() {
				if netdev := p.Host.PortNetdev(dev, port); netdev != "" {
					p.observePort(run, dev, subject, netdev, want)
				}
			}
			continue
		}
		switch tr := dev.PortTransport(port); {
		case tr != host.TransportRoCE && tr != host.TransportIWARP:
			notApplicable(run, subject, "", want, fmt.Errorf("port transport is %s, QoS applies to the netdev of Ethernet ports (RoCE, iWARP)", tr))
			continue
		case isVF() && pf != "":
			notApplicable(run, subject, "", want, fmt.Errorf("virtual function: DCB exists only on the physical function, whose traffic class it follows; QoS is set on the PF %s", pf))
			continue
		case vf:
			notApplicable(run, subject, "", want, errors.New("virtual function: DCB exists only on the physical function, whose traffic class it follows; QoS is set on the PF"))
			continue
		}
		netdev := p.Host.PortNetdev(dev, port)
		if netdev == "" {
			refuseAll(run, subject, "", want, errors.New("the port has no netdev"))
			continue
		}
		p.applyPort(run, dev, subject, port.Number, netdev, want)
	}
}

// declared is what want declares, as the settings' values on netdev.
func declared(netdev string, want config.QoSDesired) (PFCValue, TrustValue) {
	return PFCValue{Netdev: netdev, PFC: dcb.PFC{Enabled: want.PFCMask()}},
		TrustValue{Netdev: netdev, Trust: want.Trust, DSCP: wantedEntries(want)}
}

// notApplicable records every declared setting of the port as not
// applying, and why.
func notApplicable(run *reconcile.DeviceRun, subject reconcile.Subject, netdev string, want config.QoSDesired, why error) {
	pfc, trust := declared(netdev, want)
	if want.HasPFC {
		run.Add(PFC.NotApplicable(subject, pfc, want.PFCSource, why))
	}
	if want.Trust != "" || len(want.DSCPPrio) > 0 {
		run.Add(Trust.NotApplicable(subject, trust, want.FirstSource(), why))
	}
	losslessNotApplicable(run, subject, netdev, "", want.LosslessDesired, why)
}

// refuseAll fails every declared setting of the port with err.
func refuseAll(run *reconcile.DeviceRun, subject reconcile.Subject, netdev string, want config.QoSDesired, err error) {
	pfc, trust := declared(netdev, want)
	if want.HasPFC {
		run.Add(PFC.Refuse(subject, pfc, want.PFCSource, err))
	}
	if want.Trust != "" {
		run.Add(Trust.Refuse(subject, trust, want.TrustSource, err))
	}
	losslessRefuse(run, subject, netdev, "", want.LosslessDesired, err, false)
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

func (p *Part) applyPort(run *reconcile.DeviceRun, dev *host.Device, subject reconcile.Subject, port int, netdev string, want config.QoSDesired) {
	// Global pause, the storm timeout and ECN are not DCB: a netdev
	// without DCB still gets them (or its own refusal of each). What no
	// rule declares is published as the kernel holds it.
	defer func() {
		p.applyLosslessLink(run, dev, subject, port, netdev, want.LosslessDesired)
		if run.Publish {
			p.observePort(run, dev, subject, netdev, want)
		}
	}()
	ie, err := p.DCB.Get(netdev)
	if err != nil {
		if dcb.Unsupported(err) {
			err = fmt.Errorf("%s does not support DCB: PFC, trust and the other DCB settings cannot be set: %w", netdev, err)
		}
		pfc, trust := declared(netdev, want)
		if want.HasPFC {
			run.Add(PFC.Refuse(subject, pfc, want.PFCSource, err))
		}
		if want.Trust != "" {
			run.Add(Trust.Refuse(subject, trust, want.TrustSource, err))
		}
		losslessRefuse(run, subject, netdev, dev.Driver, want.LosslessDesired, err, true)
		return
	}
	ie = p.applyDCBX(run, subject, netdev, want.LosslessDesired, ie)
	// Another agent's DCB is not written; its values still count as drift
	// when they differ.
	var hold error
	if owner := p.owner(netdev, ie); owner != "" {
		hold = fmt.Errorf("DCB of %s is managed by %s: rdmad does not write it", netdev, owner)
	}
	pfc, trust := declared(netdev, want)
	if want.HasPFC {
		run.Add(PFC.Converge(run, reconcile.Target[PFCValue]{
			Subject: subject, Want: pfc, Source: want.PFCSource, Holds: pfcHolds, Hold: hold,
			// mlx5 toggles the port's link on every change of the PFC
			// mask: a correction there costs as much as two.
			Cost: pfcCost(dev),
			Read: func() (PFCValue, error) { return p.readPFC(netdev) },
			Write: func(want PFCValue) error {
				cur, err := p.readPFC(netdev)
				if err != nil {
					return err
				}
				if n := len(want.PFC.Priorities()); cur.PFC.Cap != 0 && n > int(cur.PFC.Cap) {
					return fmt.Errorf("%s supports PFC on at most %d priorities, %d declared", netdev, cur.PFC.Cap, n)
				}
				next := cur.PFC
				next.Enabled = want.PFC.Enabled
				return p.DCB.SetPFC(netdev, next)
			},
		}))
	}
	switch {
	case want.Trust != "" && dev.Driver == host.DriverMLX4:
		run.Add(Trust.Refuse(subject, trust, want.TrustSource,
			fmt.Errorf("mlx4 (ConnectX-3) has no DCB APP table support: trust cannot be set on %s; remove trust from the rule at %s (pfc is applied)", netdev, want.TrustSource)))
	case want.Trust != "":
		run.Add(Trust.Converge(run, reconcile.Target[TrustValue]{
			Subject: subject, Want: trust, Source: want.TrustSource, Holds: trustHolds, Hold: hold,
			Read:  func() (TrustValue, error) { return p.readTrust(netdev) },
			Write: func(want TrustValue) error { return p.writeTrust(netdev, want) },
		}))
	case len(want.DSCPPrio) > 0:
		run.Add(Trust.NotApplicable(subject, trust, want.FirstSource(),
			errors.New(`dscp_prio applies with trust = "dscp", which no rule sets for this port`)))
	}
	p.applyLosslessDCB(run, dev, subject, netdev, want.LosslessDesired, ie, hold)
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
	if known && firmwareOwnsDCB(caps) {
		return fmt.Sprintf("the adapter's firmware (DCBX capabilities %#02x: %s)", caps, describeCaps(caps))
	}
	if LLDPadManages(p.Host, netdev) {
		return "lldpad (it runs and its configuration names " + netdev + ")"
	}
	return ""
}

// firmwareOwnsDCB reports whether DCBX capabilities caps leave DCB to the
// adapter's firmware or an embedded agent: no host mode, or LLD-managed
// (even with the host bit). The one judgement the part, its undo and its
// check (doctor's qos-owner) make.
func firmwareOwnsDCB(caps uint8) bool {
	return caps&dcb.CapHost == 0 || caps&dcb.CapLLDManaged != 0
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
		return nil, fmt.Errorf("read lldpad's configuration: %w", err)
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

// wantedEntries is the DSCP entries trust want gives: the full table for
// dscp, none for pcp.
func wantedEntries(want config.QoSDesired) []dcb.App {
	if want.Trust != config.TrustDSCP {
		return nil
	}
	return PlanTrust(nil, want).Add
}
