package config

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/rdmad/rdmad/daemon/config/value"
)

// Problem is what breaks a rule's validity: Key names the key that holds
// the bad value (and the D-Bus argument of the same name), "" the rule as
// a whole (a key missing, a combination of keys).
type Problem struct {
	Key string
	Err error
}

// Validate checks the values of each typed value against the one copy of
// their rules (package value). The decoder reports a problem at the
// file:line of its key, the service as the argument of that name.

// Validate accepts the modes RoCEv1 and RoCEv2.
func (m RoCEMode) Validate() error { return value.RoCEMode(string(m)) }

// Validate accepts TrustDSCP and TrustPCP.
func (t QoSTrust) Validate() error { return value.Trust(string(t)) }

// Validate accepts LinkRXE and LinkSIW.
func (t LinkType) Validate() error { return value.LinkType(string(t)) }

// Validate accepts NetnsShared and NetnsExclusive.
func (m NetnsMode) Validate() error { return value.NetnsMode(string(m)) }

var errNoSelector = fmt.Errorf("no device selector: set at least one of %s (device = \"*\" selects every device)", selectorKeys)

// Validate checks a [[roce]] rule (a SetRoCE call's, too): a selector, a
// valid mode and TOS, and at least one of them.
func (r RoCERule) Validate() []Problem {
	var out []Problem
	if r.Selector == (Selector{}) {
		out = append(out, Problem{"", errNoSelector})
	}
	if r.Mode != "" {
		if err := r.Mode.Validate(); err != nil {
			out = append(out, Problem{"mode", err})
		}
	}
	if r.TOS != nil {
		if err := value.TOS(*r.TOS); err != nil {
			out = append(out, Problem{"tos", err})
		}
	}
	if r.Mode == "" && r.TOS == nil && r.TrafficClass == nil {
		out = append(out, Problem{"", errors.New("sets nothing: set mode, tos or both")})
	}
	return out
}

// Validate checks a [[qos]] rule (a SetQoS call's, too): a selector, a
// valid trust, PFC priorities and DSCP entries, at least one of them, and
// DSCP entries only with trust dscp.
func (r QoSRule) Validate() []Problem {
	var out []Problem
	if r.Selector == (Selector{}) {
		out = append(out, Problem{"", errNoSelector})
	}
	return append(out, r.validateSettings()...)
}

// validateSettings checks a [[qos]] rule but for its selector.
func (r QoSRule) validateSettings() []Problem {
	var out []Problem
	if r.Trust != "" {
		if err := r.Trust.Validate(); err != nil {
			out = append(out, Problem{"trust", err})
		}
	}
	if r.HasPFC {
		ps := make([]int, len(r.PFC))
		for i, p := range r.PFC {
			ps[i] = int(p)
		}
		if err := value.Priorities(ps); err != nil {
			out = append(out, Problem{"pfc", err})
		}
	}
	for _, dscp := range slices.Sorted(maps.Keys(r.DSCPPrio)) {
		if err := dscpEntry(int(dscp), int(r.DSCPPrio[dscp])); err != nil {
			out = append(out, Problem{"dscp_prio", err})
		}
	}
	if r.Trust == "" && !r.HasPFC && r.DSCPPrio == nil && !r.LosslessRule.declaresAny() {
		out = append(out, Problem{"", errors.New("sets nothing: set trust, pfc, dscp_prio or another [[qos]] key")})
	}
	if r.Trust == TrustPCP && r.DSCPPrio != nil {
		out = append(out, Problem{"dscp_prio", errors.New("applies with trust = \"dscp\" only; this rule sets trust = \"pcp\"")})
	}
	return out
}

// dscpEntry checks one dscp_prio entry: DSCP = priority.
func dscpEntry(dscp, prio int) error {
	if err := value.DSCP(dscp); err != nil {
		return err
	}
	if err := value.Priority(prio); err != nil {
		return fmt.Errorf("DSCP %d: %w", dscp, err)
	}
	return nil
}

// Validate checks a [[link]] (an AddLink call's, too): a valid name, type
// and netdev, none missing.
func (l Link) Validate() []Problem {
	var out, missing []Problem
	for _, k := range []struct {
		key, val string
		valid    func(string) error
	}{{"name", l.Name, value.LinkName}, {"type", string(l.Type), value.LinkType}, {"netdev", l.Netdev, value.NetdevName}} {
		switch {
		case k.val == "":
			missing = append(missing, Problem{k.key, nil})
		default:
			if err := k.valid(k.val); err != nil {
				out = append(out, Problem{k.key, err})
			}
		}
	}
	if len(missing) > 0 {
		keys := make([]string, len(missing))
		for i, m := range missing {
			keys[i] = m.Key
		}
		out = append(out, Problem{"", fmt.Errorf("missing %s: a link needs name, type and netdev", strings.Join(keys, " and "))})
	}
	return out
}
