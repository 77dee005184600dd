package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/rdmad/rdmad/dbusapi/client"
)

func init() {
	register("", reloadCommand)
	register("", reconcileCommand)
}

// ReloadJSON is `rdmactl -j reload`.
type ReloadJSON struct {
	Summary string `json:"summary"`
}

// reload exits 1 when the configuration loads but the pass that applies it
// fails: the operator asked for the files to take effect, and they did not.
func reloadCommand(e *env) *cobra.Command {
	var yes bool
	c := &cobra.Command{
		Use:   "reload",
		Short: "Re-read the configuration and apply it",
		Long: `Re-read the configuration files and apply them. On an error the last good
configuration stays in force and the error (file:line) is printed. Exits 1
both when the files do not load and when applying them fails.` + askLong,
		RunE: func(*cobra.Command, []string) error {
			ints := e.planInterruptions(yes)
			if err := e.confirm("reload", ints, yes); err != nil {
				return err
			}
			var summary string
			if err := e.change(func(c *client.Client, cx context.Context) (err error) {
				summary, err = c.Reload(cx)
				return err
			}); err != nil {
				return err
			}
			e.noteInterruptions(ints)
			if e.jsonMode() != "" {
				if err := e.printJSON(ReloadJSON{Summary: summary}); err != nil {
					return err
				}
			} else {
				fmt.Fprintf(e.stdout, "reloaded: %s\n", escapeText(summary))
			}
			if summary != "ok" {
				return failf("reload: the configuration loaded, but applying it failed: %s", summary)
			}
			return nil
		},
	}
	c.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask before a change that interrupts traffic")
	return c
}

// askLong is what reload and reconcile say about their question.
const askLong = `
On a terminal rdmactl first asks rdmad's plan of the files as they are
(rdmactl plan): when applying them would interrupt traffic (a new PFC
mask on mlx5 toggles the link), it lists those changes and asks before
the call (--yes answers yes), and notes them once rdmad accepted it.`

// reconcile runs a full pass and exits 1 when something failed.
func reconcileCommand(e *env) *cobra.Command {
	var yes bool
	c := &cobra.Command{
		Use:   "reconcile",
		Short: "Apply the configuration again now, over every device",
		Long: `Apply the configuration again now, over every device (the D-Bus method
Reconcile), and print how many settings changed and failed. Exits 1 when a
setting failed.` + askLong,
		RunE: func(*cobra.Command, []string) error {
			ints := e.planInterruptions(yes)
			if err := e.confirm("reconcile", ints, yes); err != nil {
				return err
			}
			var r client.ReconcileResult
			if err := e.change(func(c *client.Client, cx context.Context) (err error) {
				r, err = c.Reconcile(cx)
				return err
			}); err != nil {
				return err
			}
			e.noteInterruptions(ints)
			if e.jsonMode() != "" {
				if err := e.printJSON(r); err != nil {
					return err
				}
			} else {
				fmt.Fprintf(e.stdout, "reconciled: %d changed, %d failed: %s\n", r.Changed, r.Failed, escapeText(r.Summary))
			}
			if r.Failed > 0 {
				return failf("reconcile: %s", r.Summary)
			}
			return nil
		},
	}
	c.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask before a change that interrupts traffic")
	return c
}
