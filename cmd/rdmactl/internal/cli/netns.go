package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/rdmad/rdmad/daemon/config/value"
	"github.com/rdmad/rdmad/dbusapi/client"
)

func init() {
	register("", groupCommand("netns", "The RDMA network namespace mode (rdma system netns)", "show"))
	register("netns", netnsShowCommand)
	register("netns", netnsSetCommand)
}

// NetnsJSON is `rdmactl -j netns show`, spelt as `rdma -j system show`.
type NetnsJSON struct {
	Netns string `json:"netns"`
}

func netnsShowCommand(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "show",
		Short: "Show the RDMA netns mode rdmad keeps (shared or exclusive)",
		RunE: func(*cobra.Command, []string) error {
			s, err := e.snapshot()
			if err != nil {
				return err
			}
			v := NetnsJSON{Netns: s.Manager.NetnsMode}
			if e.jsonMode() != "" {
				return e.printJSON(v)
			}
			_, err = fmt.Fprintf(e.stdout, "netns %s\n", dash(escapeText(v.Netns)))
			return err
		},
	}
}

func netnsSetCommand(e *env) *cobra.Command {
	var persist bool
	c := &cobra.Command{
		Use:   "set shared|exclusive [--persist]",
		Short: "Set the RDMA network namespace mode",
		Long: `Set the RDMA network namespace mode, as "rdma system set netns" does. Without
--persist the running kernel is switched and the next boot is not affected;
with it, ib_core also gets the mode at every boot
(/etc/modprobe.d/rdmad-netns.conf). The kernel refuses the switch (EBUSY)
while other network namespaces exist: without --persist the call then fails;
with it, the mode applies at the next boot, and rdmactl says so and exits 1.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if err := exactArgs("shared|exclusive")(cmd, args); err != nil {
				return err
			}
			if err := value.NetnsMode(args[0]); err != nil {
				return usagef(cmd, "%v", err)
			}
			return nil
		},
		ValidArgs: []string{"shared", "exclusive"},
		RunE: func(_ *cobra.Command, args []string) error {
			return e.change(func(c *client.Client, cx context.Context) error {
				return c.SetNetnsMode(cx, args[0], persist)
			})
		},
	}
	c.Flags().BoolVar(&persist, "persist", false, "also set it for every boot (modprobe.d option of ib_core)")
	return c
}
