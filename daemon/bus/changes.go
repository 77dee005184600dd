package bus

import (
	"sort"
	"strconv"
	"strings"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/dbusapi"
)

// changesModel lists the declarations in force made over D-Bus (the
// runtime overlay and rdmad's drop-in) with who made each and when, for
// Describe's "changes": what rdmactl status shows an operator who asks
// why a port is not what the site's files say. Strings are escaped by
// the caller (dbusapi.EscapeStrings).
func changesModel(pol *config.Policy) []dbusapi.Change {
	out := []dbusapi.Change{}
	if pol == nil {
		return out
	}
	add := func(kind, target string, values []string, src config.Position, n config.Note) {
		c := dbusapi.Change{Kind: kind, Target: target, Values: strings.Join(values, ", "), Source: src.String(), By: n.By}
		if !n.At.IsZero() {
			c.At = uint64(n.At.UnixMicro())
		}
		out = append(out, c)
	}
	for _, r := range pol.RoCE {
		if !config.FromDBus(r.Source) {
			continue
		}
		var v []string
		if r.Mode != "" {
			v = append(v, "mode = "+strconv.Quote(string(r.Mode)))
		}
		if r.TOS != nil {
			v = append(v, "tos = "+strconv.Itoa(*r.TOS))
		}
		if r.TrafficClass != nil {
			v = append(v, "traffic_class = "+strconv.FormatBool(*r.TrafficClass))
		}
		add("roce", ruleTarget(r.Selector, r.Port), v, r.Source, r.Note)
	}
	for _, r := range pol.QoS {
		if !config.FromDBus(r.Source) {
			continue
		}
		var v []string
		if r.Trust != "" {
			v = append(v, "trust = "+strconv.Quote(string(r.Trust)))
		}
		if r.HasPFC {
			p := make([]string, len(r.PFC))
			for i, n := range r.PFC {
				p[i] = strconv.Itoa(int(n))
			}
			v = append(v, "pfc = ["+strings.Join(p, ", ")+"]")
		}
		rest := r.LosslessRule.Values()
		keys := make([]string, 0, len(rest))
		for k := range rest {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			v = append(v, k+" = "+rest[k])
		}
		add("qos", ruleTarget(r.Selector, r.Port), v, r.Source, r.Note)
	}
	for _, l := range pol.Links {
		if config.FromDBus(l.Source) {
			add("link", l.Name, []string{"type = " + strconv.Quote(string(l.Type)), "netdev = " + strconv.Quote(l.Netdev)}, l.Source, l.Note)
		}
	}
	if n := pol.Netns; n.Mode != config.NetnsUnmanaged && config.IsPersistedFile(n.Source) {
		add("netns", "", []string{"mode = " + strconv.Quote(string(n.Mode))}, n.Source, n.Note)
	}
	if n := pol.Netns; n.Runtime != config.NetnsUnmanaged {
		add("netns", "", []string{"mode = " + strconv.Quote(string(n.Runtime))}, config.Position{File: config.RuntimeFile}, n.RuntimeNote)
	}
	return out
}

// ruleTarget is what a rule of rdmad's own names: the device (its
// selector is one exact name) and the port, as rdmactl spells it.
func ruleTarget(sel config.Selector, port int) string {
	if port == 0 {
		return sel.Device.Name
	}
	return sel.Device.Name + "/" + strconv.Itoa(port)
}
