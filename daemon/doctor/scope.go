package doctor

import "strings"

// policyIDs are the findings about the configuration and the settings it
// declares: rdmactl doctor --scope policy keeps only these. It is the
// readiness gate of a rollout (the Kubernetes DaemonSet's probe): does the
// new policy load, and does what it declares hold? What only the host's
// hardware and user space decide (ports, counters, /dev/infiniband,
// libibverbs providers, which a pod does not see) is left out. A new
// finding about a declared setting belongs here.
var policyIDs = map[string]bool{
	"config-loaded": true, "config-error": true,
	"override": true, "no-override": true, "api-tables": true,
	"link-present": true, "link-waiting": true, "link-missing": true,
	"roce-policy-applied": true, "roce-mode-differs": true, "roce-tos-differs": true, "roce-configfs-missing": true,
	"rules-matched": true, "rule-unmatched": true,
	"expect-rules-matched": true, "expect-unmatched": true,
	"memlock-login": true, "memlock-login-low": true, "memlock-group-missing": true,
	"memlock-services": true, "memlock-services-low": true,
	"netns-mode": true, "netns-not-persistent": true, "netns-reboot-pending": true,
	"netns-boot-differs": true, "netns-mode-differs": true, "netns-initramfs-stale": true,
	"qos-owner": true, "qos-vf": true, "qos-mlx4-initramfs-stale": true,
	// The setting records' findings (settings.go): every declared setting
	// held, or one that does not hold (SETTING-differs, below) or another
	// manager keeps changing; a removed declaration whose value could not
	// be put back.
	"policy-applied": true, "setting-contested": true, "setting-fought": true, "undo-partial": true,
	// A hold on settings (HoldCorrections): the policy is not kept there
	// while it lasts.
	"corrections-held": true,
	"last-good":        true,
}

// scopeOf is the scope of a finding id. SETTING-differs is a declared
// setting that does not hold, whatever the setting (roce-tos-differs,
// qos-pfc-differs, netns-boot-differs...).
func scopeOf(id string) Scope {
	if policyIDs[id] || strings.HasSuffix(id, "-differs") {
		return ScopePolicy
	}
	return ScopeHost
}

// applyIgnore turns every warn or fail finding that a [doctor] ignore
// entry names into an ignored one, keeping its severity and naming the
// entry. An ok finding stays ok: there is nothing to silence.
func (d *diag) applyIgnore() {
	if len(d.pol.Doctor.Ignore) == 0 {
		return
	}
	for i := range d.out {
		f := &d.out[i]
		if f.Severity != SeverityWarn && f.Severity != SeverityFail {
			continue
		}
		// The subject as rdmactl doctor names it (a name that holds
		// bytes rdmactl escapes matches as the kernel gives it).
		if r, ok := d.pol.Doctor.IgnoredBy(f.ID, f.Subject.String()); ok {
			f.IgnoredSeverity, f.Severity = f.Severity, SeverityIgnored
			f.IgnoredBy = r.Source.String()
		}
	}
}
