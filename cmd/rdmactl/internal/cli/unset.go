package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/rdmad/rdmad/dbusapi"
	"github.com/rdmad/rdmad/dbusapi/client"
)

func init() {
	register("roce", unsetPortCommand("roce", "RoCE mode and TOS"))
	register("qos", unsetPortCommand("qos", "QoS settings"))
	register("link", linkUnsetCommand)
	register("netns", netnsUnsetCommand)
}

// unsetLong is what every unset command's help says about persist.
const unsetLong = `Without --persist the runtime declaration goes (what was set without
--persist), and rdmad's drop-in and the configuration files decide. With
--persist it also goes from rdmad's drop-in,
/etc/rdma/rdmad.d/zz-rdmad-persist.toml, so only the administrator's files
decide. rdmad then applies what the files declare. [api] changes never
refuses it (it is the D-Bus method Withdraw).`

// unsetPortCommand is "rdmactl KIND unset DEV[/PORT]" for the per-port
// kinds (roce, qos).
func unsetPortCommand(kind, what string) func(e *env) *cobra.Command {
	return func(e *env) *cobra.Command {
		var persist, yes bool
		c := &cobra.Command{
			Use:   "unset DEV[/PORT] [--persist]",
			Short: fmt.Sprintf("Withdraw the %s set over D-Bus, so the files decide", what),
			Long: fmt.Sprintf(`Withdraw the %s set with rdmactl %s set (or Cockpit, or D-Bus)
on DEV's port PORT, or on every port without /PORT, so the configuration
files decide again.

%s`, what, kind, unsetLong),
			Example:           fmt.Sprintf("  rdmactl %s unset mlx5_0/1 --persist", kind),
			Args:              exactArgs("DEV[/PORT]"),
			ValidArgsFunction: e.completeDevices(true),
			RunE: func(cmd *cobra.Command, args []string) error {
				dev, port, err := splitTarget(cmd, args[0])
				if err != nil {
					return err
				}
				if dev == "" {
					return usagef(cmd, "%q: missing the device", args[0])
				}
				var ints []interruption
				if kind == "qos" {
					ints = e.withdrawInterruptions(dev, port, persist)
				}
				if err := e.confirm(kind+" unset", ints, yes); err != nil {
					return err
				}
				if err := e.change(func(c *client.Client, cx context.Context) error {
					return c.Withdraw(cx, kind, dev, uint32(port), persist)
				}); err != nil {
					return err
				}
				e.noteInterruptions(ints)
				return nil
			},
		}
		c.Flags().BoolVar(&persist, "persist", false, "also withdraw it from rdmad's drop-in")
		if kind == "qos" {
			c.Long += `

Withdrawing PFC or trust puts back what the files declare, or the value
rdmad found: on a driver where that interrupts traffic (mlx5's link
toggle) rdmactl asks first when standard input is a terminal (--yes
answers yes).`
			c.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask before a change that may interrupt traffic")
		}
		return c
	}
}

// withdrawInterruptions is what withdrawing the QoS set over D-Bus on dev
// (port, or every Ethernet port) may interrupt: PFC or trust declared at
// run time (or, with persist, in rdmad's drop-in) on a driver whose
// change of it interrupts traffic. What the files declare or rdmad found
// is not published, so it may be the same value: the question says "may".
func (e *env) withdrawInterruptions(dev string, port int, persist bool) []interruption {
	var out []interruption
	e.ethernetPorts(dev, port, func(p dbusapi.Port, subject string, rowOf func(string) (dbusapi.Disruption, bool)) {
		src := p.DesiredQoSSource
		if !strings.Contains(src, "runtime") && !(persist && strings.Contains(src, persistedDropIn)) {
			return
		}
		for _, key := range []string{"pfc", "trust"} {
			declared := p.DesiredQoSPFCSet
			if key == "trust" {
				declared = p.DesiredQoSTrust != ""
			}
			if row, ok := rowOf("qos." + key); ok && declared {
				out = append(out, interruption{subject: subject, change: key + " withdrawn (the files' or the value found may differ)",
					effect: row.Effect, driver: row.Driver, when: row.When})
			}
		}
	})
	return out
}

// persistedDropIn is rdmad's own drop-in, where --persist writes.
const persistedDropIn = "zz-rdmad-persist.toml"

func linkUnsetCommand(e *env) *cobra.Command {
	var persist bool
	c := &cobra.Command{
		Use:   "unset NAME [--persist]",
		Short: "Withdraw a link added or deleted over D-Bus, so the files decide",
		Long: `Withdraw what rdmactl link add or link del (or Cockpit, or D-Bus) declared
about the soft link NAME, so the configuration files decide again: a link
added goes from the declarations, a declared link that was deleted is
declared again.

` + unsetLong,
		Example:           "  rdmactl link unset rxe0 --persist",
		Args:              exactArgs("NAME"),
		ValidArgsFunction: e.completeLinks,
		RunE: func(_ *cobra.Command, args []string) error {
			return e.change(func(c *client.Client, cx context.Context) error {
				return c.Withdraw(cx, "link", args[0], 0, persist)
			})
		},
	}
	c.Flags().BoolVar(&persist, "persist", false, "also withdraw it from rdmad's drop-in")
	return c
}

func netnsUnsetCommand(e *env) *cobra.Command {
	var persist bool
	c := &cobra.Command{
		Use:   "unset [--persist]",
		Short: "Withdraw the netns mode set over D-Bus, so the files decide",
		Long: `Withdraw the RDMA netns mode set with rdmactl netns set (or Cockpit, or
D-Bus), so the configuration files decide again.

` + unsetLong,
		Example: "  rdmactl netns unset --persist",
		Args:    noArgs,
		RunE: func(*cobra.Command, []string) error {
			return e.change(func(c *client.Client, cx context.Context) error {
				return c.Withdraw(cx, "netns", "", 0, persist)
			})
		},
	}
	c.Flags().BoolVar(&persist, "persist", false, "also withdraw it from rdmad's drop-in")
	return c
}
