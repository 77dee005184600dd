package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/rdmad/rdmad/dbusapi"
	"github.com/rdmad/rdmad/dbusapi/client"
)

func init() { register("", doctorCommand) }

func doctorCommand(e *env) *cobra.Command {
	var quiet, lines bool
	var scope string
	c := &cobra.Command{
		Use:   "doctor [--quiet | --lines] [--scope policy]",
		Short: "Check that RDMA is usable on the host",
		Long: `Ask rdmad whether RDMA is usable on this host (org.rdmad1.Manager.Diagnose)
and print its findings: severity (ok, warn, fail, ignored), subject and
finding, with its fix on the line below. Exits 0 when no finding is fail,
1 otherwise; a finding that [doctor] ignore names is listed as ignored and
counts for nothing. With --quiet nothing is printed (a readiness probe):
only the exit status tells. With --scope policy only the findings about
the configuration and the settings it declares are kept: is the policy in
force, whatever the host's hardware and user space say (a rollout gate).
With --lines each finding is one line of tab-separated fields for scripts
(Slurm's and NHC's checks): severity, id, subject, finding, fix; fields
never move (new ones are only added at the end) and hold no tab or
newline. A failing finding exits 1 with its line on standard output;
rdmad not answering exits 1 with nothing there.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if scope != "" && scope != dbusapi.ScopePolicy {
				return usagef(cmd, "--scope %q: the only scope is %q", scope, dbusapi.ScopePolicy)
			}
			if lines && (quiet || e.jsonMode() != "") {
				return usagef(cmd, "--lines is an output of its own: not with --quiet or JSON")
			}
			return e.doctor(quiet, lines, scope)
		},
	}
	c.Flags().BoolVarP(&quiet, "quiet", "q", false, "print nothing; exit 1 if a finding fails, 0 otherwise")
	c.Flags().BoolVar(&lines, "lines", false, "one finding a line, tab-separated fields for scripts: severity, id, subject, finding, fix")
	c.Flags().StringVar(&scope, "scope", "", "policy: only the findings about the configuration and its declared settings")
	return c
}

// doctor renders what rdmad's Diagnose finds. rdmactl reads nothing of the
// host itself: rdmad checks the host it manages (under its --root), with
// the rights to read what an RDMA host's health depends on.
func (e *env) doctor(quiet, lines bool, scope string) error {
	var doc string
	err := e.read(func(c *client.Client, cx context.Context) (err error) {
		doc, err = c.Diagnose(cx)
		return err
	})
	if client.ErrorName(err) == "org.freedesktop.DBus.Error.UnknownMethod" {
		return failf("doctor: this rdmad has no Diagnose method (it is older than rdmactl; upgrade and restart rdmad)")
	}
	if err != nil {
		return err
	}
	findings, err := dbusapi.DecodeFindings(doc)
	if err != nil {
		return &documentError{what: "Diagnose", err: err}
	}
	if scope != "" {
		if findings, err = inScope(findings, scope); err != nil {
			return err
		}
		b, err := json.Marshal(findings)
		if err != nil {
			return err
		}
		doc = string(b)
	}
	switch {
	case quiet:
	case lines:
		printFindingLines(e.stdout, findings)
		if dbusapi.CountFailed(findings) > 0 {
			return silentFailure{}
		}
	case e.jsonMode() != "":
		if err := e.printDoc("Diagnose", []byte(doc)); err != nil {
			return err
		}
	default:
		e.printFindings(e.stdout, escaped(findings))
	}
	if n := dbusapi.CountFailed(findings); n > 0 {
		if quiet {
			return silentFailure{}
		}
		return failf("doctor: %d of %d findings fail", n, len(findings))
	}
	return nil
}

// inScope keeps the findings of scope. An rdmad that tells no scope is
// older than the option: passing on an empty list would pass a gate that
// checked nothing.
func inScope(fs []dbusapi.Finding, scope string) ([]dbusapi.Finding, error) {
	out := []dbusapi.Finding{}
	told := false
	for _, f := range fs {
		told = told || f.Scope != ""
		if f.Scope == scope {
			out = append(out, f)
		}
	}
	if !told && len(fs) > 0 {
		return nil, failf("doctor: this rdmad does not tell the scope of its findings (it is older than rdmactl; upgrade and restart rdmad)")
	}
	return out, nil
}

// printFindings is the doctor table: severity, subject and finding, with
// the fix on a line of its own under the finding (findings and fixes are
// long; four columns side by side would not fit a terminal), then a count
// by severity. An ignored finding says what it was and which entry
// ignores it.
func (e *env) printFindings(w io.Writer, findings []dbusapi.Finding) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if !e.noLegend {
		fmt.Fprintln(tw, "SEVERITY\tSUBJECT\tFINDING")
	}
	count := map[dbusapi.Severity]int{}
	for _, f := range findings {
		count[f.Severity]++
		fmt.Fprintf(tw, "%s\t%s\t%s\n", f.Severity, f.Subject, f.Finding)
		if f.Severity == dbusapi.SeverityIgnored {
			fmt.Fprintf(tw, "\t\t%s, ignored by %s\n", f.IgnoredSeverity, f.IgnoredBy)
		}
		if f.Fix != "" {
			fmt.Fprintf(tw, "\t\tfix: %s\n", f.Fix)
		}
	}
	tw.Flush()
	if !e.noLegend {
		fmt.Fprintf(w, "\n%d ok, %d warn, %d fail", count[dbusapi.SeverityOK], count[dbusapi.SeverityWarn], count[dbusapi.SeverityFail])
		if n := count[dbusapi.SeverityIgnored]; n > 0 {
			fmt.Fprintf(w, ", %d ignored", n)
		}
		fmt.Fprintln(w)
	}
}

// printFindingLines is doctor's line format for scripts: per finding
// "SEVERITY<TAB>ID<TAB>SUBJECT<TAB>FINDING<TAB>FIX", each field escaped
// (no tab, no newline), the subject as the table names it ("mlx5_0/1",
// "link rxe0", "host"). Fields are only ever added at the end.
func printFindingLines(w io.Writer, findings []dbusapi.Finding) {
	for _, f := range escaped(findings) {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", f.Severity, escapeText(f.ID), escapeText(f.Subject.String()), escapeText(f.Finding), escapeText(f.Fix))
	}
}
