package config

// WithdrawRoCE returns rules without what they declare for the ports of
// sel that port names (0: every port), so that other files decide there
// again: a rule of sel for that port goes, and a rule of sel for every
// port is kept for each of the other ports in ports (the device's ports),
// one rule each. Rules of other selectors are untouched; rules is not
// modified.
func WithdrawRoCE(rules []RoCERule, sel Selector, port int, ports []int) []RoCERule {
	return withdrawRules(rules, sel, port, ports, func(r *RoCERule) (Selector, *int) { return r.Selector, &r.Port })
}

// WithdrawQoS is WithdrawRoCE for [[qos]] rules: every QoS setting of the
// rules withdrawn goes.
func WithdrawQoS(rules []QoSRule, sel Selector, port int, ports []int) []QoSRule {
	return withdrawRules(rules, sel, port, ports, func(r *QoSRule) (Selector, *int) { return r.Selector, &r.Port })
}

// withdrawRules is the rule of WithdrawRoCE for any rule type; key gives
// a rule's selector and its port to edit.
func withdrawRules[R any](rules []R, sel Selector, port int, ports []int, key func(*R) (Selector, *int)) []R {
	out := make([]R, 0, len(rules))
	for _, r := range rules {
		s, p := key(&r)
		switch {
		case s != sel:
			out = append(out, r)
		case port == 0 || *p == port:
			// withdrawn
		case *p == 0:
			for _, n := range ports {
				if n != port {
					k := r
					_, kp := key(&k)
					*kp = n
					out = append(out, k)
				}
			}
		default:
			out = append(out, r)
		}
	}
	return out
}
