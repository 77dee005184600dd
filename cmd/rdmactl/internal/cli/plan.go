package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/rdmad/rdmad/dbusapi"
	"github.com/rdmad/rdmad/dbusapi/client"
)

func init() { register("", planCommand) }

func planCommand(e *env) *cobra.Command {
	var with, as string
	c := &cobra.Command{
		Use:   "plan [--with FILE [--as NAME]]",
		Short: "Show what the configuration would change, changing nothing",
		Long: `Ask rdmad what its configuration files would change on this host
(org.rdmad1.Manager.Plan), before anything is changed: per subject and
setting, the value now, the value the policy would set and the file:line
that declares it. With --with FILE, FILE counts as the drop-in
/etc/rdma/rdmad.d/NAME (in place of a drop-in of that name); NAME is FILE's
base name unless --as gives it. rdmactl reads FILE as the calling user
(--with /dev/stdin reads standard input; at most 1 MiB) and sends its
bytes: rdmad opens no path you give. Nothing is written, no file is
created.
Exits 0 when the policy loads, whether or not it changes anything, and 1
with every problem at its file:line when it does not.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if as != "" && with == "" {
				return usagef(cmd, "--as goes with --with FILE")
			}
			var data []byte
			if with != "" {
				if as == "" {
					as = filepath.Base(with)
				}
				if err := checkDropInName(as); err != nil {
					return usagef(cmd, "--as %q: %v", as, err)
				}
				var err error
				if data, err = readCandidate(with); err != nil {
					return err
				}
			}
			return e.plan(data, as)
		},
	}
	c.Flags().StringVar(&with, "with", "", "plan the files in force plus `FILE` as a drop-in (/dev/stdin: standard input)")
	c.Flags().StringVar(&as, "as", "", "the drop-in `NAME` FILE stands for (NAME.toml; default: FILE's base name)")
	return c
}

// checkDropInName is rdmad's rule for a drop-in's name, checked before the
// file is read (rdmad checks it again).
func checkDropInName(name string) error {
	switch {
	case strings.ContainsRune(name, '/'):
		return errors.New("a drop-in name has no directory")
	case strings.HasPrefix(name, "."):
		return errors.New("rdmad skips hidden drop-ins")
	case !strings.HasSuffix(name, ".toml") || name == ".toml":
		return errors.New("rdmad reads only rdmad.d/NAME.toml (give --as NAME.toml)")
	}
	return nil
}

// readCandidate reads the drop-in to plan with the caller's rights: a
// regular file, or a pipe or terminal (/dev/stdin), at most
// dbusapi.MaxPlanCandidate bytes.
func readCandidate(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, failf("plan: %v", err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.IsDir() {
		return nil, failf("plan: %s is a directory", name)
	}
	data, err := io.ReadAll(io.LimitReader(f, dbusapi.MaxPlanCandidate+1))
	if err != nil {
		return nil, failf("plan: read %s: %v", name, err)
	}
	if len(data) > dbusapi.MaxPlanCandidate {
		return nil, failf("plan: %s is larger than %d bytes, the most a drop-in may have", name, dbusapi.MaxPlanCandidate)
	}
	return data, nil
}

func (e *env) plan(candidate []byte, as string) error {
	var doc string
	err := e.read(func(c *client.Client, cx context.Context) (err error) {
		doc, err = c.Plan(cx, candidate, as)
		return err
	})
	if client.ErrorName(err) == "org.freedesktop.DBus.Error.UnknownMethod" {
		return failf("plan: this rdmad has no Plan method (it is older than rdmactl; upgrade and restart rdmad)")
	}
	if err != nil {
		return err
	}
	p, err := dbusapi.DecodePlan(doc)
	if err != nil {
		return &documentError{what: "Plan", err: err}
	}
	switch {
	case e.jsonMode() != "":
		if err := e.printDoc("Plan", []byte(doc)); err != nil {
			return err
		}
	case p.Loads:
		e.printPlan(e.stdout, escaped(p))
	default:
		// As rdmad --check-config says it: every problem, file:line first.
		fmt.Fprintln(e.stderr, "rdmactl: plan: the configuration does not load:")
		for _, pr := range escaped(p).Problems {
			fmt.Fprintf(e.stderr, "  %s\n", pr.Text)
		}
	}
	if !p.Loads {
		return silentFailure{}
	}
	return nil
}

// printPlan is the plan table: subject, setting, the value now, the
// planned one and where it is declared, how the change interrupts traffic
// (DISRUPTS: the driver's row in rdmad's table), what would change; then
// the steps beyond settings and the counts.
func (e *env) printPlan(w io.Writer, p dbusapi.Plan) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if !e.noLegend {
		fmt.Fprintln(tw, "SUBJECT\tSETTING\tNOW\tPLANNED\tSOURCE\tDISRUPTS\tCHANGE")
	}
	for _, s := range p.Settings {
		planned, source, change, disrupts := orDash(s.Planned), orDash(s.Source), s.Change, "-"
		if s.Change == dbusapi.PlanRelease {
			planned, source = "(left as is)", "was "+s.InForceSource
			if s.Planned != "" {
				planned = s.Planned + " (found)"
			}
		}
		if s.Why != "" {
			change += ": " + s.Why
		}
		if s.Disrupts {
			disrupts = orDash(s.Disruption)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Subject, s.Name, orDash(s.Now), planned, source, disrupts, change)
	}
	for _, s := range p.Steps {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Subject, s.Kind, orDash(s.Now), orDash(s.Planned), orDash(s.Source), "-", "step")
	}
	tw.Flush()
	if !e.noLegend {
		fmt.Fprintf(w, "\n%s\n%s, %s; files: %s\n", interruptionSummary(p), plural(len(p.Settings), "setting planned", "settings planned"),
			plural(len(p.Steps), "step", "steps"), strings.Join(p.Files, ", "))
	}
}

// interruptionSummary is the plan's count line: "2 settings would change;
// 1 of them interrupts traffic on 1 port (mlx5_0/1)".
func interruptionSummary(p dbusapi.Plan) string {
	changing := p.Changes() - len(p.Steps)
	n, subjects := p.Interruptions()
	head := plural(changing, "setting would change", "settings would change")
	switch {
	case changing == 0:
		return head
	case n == 0:
		return head + "; none of them interrupts traffic"
	}
	verb := "interrupt"
	if n == 1 {
		verb = "interrupts"
	}
	return fmt.Sprintf("%s; %d of them %s traffic on %s (%s)", head, n, verb,
		plural(len(subjects), "port", "ports"), strings.Join(subjects, ", "))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
