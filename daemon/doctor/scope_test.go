package doctor

import "testing"

// The findings about declared settings are the policy's, the setting
// records' ones included, whatever the setting: the DaemonSet's readiness
// probe (--scope policy) must see a declared setting that does not hold.
func TestScopeOfDeclaredSettings(t *testing.T) {
	for id, want := range map[string]Scope{
		"roce-tos-differs": ScopePolicy, "qos-pfc-differs": ScopePolicy, "qos-trust-differs": ScopePolicy,
		"netns-boot-differs": ScopePolicy, "setting-contested": ScopePolicy, "policy-applied": ScopePolicy,
		"config-error": ScopePolicy, "link-missing": ScopePolicy,
		"port-active": ScopeHost, "uverbs-device-missing": ScopeHost, "counter-increase": ScopeHost, "verbs-providers-missing": ScopeHost,
	} {
		if got := scopeOf(id); got != want {
			t.Errorf("scopeOf(%s) = %s, want %s", id, got, want)
		}
	}
}
