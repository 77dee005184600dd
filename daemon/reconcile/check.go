package reconcile

import (
	"context"
	"fmt"
	"strings"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host"
)

// Checker is a part with health checks about its own settings beyond
// whether each one holds (which doctor reads from the records): whether
// the RoCE modes of a host's ports can talk to each other, whether RoCE
// traffic is lossless. Doctor runs every part's checks and publishes the
// notes as findings.
type Checker interface {
	Check(ctx context.Context, in *CheckInput) []Note
}

// CheckInput is what a part's checks look at: the host, the policy in
// force and the observed state with every record.
type CheckInput struct {
	Host   *host.Host
	Policy *config.Policy
	State  *State
}

// Records lists the records of one port.
func (in *CheckInput) Records(dev string, port int) []Record {
	if d := in.State.Device(dev); d != nil {
		for _, p := range d.Ports {
			if p.Number == port {
				return p.Records
			}
		}
	}
	return nil
}

// Severity is how a note weighs.
type Severity uint8

const (
	SeverityOK Severity = iota
	SeverityWarn
	SeverityFail
)

// Note is one health finding of a part's checks: an id (doctor's finding
// id), its subject, a severity, one line, and the fix.
type Note struct {
	ID       string
	Subject  Subject
	Severity Severity
	Finding  string
	Fix      string
}

// ShortList names at most max of names in a note and counts the rest
// ("a, b, c and 2 more"): a note is one line.
func ShortList(names []string, max int) string {
	if len(names) <= max {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:max], ", "), len(names)-max)
}

// Contender is a checker that may know which other manager writes one of
// its settings: when a setting is contested (rdmad kept correcting it),
// doctor names the manager it returns ("" when none is known).
type Contender interface {
	OtherManager(in *CheckInput, r Record) string
}

// Checkers are the parts that implement Checker, in part order.
func (r *Reconciler) Checkers() []Checker {
	var out []Checker
	for _, p := range r.parts() {
		if c, ok := p.(Checker); ok {
			out = append(out, c)
		}
	}
	return out
}
