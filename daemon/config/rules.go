package config

// The per-port rules ([[roce]], [[qos]], [[vpi]]) share one algorithm for
// resolving a port's settings (resolve), one for merging a call's rule
// into rdmad's own rules (MergeRule) and one for withdrawing what a rule
// declares (ForgetRule). Each rule type says only which fields it
// declares.

// PortRule is a rule of one of those tables, as the shared algorithms see
// it. Its methods are the rule type's own; the algorithms are generic.
type PortRule[R any] interface {
	RoCERule | QoSRule | VPIRule
	// head is the rule's selector and port (0: every port).
	head() (Selector, int)
	// atPort is the rule for one port.
	atPort(port int) R
	// without is the rule without the fields o declares; false when it
	// declares nothing left.
	without(o R) (R, bool)
	// with is the rule with o's fields on top.
	with(o R) R
	// shares reports whether the rule and o declare a field in common.
	shares(o R) bool
	// from is the rule declared at pos.
	from(pos Position) R
}

// Runtime is r as declared over D-Bus without persist (the service's
// runtime overlay holds it).
func Runtime[R PortRule[R]](r R) R { return r.from(Position{File: RuntimeFile}) }

// resolver is a rule that folds its fields into a port's resolved
// settings D.
type resolver[R, D any] interface {
	PortRule[R]
	declare(d *D)
}

// resolve is the declared settings of one port: each field is resolved
// on its own, the last matching rule that sets it wins, so a later
// drop-in can change the TOS without repeating the mode.
func resolve[R resolver[R, D], D any](rules []R, t Target, port int) D {
	var d D
	for _, r := range rules {
		sel, p := r.head()
		if (p == 0 || p == port) && sel.Matches(t) {
			r.declare(&d)
		}
	}
	return d
}

// MergeRule returns rules with r added as if appended last (r wins for
// the fields it sets on the ports it covers), without piling up rules:
// what earlier rules of the same selector said about those fields on
// those ports is dropped (rules left empty go), and r is merged into the
// last rule of its selector and port when nothing between them could
// override it. Rules of other selectors are untouched; rdmad's own rules
// (runtime overlay, persisted drop-in) use literal device selectors, so
// those never select the same device. A selector thus keeps at most two
// rules per port and two for every port, however many calls are made.
func MergeRule[R PortRule[R]](rules []R, r R) []R {
	sel, port := r.head()
	out := make([]R, 0, len(rules)+1)
	for _, o := range rules {
		if osel, oport := o.head(); osel == sel && (port == 0 || oport == port) {
			rest, ok := o.without(r)
			if !ok {
				continue // wholly replaced
			}
			o = rest
		}
		out = append(out, o)
	}
	for i := len(out) - 1; i >= 0; i-- {
		osel, oport := out[i].head()
		if osel != sel {
			continue
		}
		if oport == port {
			out[i] = out[i].with(r)
			return out
		}
		if oport == 0 && out[i].shares(r) {
			break // a later rule for every port sets the same field: r must come after it
		}
	}
	return append(out, r)
}

// ForgetRule removes from rules what r declares on the ports r covers
// (port 0: every port), so another declaration of the same settings (a
// persisted one replacing a runtime one) is not shadowed. A rule for
// every port that is partly forgotten is split into rules for each of
// ports, the device's ports, that it still covers.
func ForgetRule[R PortRule[R]](rules []R, r R, ports []int) []R {
	sel, port := r.head()
	var out []R
	for _, o := range rules {
		osel, oport := o.head()
		if osel != sel || (port != 0 && oport != 0 && oport != port) {
			out = append(out, o)
			continue
		}
		if oport == 0 && port != 0 {
			for _, n := range ports {
				if n != port {
					out = append(out, o.atPort(n))
				}
			}
			o = o.atPort(port)
		}
		if rest, ok := o.without(r); ok {
			out = append(out, rest)
		}
	}
	return out
}

// Globbing reports whether matching the selector runs a pattern match (a
// device glob, a PCI address, a netdev), not only comparisons of names.
func (s Selector) Globbing() bool { return s.Device.Pattern || s.PCI != "" || s.Netdev != "" }

// GlobRules counts the per-port rules ([[roce]], [[qos]], [[vpi]]) whose
// selector matches by pattern: every port of a pass matches each of them
// against its device, at a cost that grows with the pattern.
func (p *Policy) GlobRules() int {
	n := 0
	for _, r := range p.RoCE {
		if r.Selector.Globbing() {
			n++
		}
	}
	for _, r := range p.QoS {
		if r.Selector.Globbing() {
			n++
		}
	}
	for _, r := range p.VPI {
		if r.Selector.Globbing() {
			n++
		}
	}
	return n
}

// RoCEFor resolves the declared RoCE settings of one port.
func (p *Policy) RoCEFor(t Target, port int) RoCEDesired {
	return resolve[RoCERule, RoCEDesired](p.RoCE, t, port)
}

// QoSFor resolves the declared [[qos]] settings of one port.
func (p *Policy) QoSFor(t Target, port int) QoSDesired {
	return resolve[QoSRule, QoSDesired](p.QoS, t, port)
}

// VPIFor resolves the declared port type of one port.
func (p *Policy) VPIFor(t Target, port int) VPIDesired {
	return resolve[VPIRule, VPIDesired](p.VPI, t, port)
}

// [[roce]]: mode and tos.

func (r RoCERule) head() (Selector, int)    { return r.Selector, r.Port }
func (r RoCERule) atPort(n int) RoCERule    { r.Port = n; return r }
func (r RoCERule) from(p Position) RoCERule { r.Source = p; return r }
func (r RoCERule) shares(o RoCERule) bool {
	return r.Mode != "" && o.Mode != "" || r.TOS != nil && o.TOS != nil || r.TrafficClass != nil && o.TrafficClass != nil
}

func (r RoCERule) without(o RoCERule) (RoCERule, bool) {
	if o.Mode != "" {
		r.Mode = ""
	}
	if o.TOS != nil {
		r.TOS = nil
	}
	if o.TrafficClass != nil {
		r.TrafficClass = nil
	}
	return r, r.Mode != "" || r.TOS != nil || r.TrafficClass != nil
}

func (r RoCERule) with(o RoCERule) RoCERule {
	if o.Mode != "" {
		r.Mode = o.Mode
	}
	if o.TOS != nil {
		r.TOS = o.TOS
	}
	if o.TrafficClass != nil {
		r.TrafficClass = o.TrafficClass
	}
	return r
}

func (r RoCERule) declare(d *RoCEDesired) {
	if r.Mode != "" {
		d.Mode, d.ModeSource = r.Mode, r.Source
	}
	if r.TOS != nil {
		v := *r.TOS
		d.TOS, d.TOSSource = &v, r.Source
	}
	if r.TrafficClass != nil {
		declare(&d.TrafficClass, *r.TrafficClass, r.Source)
	}
}

// [[qos]]: trust and pfc; dscp_prio entries are resolved one by one and
// never merged (rdmad's own rules do not set them).

func (r QoSRule) head() (Selector, int)   { return r.Selector, r.Port }
func (r QoSRule) atPort(n int) QoSRule    { r.Port = n; return r }
func (r QoSRule) from(p Position) QoSRule { r.Source = p; return r }
func (r QoSRule) shares(o QoSRule) bool {
	return r.Trust != "" && o.Trust != "" || r.HasPFC && o.HasPFC || r.LosslessRule.shares(o.LosslessRule)
}

func (r QoSRule) without(o QoSRule) (QoSRule, bool) {
	if o.Trust != "" {
		r.Trust = ""
	}
	if o.HasPFC {
		r.PFC, r.HasPFC = nil, false
	}
	r.LosslessRule = r.LosslessRule.without(o.LosslessRule)
	return r, r.Trust != "" || r.HasPFC || len(r.DSCPPrio) > 0 || r.LosslessRule.declaresAny()
}

func (r QoSRule) with(o QoSRule) QoSRule {
	if o.Trust != "" {
		r.Trust = o.Trust
	}
	if o.HasPFC {
		r.PFC, r.HasPFC = o.PFC, true
	}
	r.LosslessRule = r.LosslessRule.with(o.LosslessRule)
	return r
}

func (r QoSRule) declare(d *QoSDesired) {
	if r.Trust != "" {
		d.Trust, d.TrustSource = r.Trust, r.Source
	}
	if r.HasPFC {
		d.PFC, d.HasPFC, d.PFCSource = append([]uint8{}, r.PFC...), true, r.Source
	}
	for k, v := range r.DSCPPrio {
		if d.DSCPPrio == nil {
			d.DSCPPrio, d.DSCPSource = map[uint8]uint8{}, map[uint8]Position{}
		}
		d.DSCPPrio[k], d.DSCPSource[k] = v, r.Source
	}
	d.LosslessDesired.resolve(r.LosslessRule, r.Source)
}

// [[vpi]]: type.

func (r VPIRule) head() (Selector, int)           { return r.Selector, r.Port }
func (r VPIRule) atPort(n int) VPIRule            { r.Port = n; return r }
func (r VPIRule) from(p Position) VPIRule         { r.Source = p; return r }
func (r VPIRule) shares(o VPIRule) bool           { return r.Type != "" && o.Type != "" }
func (r VPIRule) with(o VPIRule) VPIRule          { r.Type = o.Type; return r }
func (r VPIRule) without(VPIRule) (VPIRule, bool) { return VPIRule{}, false }
func (r VPIRule) declare(d *VPIDesired)           { d.Type, d.Source = r.Type, r.Source }
