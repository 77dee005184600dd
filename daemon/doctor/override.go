package doctor

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/reconcile"
)

// A declaration made over D-Bus (rdmactl, Cockpit) sits after every file:
// a runtime one on top of the policy, a persisted one in rdmad's drop-in,
// which loads last. Either silently beats what the site's files declare
// for the same setting, so one local `rdmactl roce set --persist` can
// undo a fleet's policy while every tool says "as declared". checkOverrides
// names each such setting, where both declarations are, and the command
// that withdraws the local one; and, where [api] changes no longer allows
// what was declared over D-Bus before it, those declarations too.

// setting is one declared value of a port and where it was declared.
type setting struct {
	value  string
	source config.Position
}

// portSettings are the settings a port's declarations resolve to, by name
// ("RoCE mode", "QoS pfc"...). A new per-port setting is one line here.
func portSettings(pol *config.Policy, t config.Target, port int) map[string]setting {
	out := map[string]setting{}
	r := pol.RoCEFor(t, port)
	if r.Mode != "" {
		out["RoCE mode"] = setting{string(r.Mode), r.ModeSource}
	}
	if r.TOS != nil {
		out["RoCE TOS"] = setting{fmt.Sprint(*r.TOS), r.TOSSource}
	}
	q := pol.QoSFor(t, port)
	if q.Trust != "" {
		out["QoS trust"] = setting{string(q.Trust), q.TrustSource}
	}
	if q.HasPFC {
		out["QoS pfc"] = setting{fmt.Sprint(q.PFC), q.PFCSource}
	}
	for dscp, prio := range q.DSCPPrio {
		out[fmt.Sprintf("QoS dscp_prio %d", dscp)] = setting{fmt.Sprint(prio), q.DSCPSource[dscp]}
	}
	return out
}

// kindOfSetting is the rdmactl command group that withdraws a setting.
func kindOfSetting(name string) string {
	if strings.HasPrefix(name, "RoCE ") {
		return "roce"
	}
	return "qos"
}

// filesOnly is pol without the rules declared over D-Bus: what the site's
// files alone declare.
func filesOnly(pol *config.Policy) *config.Policy {
	p := *pol
	p.RoCE = slices.DeleteFunc(slices.Clone(pol.RoCE), func(r config.RoCERule) bool { return config.FromDBus(r.Source) })
	p.QoS = slices.DeleteFunc(slices.Clone(pol.QoS), func(r config.QoSRule) bool { return config.FromDBus(r.Source) })
	return &p
}

// overrides collects, per subject, why a declaration over D-Bus is worth
// a warning and the commands that withdraw it.
type overrides struct {
	order   []string
	byKey   map[string]*overrideFinding
	apiSays string // "[api] changes = ... (file:line)" when it refuses what was declared
}

type overrideFinding struct {
	subject reconcile.Subject
	reasons []string
	fixes   []string
}

func (o *overrides) add(s reconcile.Subject, reason, fix string) {
	key := s.String()
	f, ok := o.byKey[key]
	if !ok {
		f = &overrideFinding{subject: s}
		o.byKey[key] = f
		o.order = append(o.order, key)
	}
	if !slices.Contains(f.reasons, reason) {
		f.reasons = append(f.reasons, reason)
	}
	if !slices.Contains(f.fixes, fix) {
		f.fixes = append(f.fixes, fix)
	}
}

// where says where a declaration over D-Bus was made.
func where(pos config.Position) string {
	if pos.IsRuntime() {
		return "set at runtime"
	}
	return "persisted at " + pos.String()
}

// unsetCommand is the rdmactl command that withdraws a declaration over
// D-Bus of kind made at pos, for target ("mlx5_0/1", "mlx5_0", a link).
func unsetCommand(kind, target string, pos config.Position) string {
	cmd := "rdmactl " + kind + " unset"
	if target != "" {
		cmd += " " + target
	}
	if !pos.IsRuntime() {
		cmd += " --persist"
	}
	return cmd
}

func portTarget(dev string, port int) string {
	if port == 0 {
		return dev
	}
	return fmt.Sprintf("%s/%d", dev, port)
}

// apiRefuses says whether [api] changes refuses now a declaration made
// at pos over D-Bus: persisted ones under "runtime" and "none", runtime
// ones under "none".
func apiRefuses(api config.API, pos config.Position) bool {
	return api.Allows(!pos.IsRuntime()) != nil
}

func (d *diag) checkOverrides() {
	o := &overrides{byKey: map[string]*overrideFinding{}}
	api := d.pol.API
	if api.Changes == config.APIChangesRuntime || api.Changes == config.APIChangesNone {
		o.apiSays = fmt.Sprintf("[api] changes = %q (%s)", api.Changes, api.Source)
	}
	d.portOverrides(o, api)
	d.linkOverrides(o, api)
	d.netnsOverrides(o, api)
	if len(o.order) == 0 {
		d.ok("no-override", hostSubject, "nothing declared over D-Bus (rdmactl, Cockpit) overrides a configuration file or what [api] changes allows")
	}
	for _, key := range o.order {
		f := o.byKey[key]
		d.warn("override", f.subject, strings.Join(f.reasons, "; "), strings.Join(f.fixes, "; "))
	}
	d.checkAPITables()
}

// portOverrides: per port, each setting declared over D-Bus that a file
// also declares, and each one [api] no longer allows.
func (d *diag) portOverrides(o *overrides, api config.API) {
	files := filesOnly(d.pol)
	for i := range d.devs {
		dev := &d.devs[i]
		t := roceTarget(dev)
		for _, p := range dev.Ports {
			inForce := portSettings(d.pol, t, p.Number)
			declared := portSettings(files, t, p.Number)
			for _, name := range sortedNames(inForce) {
				v := inForce[name]
				if !config.FromDBus(v.source) {
					continue
				}
				rule := d.ruleTarget(kindOfSetting(name), dev.Name, p.Number, v.source)
				fix := unsetCommand(kindOfSetting(name), rule, v.source)
				if f, ok := declared[name]; ok {
					o.add(portSubject(dev.Name, p.Number), fmt.Sprintf("%s %s (%s) overrides %s declared at %s", name, v.value, where(v.source), f.value, f.source), fix)
				}
				if apiRefuses(api, v.source) {
					o.add(portSubject(dev.Name, p.Number), fmt.Sprintf("%s %s (%s) is declared over D-Bus, which %s no longer allows", name, v.value, where(v.source), o.apiSays), fix)
				}
			}
		}
	}
}

// ruleTarget is what rdmactl KIND unset names to withdraw the rule at
// source for port of dev: the port, or the device when the rule covers
// every port.
func (d *diag) ruleTarget(kind, dev string, port int, source config.Position) string {
	sel := config.Selector{Device: config.Exact(dev)}
	if kind == "roce" {
		for _, r := range d.pol.RoCE {
			if r.Source == source && r.Selector == sel && r.Port == 0 {
				return dev
			}
		}
	} else {
		for _, r := range d.pol.QoS {
			if r.Source == source && r.Selector == sel && r.Port == 0 {
				return dev
			}
		}
	}
	return portTarget(dev, port)
}

// linkOverrides: links of the files that a declaration over D-Bus
// replaced or deleted, and links [api] no longer allows.
func (d *diag) linkOverrides(o *overrides, api config.API) {
	for _, s := range d.pol.ShadowedLinks {
		if !config.FromDBus(s.By) || config.FromDBus(s.Link.Source) {
			continue
		}
		what := fmt.Sprintf("redeclared (%s) as %s on %s", where(s.By), s.Link.Type, s.Link.Netdev)
		if s.Deleted {
			what = "deleted at runtime"
		} else {
			for _, l := range d.pol.Links {
				if l.Name == s.Link.Name {
					what = fmt.Sprintf("redeclared (%s) as %s on %s", where(s.By), l.Type, l.Netdev)
				}
			}
		}
		o.add(linkSubject(s.Link.Name), fmt.Sprintf("link %s declared at %s (%s on %s) is %s", s.Link.Name, s.Link.Source, s.Link.Type, s.Link.Netdev, what),
			unsetCommand("link", s.Link.Name, s.By))
		if s.Deleted && apiRefuses(api, s.By) {
			o.add(linkSubject(s.Link.Name), fmt.Sprintf("its deletion over D-Bus is not allowed by %s any more", o.apiSays), unsetCommand("link", s.Link.Name, s.By))
		}
	}
	for _, l := range d.pol.Links {
		if config.FromDBus(l.Source) && apiRefuses(api, l.Source) {
			o.add(linkSubject(l.Name), fmt.Sprintf("link %s (%s) is declared over D-Bus, which %s no longer allows", l.Name, where(l.Source), o.apiSays),
				unsetCommand("link", l.Name, l.Source))
		}
	}
}

// netnsOverrides: a netns mode set over D-Bus over a file's, and one [api]
// no longer allows.
func (d *diag) netnsOverrides(o *overrides, api config.API) {
	var fileDecl *config.Position
	for i, pos := range d.pol.NetnsDeclarations {
		if !config.FromDBus(pos) {
			fileDecl = &d.pol.NetnsDeclarations[i]
		}
	}
	var local []setting
	if d.pol.Netns.Mode != config.NetnsUnmanaged && config.FromDBus(d.pol.Netns.Source) {
		local = append(local, setting{string(d.pol.Netns.Mode), d.pol.Netns.Source})
	}
	if d.pol.Netns.Runtime != config.NetnsUnmanaged {
		local = append(local, setting{string(d.pol.Netns.Runtime), config.Position{File: config.RuntimeFile}})
	}
	for _, v := range local {
		if fileDecl != nil {
			o.add(hostSubject, fmt.Sprintf("netns mode %s (%s) overrides the mode declared at %s", v.value, where(v.source), *fileDecl),
				unsetCommand("netns", "", v.source))
		}
		if apiRefuses(api, v.source) {
			o.add(hostSubject, fmt.Sprintf("netns mode %s (%s) is declared over D-Bus, which %s no longer allows", v.value, where(v.source), o.apiSays),
				unsetCommand("netns", "", v.source))
		}
	}
}

// checkAPITables warns when more than one file has an [api] table: only
// the last file's changes holds, and the others read as if they did.
func (d *diag) checkAPITables() {
	tables := d.pol.API.Tables
	if len(tables) < 2 {
		return
	}
	where := make([]string, len(tables))
	for i, t := range tables {
		where[i] = t.String()
	}
	changes := d.pol.API.Changes
	if changes == "" {
		changes = config.APIChangesAll
	}
	holds := "the default"
	if d.pol.API.Source.File != "" {
		holds = d.pol.API.Source.String()
	}
	d.warn("api-tables", hostSubject,
		fmt.Sprintf("[api] is declared in %d files (%s); only the last says what holds: changes = %q (%s)", len(tables), strings.Join(where, ", "), changes, holds),
		"keep [api] in one file and remove it from the others")
}

func sortedNames(m map[string]setting) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
