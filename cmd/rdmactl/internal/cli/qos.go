package cli

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/rdmad/rdmad/daemon/config/value"
	"github.com/rdmad/rdmad/dbusapi"
	"github.com/rdmad/rdmad/dbusapi/client"
)

func init() {
	register("", groupCommand("qos", "lossless RoCE: PFC and DSCP trust of the ports' netdevs", "show"))
	register("qos", qosShowCommand)
	register("qos", qosSetCommand)
}

func qosShowCommand(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "show [DEV[/PORT]]",
		Short: "Show the current and declared trust and PFC priorities",
		Long: `The trust mode and PFC priorities of the netdev under each Ethernet port (of
DEV, or of its port PORT), as the kernel reports them through DCB, and what
[[qos]] rules or runtime changes declare, with where that comes from. The
current values are known for ports a [[qos]] rule selects ("-" otherwise).`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usagef(cmd, "unexpected argument %q", args[1])
			}
			return nil
		},
		ValidArgsFunction: e.completeDevices(true),
		RunE: func(cmd *cobra.Command, args []string) error {
			target := ""
			if len(args) == 1 {
				target = args[0]
			}
			return e.qosShow(cmd, target)
		},
	}
}

func qosSetCommand(e *env) *cobra.Command {
	var trust, pfc string
	var persist bool
	c := &cobra.Command{
		Use:   "set DEV[/PORT] [--trust dscp|pcp] [--pfc P,P...|none] [--persist]",
		Short: "Set the trust mode and/or PFC priorities",
		Long: `Set the trust mode (dscp: the full DSCP table, DSCP to DSCP >> 3; pcp: no DSCP
entries) and/or the priorities with PFC on (0..7, comma-separated; none turns
PFC off) of the netdev under one port, or under every Ethernet port of DEV,
through DCB, as a [[qos]] rule would. Without --persist the change lasts
until rdmad stops; with it, it is written to
/etc/rdma/rdmad.d/zz-rdmad-persist.toml and survives restarts. A netdev
without DCB, or whose DCB the firmware or lldpad manages, refuses it.`,
		Example:           "  rdmactl qos set mlx5_0/1 --trust dscp --pfc 3 --persist",
		Args:              exactArgs("DEV[/PORT]"),
		ValidArgsFunction: e.completeDevices(true),
		RunE: func(cmd *cobra.Command, args []string) error {
			dev, port, err := splitTarget(cmd, args[0])
			if err != nil {
				return err
			}
			hasTrust, hasPFC := cmd.Flags().Changed("trust"), cmd.Flags().Changed("pfc")
			if err := value.Trust(trust); hasTrust && err != nil {
				return usagef(cmd, "--trust: %v", err)
			}
			prios, err := parsePFC(pfc)
			if hasPFC && err != nil {
				return usagef(cmd, "--pfc %q: %v", pfc, err)
			}
			if !hasTrust && !hasPFC {
				return usagef(cmd, "missing --trust, --pfc or both")
			}
			return e.change(func(c *client.Client, cx context.Context) error {
				return c.SetQoS(cx, dev, uint32(port), trust, prios, !hasPFC, persist)
			})
		},
	}
	c.Flags().StringVar(&trust, "trust", "", "trust mode: dscp or pcp")
	c.Flags().StringVar(&pfc, "pfc", "", "priorities with PFC on, such as 3 or 3,4; none turns PFC off")
	c.Flags().BoolVar(&persist, "persist", false, "also write it to rdmad's drop-in, so it survives restarts")
	_ = c.RegisterFlagCompletionFunc("trust", fixed("dscp", "pcp"))
	_ = c.RegisterFlagCompletionFunc("pfc", fixed("3", "none"))
	return c
}

// parsePFC reads "3,4" (distinct priorities 0..7) or "none" (PFC off).
func parsePFC(s string) ([]uint8, error) {
	if s == "none" {
		return []uint8{}, nil
	}
	var ps []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("want priorities 0..%d separated by commas, or none", value.MaxPriority)
		}
		ps = append(ps, n)
	}
	if err := value.Priorities(ps); err != nil {
		return nil, err
	}
	out := make([]uint8, len(ps))
	for i, n := range ps {
		out[i] = uint8(n)
	}
	return out, nil
}

// QoSJSON is one line of `rdmactl -o json qos show`.
type QoSJSON struct {
	Port          string             `json:"port"`
	Netdevs       []string           `json:"netdevs"`
	Trust         string             `json:"trust"`
	PFC           dbusapi.Priorities `json:"pfc"`
	DesiredTrust  string             `json:"desired_trust"`
	DesiredPFC    dbusapi.Priorities `json:"desired_pfc"`
	DesiredPFCSet bool               `json:"desired_pfc_set"`
	Source        string             `json:"source"`
	Error         string             `json:"error"`
}

func (e *env) qosShow(cmd *cobra.Command, target string) error {
	dev, port, err := splitTarget(cmd, target)
	if err != nil {
		return err
	}
	s, err := e.snapshot()
	if err != nil {
		return err
	}
	if dev != "" && s.Device(dev) == nil {
		return failf("no RDMA device %q: see rdmactl device list", dev)
	}
	rows := []QoSJSON{}
	for _, d := range s.Devices {
		if dev != "" && d.Name != dev {
			continue
		}
		for _, p := range d.Ports {
			if (port != 0 && int(p.Number) != port) || (p.Transport != "roce" && p.Transport != "iwarp") {
				continue
			}
			rows = append(rows, QoSJSON{Port: fmt.Sprintf("%s/%d", d.Name, p.Number), Netdevs: nonNil(p.Netdevs),
				Trust: p.QoSTrust, PFC: dbusapi.Priorities(nonNil(p.QoSPFC)), DesiredTrust: p.DesiredQoSTrust, DesiredPFC: dbusapi.Priorities(nonNil(p.DesiredQoSPFC)),
				DesiredPFCSet: p.DesiredQoSPFCSet, Source: p.DesiredQoSSource, Error: settingErrors(p, "qos_")})
		}
	}
	if e.jsonMode() != "" {
		return e.printJSON(rows)
	}
	var table [][]string
	for _, r := range escaped(rows) {
		pfc, want := "-", "-"
		if r.Trust != "" {
			pfc = prioText(r.PFC)
		}
		if r.DesiredPFCSet {
			want = prioText(r.DesiredPFC)
		}
		table = append(table, []string{r.Port, dash(strings.Join(r.Netdevs, ",")), dash(r.Trust), pfc, dash(r.DesiredTrust), want, dash(r.Source), dash(r.Error)})
	}
	return e.table([]string{"PORT", "NETDEV", "TRUST", "PFC", "DECLARED_TRUST", "DECLARED_PFC", "SOURCE", "ERROR"}, table,
		plural(len(table), "Ethernet port listed.", "Ethernet ports listed."), "No Ethernet ports.")
}

// prioText is "3,4", or "none" when no priority has PFC on.
func prioText(p []byte) string {
	if len(p) == 0 {
		return "none"
	}
	s := make([]string, len(p))
	for i, v := range p {
		s[i] = strconv.Itoa(int(v))
	}
	return strings.Join(s, ",")
}
