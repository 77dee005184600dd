package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/rdmad/rdmad/dbusapi"
	"github.com/rdmad/rdmad/dbusapi/client"
)

var errDoctorFailed = errors.New("RDMA is not usable as it should be")

// doctor renders what rdmad's Diagnose finds. rdmactl reads nothing of the
// host itself: rdmad checks the host it manages (under its --root), with
// the rights to read what an RDMA host's health depends on.
func (e *env) doctor() error {
	var doc string
	err := e.call(func(c *client.Client, cx context.Context) (err error) {
		doc, err = c.Diagnose(cx)
		return err
	})
	if client.ErrorName(err) == "org.freedesktop.DBus.Error.UnknownMethod" {
		return fmt.Errorf("doctor: this rdmad has no Diagnose method (it is older than rdmactl; upgrade and restart rdmad)")
	}
	if err != nil {
		return err
	}
	findings, err := dbusapi.DecodeFindings(doc)
	if err != nil {
		return fmt.Errorf("doctor: %w", err)
	}
	if e.json {
		if !strings.HasSuffix(doc, "\n") {
			doc += "\n"
		}
		if _, err := io.WriteString(e.stdout, doc); err != nil {
			return err
		}
	} else {
		printFindings(e.stdout, findings)
	}
	if n := dbusapi.CountFailed(findings); n > 0 {
		return fmt.Errorf("doctor: %d of %d findings fail: %w", n, len(findings), errDoctorFailed)
	}
	return nil
}

// printFindings is the doctor table: severity, subject and finding, with
// the fix on a line of its own under the finding (findings and fixes are
// long; four columns side by side would not fit a terminal), then a count
// by severity.
func printFindings(w io.Writer, findings []dbusapi.Finding) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SEVERITY\tSUBJECT\tFINDING")
	count := map[dbusapi.Severity]int{}
	for _, f := range findings {
		count[f.Severity]++
		fmt.Fprintf(tw, "%s\t%s\t%s\n", f.Severity, f.Subject, f.Finding)
		if f.Fix != "" {
			fmt.Fprintf(tw, "\t\tfix: %s\n", f.Fix)
		}
	}
	tw.Flush()
	fmt.Fprintf(w, "\n%d ok, %d warn, %d fail\n", count[dbusapi.SeverityOK], count[dbusapi.SeverityWarn], count[dbusapi.SeverityFail])
}
