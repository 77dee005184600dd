package bus

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/godbus/dbus/v5"
	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/doctor"
	"github.com/rdmad/rdmad/daemon/reconcile"
	"github.com/rdmad/rdmad/daemon/service"
	"github.com/rdmad/rdmad/daemon/version"
	"github.com/rdmad/rdmad/dbusapi"
)

// This file converts the daemon's typed state into the published model.
// Every model value goes through dbusapi.EscapeStrings before it leaves, so
// a byte read from the host that is not UTF-8 never reaches a client.

// managerModel builds the Manager properties from the policy in force,
// the config error, which policy that is, and the state's facts; paths are
// the device objects' paths (devicePaths).
func managerModel(pol *config.Policy, configErr error, inForce config.InForce, sum reconcile.Summary, paths []dbus.ObjectPath) dbusapi.Manager {
	m := dbusapi.Manager{
		Version:       version.Version,
		LastResult:    reconcile.Summarize(sum.Failures),
		Modules:       sum.Modules,
		PolicyInForce: string(inForce.Origin),
		LastGoodError: inForce.LastGoodError(),
	}
	if !inForce.Saved.IsZero() {
		m.PolicySaved = uint64(inForce.Saved.UnixMicro())
	}
	m.APIChanges = string(config.APIChangesAll)
	if pol != nil {
		if pol.API.Changes != "" {
			m.APIChanges = string(pol.API.Changes)
		}
		if pol.API.Source.File != "" {
			m.APIChangesSource = pol.API.Source.String()
		}
		m.ConfigFiles = pol.Files
		m.NetnsMode = string(pol.Netns.InForce())
		for _, l := range pol.Links {
			m.Links = append(m.Links, dbusapi.Link{Name: l.Name, Type: string(l.Type), Netdev: l.Netdev, Source: l.Source.String()})
		}
	}
	if configErr != nil {
		m.ConfigError = configErr.Error()
	}
	if !sum.LastReconcile.IsZero() {
		m.LastReconcile = uint64(sum.LastReconcile.UnixMicro())
	}
	m.Holds = holdsModel(sum.Holds)
	dbusapi.EscapeStrings(&m)
	m.Devices = paths // object paths are escaped by construction
	return m
}

// summaryOf is the Manager-level facts of a snapshot, as
// Reconciler.Summary gives them for the state of the moment.
func summaryOf(st *reconcile.State) reconcile.Summary {
	names := make([]string, len(st.Devices))
	for i := range st.Devices {
		names[i] = st.Devices[i].Name
	}
	return reconcile.Summary{Devices: names, Modules: st.Modules, LastReconcile: st.LastReconcile, Failures: st.Failures(), HostRecords: st.HostRecords,
		Holds: st.Holds}
}

// disruptionsModel is the parts' table of disruptions as the Manager
// publishes it.
func disruptionsModel(table []reconcile.Disruption) []dbusapi.Disruption {
	out := make([]dbusapi.Disruption, 0, len(table))
	for _, d := range table {
		out = append(out, dbusapi.Disruption{Driver: d.Driver, Setting: d.Setting.Name, Key: string(d.Setting.Key),
			Effect: d.Effect.String(), When: d.When, Follows: d.Follows})
	}
	dbusapi.EscapeStrings(&out)
	return out
}

// notificationsModel is the parts' table of notifications as the Manager
// publishes it.
func notificationsModel(table []reconcile.Notification) []dbusapi.Notification {
	out := make([]dbusapi.Notification, 0, len(table))
	for _, n := range table {
		out = append(out, dbusapi.Notification{Driver: n.Driver, Setting: n.Setting.Name, Notice: n.Notice.String(), Follows: n.Follows})
	}
	dbusapi.EscapeStrings(&out)
	return out
}

// holdsModel is the holds as the Manager publishes them (escaped with it).
func holdsModel(hs []reconcile.Hold) []dbusapi.Hold {
	out := make([]dbusapi.Hold, 0, len(hs))
	for _, h := range hs {
		out = append(out, dbusapi.Hold{Device: h.Subject.Device, Port: uint32(h.Subject.Port), Settings: h.SettingNames(),
			Holder: h.Holder, Since: uint64(h.Since.UnixMicro())})
	}
	return out
}

// devicePaths are the object paths of the named devices.
func devicePaths(names []string) []dbus.ObjectPath {
	out := make([]dbus.ObjectPath, len(names))
	for i, n := range names {
		out[i] = dbusapi.DevicePath(n)
	}
	return out
}

// deviceModel converts a device state, with its ports, to the model.
func deviceModel(d *reconcile.DeviceState) dbusapi.Device {
	dev := dbusapi.Device{
		Name: d.Name, NodeType: d.NodeType, NodeGUID: d.NodeGUID, SysImageGUID: d.SysImageGUID,
		FirmwareVersion: d.FWVersion, HCAType: d.HCAType, BoardID: d.BoardID, Driver: d.Driver,
		PCIAddress: d.PCIAddress, Parent: d.Parent, Netdevs: d.Netdevs, RoCEConfigfs: d.RoCEConfig,
		Error: failureText(d.Failures),
	}
	if d.ReadError != nil {
		dev.Error = joinText("cannot read the device: "+d.ReadError.Error(), dev.Error)
	}
	for _, t := range d.Transports {
		dev.Transports = append(dev.Transports, string(t))
	}
	for _, p := range d.Ports {
		dev.PortPaths = append(dev.PortPaths, dbusapi.PortPath(d.Name, p.Number))
		pm := portModel(d.Name, p)
		for _, dr := range d.PortDrift(&p) {
			pm.Drift[dr.Setting] = dr.Drifted
		}
		dev.Ports = append(dev.Ports, pm)
	}
	dbusapi.EscapeStrings(&dev)
	return dev
}

func portModel(dev string, p reconcile.PortState) dbusapi.Port {
	pm := dbusapi.Port{
		Device: dev, Number: uint32(p.Number), Transport: string(p.Transport), State: p.State,
		PhysState: p.PhysState, Rate: p.Rate, LinkLayer: p.LinkLayer, LID: p.LID, SMLID: p.SMLID,
		GIDTypes: p.GIDTypes, Netdevs: p.Netdevs,
		Error: failureText(p.Failures), Drift: map[string]bool{}, Settings: []dbusapi.Setting{}, Corrected: map[string]uint32{},
	}
	wires := make([]dbusapi.Wire, 0, len(p.Records))
	for _, r := range p.Records {
		pm.Settings = append(pm.Settings, settingModel(r))
		if r.Corrected > 0 {
			pm.Corrected[r.Setting.Name] = r.Corrected
		}
		w := dbusapi.Wire{Name: r.Setting.Name}
		if r.IsDeclared() {
			w.Source = r.Source.String()
			w.Declared = wire(r.Declared, true)
		}
		w.Observed = wire(r.Observed, false)
		wires = append(wires, w)
	}
	pm.FillSingle(wires)
	return pm
}

// settingModel is a record as published.
func settingModel(r reconcile.Record) dbusapi.Setting {
	s := dbusapi.Setting{Name: r.Setting.Name, Title: r.Setting.Title, Observed: reconcile.Text(r.Observed),
		State: r.State.String(), Why: r.WhyText()}
	if r.IsDeclared() {
		s.Declared, s.Source = reconcile.Text(r.Declared), r.Source.String()
	}
	return s
}

// wire is a value in the Go type of the property that carries it alone,
// nil when it has none.
func wire(v reconcile.Value, declared bool) any {
	if w, ok := v.(reconcile.Wired); ok {
		return w.Wire(declared)
	}
	return nil
}

// failureText is the Error property of an object: its failures, "; "-joined.
func failureText(failures []reconcile.Action) string {
	var msgs []string
	for _, a := range failures {
		msgs = append(msgs, fmt.Sprintf("%s: %v", a.Kind, a.Err))
	}
	return strings.Join(msgs, "; ")
}

func joinText(a, b string) string {
	if b == "" {
		return a
	}
	return a + "; " + b
}

// subjectModel is a typed subject as published.
func subjectModel(s reconcile.Subject) dbusapi.Subject {
	switch s.Kind {
	case reconcile.SubjectDevice:
		return dbusapi.Subject{Kind: "device", Device: s.Device}
	case reconcile.SubjectPort:
		return dbusapi.Subject{Kind: "port", Device: s.Device, Port: uint32(s.Port)}
	case reconcile.SubjectLink:
		return dbusapi.Subject{Kind: "link", Link: s.Link}
	case reconcile.SubjectNetdev:
		return dbusapi.Subject{Kind: "netdev", Netdev: s.Netdev}
	}
	return dbusapi.Subject{Kind: "host"}
}

// Findings are doctor's findings as Diagnose publishes them: every string
// escaped (dbusapi.Escape: valid UTF-8, control characters and bad bytes
// as \xNN), as a device's are.
func Findings(fs []doctor.Finding) []dbusapi.Finding {
	out := make([]dbusapi.Finding, len(fs))
	for i, f := range fs {
		s := subjectModel(f.Subject)
		s.Device, s.Link, s.Netdev = dbusapi.Escape(s.Device), dbusapi.Escape(s.Link), dbusapi.Escape(s.Netdev)
		out[i] = dbusapi.Finding{
			ID: dbusapi.Escape(f.ID), Subject: s, Severity: severityModel(f.Severity),
			Finding: dbusapi.Escape(f.Finding), Fix: dbusapi.Escape(f.Fix), Scope: scopeModel(f.Scope),
			IgnoredSeverity: severityModel(f.IgnoredSeverity), IgnoredBy: dbusapi.Escape(f.IgnoredBy),
		}
	}
	return out
}

func severityModel(s doctor.Severity) dbusapi.Severity {
	switch s {
	case doctor.SeverityOK:
		return dbusapi.SeverityOK
	case doctor.SeverityWarn:
		return dbusapi.SeverityWarn
	case doctor.SeverityFail:
		return dbusapi.SeverityFail
	case doctor.SeverityIgnored:
		return dbusapi.SeverityIgnored
	}
	return "" // none: an ignored finding's IgnoredSeverity only
}

func scopeModel(s doctor.Scope) string {
	if s == doctor.ScopePolicy {
		return dbusapi.ScopePolicy
	}
	return dbusapi.ScopeHost
}

func actionModel(a reconcile.Action) dbusapi.Action {
	am := dbusapi.Action{Subject: subjectModel(a.Subject), Kind: string(a.Kind), From: a.From, To: a.To,
		Status: a.Status.String(), Source: a.Source}
	if a.Err != nil {
		am.Error = a.Err.Error()
	}
	return am
}

// describe is the Describe document. Every part of it comes from one
// snapshot of the state and one reading of the declarations: a pass or a
// runtime change landing while it is built shows in none of it, rather
// than in the Manager's LastResult but not in the devices listed.
func (s *Server) describe() ([]byte, error) {
	var (
		st        reconcile.State
		pol       *config.Policy
		ov        service.Overlay
		configErr error
		inForce   config.InForce
	)
	s.svc.BetweenCalls(func() {
		st = s.state.Snapshot()
		pol, ov = s.svc.Declared()
		configErr = s.svc.ConfigError()
		inForce = s.svc.InForce()
	})
	if h := s.hook(); h != nil && h.afterSnapshot != nil {
		h.afterSnapshot()
	}
	d := dbusapi.Description{
		// Manager.Devices is not part of the JSON document: no paths.
		Manager: managerModel(pol, configErr, inForce, summaryOf(&st), nil),
		Devices: make([]dbusapi.Device, 0, len(st.Devices)),
		Actions: []dbusapi.Action{},
	}
	for i := range st.Devices {
		d.Devices = append(d.Devices, deviceModel(&st.Devices[i]))
	}
	rt := &dbusapi.RuntimeState{NetnsMode: string(ov.Netns), RoCE: []dbusapi.RuntimeRoCE{}, QoS: []dbusapi.RuntimeQoS{}, Links: []dbusapi.Link{},
		DeletedLinks: append([]string{}, ov.DeletedLinks...)}
	for _, r := range ov.RoCE {
		tos := -1
		if r.TOS != nil {
			tos = *r.TOS
		}
		rt.RoCE = append(rt.RoCE, dbusapi.RuntimeRoCE{Device: r.Device.Name, Port: r.Port, Mode: string(r.Mode), TOS: tos})
	}
	for _, r := range ov.QoS {
		q := dbusapi.RuntimeQoS{Device: r.Device.Name, Port: r.Port, Trust: string(r.Trust),
			PFC: dbusapi.Priorities(append([]uint8{}, r.PFC...)), PFCSet: r.HasPFC}
		if v := r.LosslessRule.Values(); len(v) > 0 {
			q.Settings = v
		}
		rt.QoS = append(rt.QoS, q)
	}
	for _, l := range ov.Links {
		rt.Links = append(rt.Links, dbusapi.Link{Name: l.Name, Type: string(l.Type), Netdev: l.Netdev, Source: config.RuntimeFile})
	}
	d.Runtime = rt
	for _, a := range st.Actions() {
		d.Actions = append(d.Actions, actionModel(a))
	}
	d.Changes = changesModel(pol)
	// The Manager and devices come escaped from managerModel and
	// deviceModel, as the properties do; escaping them again would turn
	// "\xff" into "\\xff", a name that names nothing.
	dbusapi.EscapeStrings(d.Runtime)
	dbusapi.EscapeStrings(&d.Actions)
	dbusapi.EscapeStrings(&d.Changes)
	return json.MarshalIndent(d, "", "  ")
}
