package cli

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/rdmad/rdmad/dbusapi"
	"github.com/rdmad/rdmad/dbusapi/client"
)

func init() { register("", doctorCommand) }

func doctorCommand(e *env) *cobra.Command {
	var quiet bool
	c := &cobra.Command{
		Use:   "doctor [--quiet]",
		Short: "Check that RDMA is usable on the host",
		Long: `Ask rdmad whether RDMA is usable on this host (org.rdmad1.Manager.Diagnose)
and print its findings: severity (ok, warn, fail), subject and finding, with
its fix on the line below. Exits 0 when no finding is fail, 1 otherwise.
With --quiet nothing is printed (a readiness probe): only the exit status
tells.`,
		RunE: func(*cobra.Command, []string) error { return e.doctor(quiet) },
	}
	c.Flags().BoolVarP(&quiet, "quiet", "q", false, "print nothing; exit 1 if a finding fails, 0 otherwise")
	return c
}

// doctor renders what rdmad's Diagnose finds. rdmactl reads nothing of the
// host itself: rdmad checks the host it manages (under its --root), with
// the rights to read what an RDMA host's health depends on.
func (e *env) doctor(quiet bool) error {
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
	switch {
	case quiet:
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

// printFindings is the doctor table: severity, subject and finding, with
// the fix on a line of its own under the finding (findings and fixes are
// long; four columns side by side would not fit a terminal), then a count
// by severity.
func (e *env) printFindings(w io.Writer, findings []dbusapi.Finding) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if !e.noLegend {
		fmt.Fprintln(tw, "SEVERITY\tSUBJECT\tFINDING")
	}
	count := map[dbusapi.Severity]int{}
	for _, f := range findings {
		count[f.Severity]++
		fmt.Fprintf(tw, "%s\t%s\t%s\n", f.Severity, f.Subject, f.Finding)
		if f.Fix != "" {
			fmt.Fprintf(tw, "\t\tfix: %s\n", f.Fix)
		}
	}
	tw.Flush()
	if !e.noLegend {
		fmt.Fprintf(w, "\n%d ok, %d warn, %d fail\n", count[dbusapi.SeverityOK], count[dbusapi.SeverityWarn], count[dbusapi.SeverityFail])
	}
}
