package dbusapi

import (
	"encoding/json"
	"fmt"
)

// Severity of a finding of Diagnose.
type Severity string

const (
	SeverityOK   Severity = "ok"   // checked and fine; shown so the operator sees what was checked
	SeverityWarn Severity = "warn" // works, but not as an RDMA host should; exit status stays 0
	SeverityFail Severity = "fail" // RDMA does not work, or not as declared; rdmactl doctor exits 1
	// SeverityIgnored is a warn or fail finding that a [doctor] ignore
	// entry matches: still listed, with the entry's file:line, but it
	// counts toward no exit status, gate or alert.
	SeverityIgnored Severity = "ignored"
)

// Scopes of a finding: rdmactl doctor --scope policy keeps the findings
// about the configuration and the settings it declares (what a rollout
// gate needs: is the new policy in force?), leaving out what only the
// host's hardware and user space decide.
const (
	ScopePolicy = "policy"
	ScopeHost   = "host"
)

// Finding is one result of org.rdmad1.Manager.Diagnose. ID is stable (a
// script may match on it; the list is in rdmactl(8)); Subject is what it is
// about (kind host, device, port, link or netdev); Finding is one line for
// a human; Fix is the exact command or configuration key that resolves it,
// "" when there is nothing to do. Scope is ScopePolicy or ScopeHost. An
// ignored finding keeps the severity it had in IgnoredSeverity and the
// file:line of the [doctor] ignore entry that matched in IgnoredBy.
type Finding struct {
	ID              string   `json:"id"`
	Subject         Subject  `json:"subject"`
	Severity        Severity `json:"severity"`
	Finding         string   `json:"finding"`
	Fix             string   `json:"fix"`
	Scope           string   `json:"scope,omitempty"`
	IgnoredSeverity Severity `json:"ignored_severity,omitempty"`
	IgnoredBy       string   `json:"ignored_by,omitempty"`
}

// EncodeFindings is the JSON document Diagnose returns: an array of
// findings, indented like Describe's. An empty list is "[]", never null.
func EncodeFindings(fs []Finding) (string, error) {
	if fs == nil {
		fs = []Finding{}
	}
	b, err := json.MarshalIndent(fs, "", "  ")
	if err != nil {
		return "", fmt.Errorf("encode the findings as JSON: %w", err)
	}
	return string(b), nil
}

// DecodeFindings reads what Diagnose returned. Fields a newer rdmad adds
// are ignored, so an older rdmactl keeps working.
func DecodeFindings(doc string) ([]Finding, error) {
	var fs []Finding
	if err := json.Unmarshal([]byte(doc), &fs); err != nil {
		return nil, fmt.Errorf("the reply of Diagnose is not a list of findings: %w", err)
	}
	return fs, nil
}

// CountFailed is how many findings have severity fail (an ignored one
// never counts).
func CountFailed(fs []Finding) int {
	n := 0
	for _, f := range fs {
		if f.Severity == SeverityFail {
			n++
		}
	}
	return n
}
