package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/rdmad/rdmad/dbusapi/client"
)

// completionTimeout bounds a query to rdmad made while completing: a
// completion that hangs the shell is worse than none.
const completionTimeout = 2 * time.Second

// completeDevices offers the device names rdmad publishes (withPorts:
// also DEV/PORT).
func (e *env) completeDevices(withPorts bool) func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
	return func(_ *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		s, err := e.quickSnapshot()
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var out []string
		for _, d := range s.Devices {
			out = append(out, escapeText(d.Name))
			if withPorts {
				for _, p := range d.Ports {
					out = append(out, fmt.Sprintf("%s/%d", escapeText(d.Name), p.Number))
				}
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// completeLinks offers the declared links.
func (e *env) completeLinks(_ *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	s, err := e.quickSnapshot()
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []string
	for _, l := range s.Manager.Links {
		out = append(out, escapeText(l.Name))
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

func (e *env) quickSnapshot() (*client.Snapshot, error) {
	c, err := e.client()
	if err != nil {
		return nil, err
	}
	defer c.Close()
	cx, cancel := context.WithTimeout(context.Background(), completionTimeout)
	defer cancel()
	c.Interactive = false
	return c.Snapshot(cx)
}
