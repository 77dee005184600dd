package cli

import (
	"context"
	"net"

	"github.com/spf13/cobra"

	"github.com/rdmad/rdmad/daemon/config/value"
	"github.com/rdmad/rdmad/dbusapi/client"
)

func init() {
	register("", groupCommand("link", "Soft RDMA links (Soft-RoCE rxe, Soft-iWARP siw) rdmad keeps", "list"))
	register("link", linkListCommand)
	register("link", linkAddCommand)
	register("link", linkDelCommand)
}

func linkListCommand(e *env) *cobra.Command {
	return &cobra.Command{
		Use:     "list",
		Aliases: []string{"show", "ls"},
		Short:   "List declared soft RDMA links and whether they exist",
		RunE:    func(*cobra.Command, []string) error { return e.linkList() },
	}
}

func linkAddCommand(e *env) *cobra.Command {
	var typ, netdev string
	var persist bool
	c := &cobra.Command{
		Use:   "add NAME type rxe|siw netdev IF [--persist]",
		Short: "Declare a Soft-RoCE or Soft-iWARP device on a network interface",
		Long: `Declare a soft RDMA device NAME of type rxe (Soft-RoCE) or siw (Soft-iWARP)
on the network interface IF; rdmad creates it, and creates it again whenever
IF exists. The arguments are spelt as rdma(8) spells them
("rdma link add rxe0 type rxe netdev eth1"), or as flags (--type, --netdev).`,
		Example: `  rdmactl link add rxe0 type rxe netdev eth1 --persist
  rdmactl link add rxe0 --type rxe --netdev eth1`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usagef(cmd, "missing NAME")
			}
			return nil
		},
		ValidArgsFunction: completeLinkAdd,
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			for rest := args[1:]; len(rest) > 0; rest = rest[2:] {
				var dst *string
				switch rest[0] {
				case "type":
					dst = &typ
				case "netdev", "dev":
					dst = &netdev
				default:
					return usagef(cmd, "unexpected argument %q: want type rxe|siw netdev IF", rest[0])
				}
				if len(rest) < 2 {
					return usagef(cmd, "%s needs a value", rest[0])
				}
				if *dst != "" && *dst != rest[1] {
					return usagef(cmd, "%s given twice (%q and %q)", rest[0], *dst, rest[1])
				}
				*dst = rest[1]
			}
			if typ == "" {
				return usagef(cmd, "missing type rxe|siw")
			}
			if err := value.LinkType(typ); err != nil {
				return usagef(cmd, "type: %v", err)
			}
			if netdev == "" {
				return usagef(cmd, "missing netdev IF")
			}
			return e.change(func(c *client.Client, cx context.Context) error {
				return c.AddLink(cx, name, typ, netdev, persist)
			})
		},
	}
	c.Flags().StringVar(&typ, "type", "", "rxe (Soft-RoCE) or siw (Soft-iWARP)")
	c.Flags().StringVar(&netdev, "netdev", "", "the network `IF` it runs on")
	c.Flags().BoolVar(&persist, "persist", false, "also write it to rdmad's drop-in, so it survives restarts")
	_ = c.RegisterFlagCompletionFunc("type", fixed("rxe", "siw"))
	_ = c.RegisterFlagCompletionFunc("netdev", completeNetdevs)
	return c
}

func linkDelCommand(e *env) *cobra.Command {
	var persist bool
	c := &cobra.Command{
		Use:               "del NAME [--persist]",
		Aliases:           []string{"delete"},
		Short:             "Stop declaring a soft RDMA link and delete it",
		Args:              exactArgs("NAME"),
		ValidArgsFunction: e.completeLinks,
		RunE: func(_ *cobra.Command, args []string) error {
			return e.change(func(c *client.Client, cx context.Context) error {
				return c.DeleteLink(cx, args[0], persist)
			})
		},
	}
	c.Flags().BoolVar(&persist, "persist", false, "also remove it from the configuration rdmad owns")
	return c
}

func (e *env) linkList() error {
	s, err := e.snapshot()
	if err != nil {
		return err
	}
	if e.jsonMode() != "" {
		return e.printJSON(nonNil(s.Manager.Links))
	}
	var rows [][]string
	for _, l := range s.Manager.Links {
		state := "absent"
		if d := s.Device(l.Name); d != nil {
			state = "present"
			for _, p := range d.Ports {
				state = p.State
			}
		}
		l = escaped(l)
		rows = append(rows, []string{l.Name, l.Type, l.Netdev, escapeText(state), dash(l.Source)})
	}
	return e.table([]string{"LINK", "TYPE", "NETDEV", "STATE", "SOURCE"}, rows,
		plural(len(rows), "link listed.", "links listed."), "No declared links.")
}

// completeLinkAdd completes the iproute2 words after NAME.
func completeLinkAdd(_ *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
	if len(args) == 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	switch args[len(args)-1] {
	case "type":
		return []string{"rxe", "siw"}, cobra.ShellCompDirectiveNoFileComp
	case "netdev", "dev":
		return completeNetdevs(nil, nil, "")
	}
	if len(args)%2 == 1 {
		return []string{"type", "netdev"}, cobra.ShellCompDirectiveNoFileComp
	}
	return nil, cobra.ShellCompDirectiveNoFileComp
}

// completeNetdevs offers this host's network interfaces.
func completeNetdevs(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
	ifs, _ := net.Interfaces()
	var names []string
	for _, i := range ifs {
		if i.Flags&net.FlagLoopback == 0 {
			names = append(names, i.Name)
		}
	}
	return names, cobra.ShellCompDirectiveNoFileComp
}
