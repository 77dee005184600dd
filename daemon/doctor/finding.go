package doctor

import "github.com/rdmad/rdmad/daemon/reconcile"

// Severity of a finding.
type Severity string

const (
	SeverityOK   Severity = "ok"   // checked and fine; shown so the operator sees what was checked
	SeverityWarn Severity = "warn" // works, but not as an RDMA host should
	SeverityFail Severity = "fail" // RDMA does not work, or not as declared
	// SeverityIgnored is a warn or fail finding that a [doctor] ignore
	// entry matches: still listed, with the entry's file:line, but it
	// counts toward no exit status, gate or alert.
	SeverityIgnored Severity = "ignored"
)

// IDExpectMissing is the finding of an [[expect]] rule whose devices are
// not all here; the metrics count it (rdmad_expect_missing).
const IDExpectMissing = "expect-missing"

// Scope says what decides a finding: ScopePolicy for the configuration
// and the settings it declares (what a rollout gate needs), ScopeHost for
// what only the host's hardware and user space decide.
type Scope string

const (
	ScopePolicy Scope = "policy"
	ScopeHost   Scope = "host"
)

// Finding is one result of Diagnose: a stable ID (the list is in
// rdmactl(8)), its subject, a severity, one line for a human (Finding)
// and the exact command or configuration key that resolves it (Fix, ""
// when there is nothing to do). An ignored finding keeps the severity it
// had in IgnoredSeverity and the [doctor] ignore entry's file:line in
// IgnoredBy. Strings are as read from the host: whoever publishes a
// finding escapes it (daemon/bus, daemon/metrics).
type Finding struct {
	ID              string
	Subject         reconcile.Subject
	Severity        Severity
	Finding         string
	Fix             string
	Scope           Scope
	IgnoredSeverity Severity
	IgnoredBy       string
}
