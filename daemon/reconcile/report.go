package reconcile

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// WriteReport prints a pass the way `rdmad --once` shows it: one line per
// action that did something or was checked, then a summary line.
func WriteReport(w io.Writer, rep Report) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, a := range rep.Actions {
		detail := ""
		switch a.Status {
		case Changed:
			detail = fmt.Sprintf("%s -> %s", quoteEmpty(a.From), quoteEmpty(a.To))
		case Unchanged, Pending:
			detail = quoteEmpty(a.To)
		case Failed:
			detail = fmt.Sprintf("%s: %v", quoteEmpty(a.To), a.Err)
		case NotApplicable:
			if a.Err != nil {
				detail = a.Err.Error()
			}
		}
		src := ""
		if a.Source != "" {
			src = "(" + a.Source + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", a.Status, a.Subject, a.Kind, detail, src)
	}
	tw.Flush()
	fmt.Fprintf(w, "%d changed, %d unchanged, %d failed, %d not applicable (%s)\n",
		rep.Count(Changed), rep.Count(Unchanged), rep.Count(Failed), rep.Count(NotApplicable),
		rep.Finished.Sub(rep.Started).Round(1000))
}

func quoteEmpty(s string) string {
	if s == "" {
		return `""`
	}
	return fmt.Sprintf("%q", s)
}
