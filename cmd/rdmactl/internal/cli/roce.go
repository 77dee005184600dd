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
	register("", groupCommand("roce", "RoCE mode and TOS of RDMA-CM", "show"))
	register("roce", roceShowCommand)
	register("roce", roceSetCommand)
}

func roceShowCommand(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "show [DEV[/PORT]]",
		Short: "Show the current and declared RoCE mode and TOS",
		Long: `The current and declared RoCE mode and TOS of the RoCE ports (of DEV, or of
its port PORT), with where the declaration comes from. The current values
are the host's at the call: rdmad reads them from the kernel for it, and the
footer (read_usec in JSON) says when.`,
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
			return e.roceShow(cmd, target)
		},
	}
}

func roceSetCommand(e *env) *cobra.Command {
	var mode string
	var tos int
	var persist bool
	c := &cobra.Command{
		Use:   "set DEV[/PORT] [--mode v1|v2] [--tos N] [--persist]",
		Short: "Set the default RoCE mode and/or TOS of RDMA-CM",
		Long: `Set the default RoCE mode (v1 is "IB/RoCE v1", v2 is "RoCE v2") and/or TOS
(` + value.TOSRange.String() + `) of RDMA-CM on one port, or on every port of DEV. Without --persist
the change lasts until rdmad stops; with it, it is written to
/etc/rdma/rdmad.d/zz-rdmad-persist.toml and survives restarts.`,
		Example:           "  rdmactl roce set mlx5_0/1 --mode v2 --tos 106 --persist",
		Args:              exactArgs("DEV[/PORT]"),
		ValidArgsFunction: e.completeDevices(true),
		RunE: func(cmd *cobra.Command, args []string) error {
			dev, port, err := splitTarget(cmd, args[0])
			if err != nil {
				return err
			}
			hasMode, hasTOS := cmd.Flags().Changed("mode"), cmd.Flags().Changed("tos")
			if err := value.RoCEMode(mode); hasMode && err != nil {
				return usagef(cmd, "--mode: %v", err)
			}
			if err := value.TOS(tos); hasTOS && err != nil {
				return usagef(cmd, "--tos: %v", err)
			}
			if !hasMode && !hasTOS {
				return usagef(cmd, "missing --mode, --tos or both")
			}
			if !hasTOS {
				tos = -1
			}
			return e.change(func(c *client.Client, cx context.Context) error {
				return c.SetRoCE(cx, dev, uint32(port), mode, int32(tos), persist)
			})
		},
	}
	c.Flags().StringVar(&mode, "mode", "", "RoCE mode: v1 (IB/RoCE v1) or v2 (RoCE v2)")
	c.Flags().IntVar(&tos, "tos", -1, "type of service, "+value.TOSRange.String())
	c.Flags().BoolVar(&persist, "persist", false, "also write it to rdmad's drop-in, so it survives restarts")
	_ = c.RegisterFlagCompletionFunc("mode", fixed("v1", "v2"))
	_ = c.RegisterFlagCompletionFunc("tos", fixed("0", "106"))
	return c
}

// RoCEJSON is one line of `rdmactl -o json roce show`.
type RoCEJSON struct {
	Port        string `json:"port"`
	Mode        string `json:"mode"`
	TOS         int32  `json:"tos"`
	DesiredMode string `json:"desired_mode"`
	DesiredTOS  int32  `json:"desired_tos"`
	Source      string `json:"source"`
	Error       string `json:"error"`
	// Read is when rdmad read the port's values from the kernel for this
	// call (microseconds since the epoch); 0 when they are its last read.
	Read uint64 `json:"read_usec"`
}

func (e *env) roceShow(cmd *cobra.Command, target string) error {
	dev, port, err := splitTarget(cmd, target)
	if err != nil {
		return err
	}
	s, at, err := e.liveSnapshot(dev, port)
	if err != nil {
		return err
	}
	if dev != "" && s.Device(dev) == nil {
		return failf("no RDMA device %q: see rdmactl device list", dev)
	}
	rows := []RoCEJSON{}
	for _, d := range s.Devices {
		if dev != "" && d.Name != dev {
			continue
		}
		for _, p := range d.Ports {
			if (port != 0 && int(p.Number) != port) || p.Transport != "roce" {
				continue
			}
			rows = append(rows, RoCEJSON{Port: fmt.Sprintf("%s/%d", d.Name, p.Number), Mode: p.RoCEMode, TOS: p.RoCETOS,
				DesiredMode: p.DesiredRoCEMode, DesiredTOS: p.DesiredRoCETOS, Source: p.DesiredRoCESource, Error: settingErrors(p, "roce_"), Read: at})
		}
	}
	if e.jsonMode() != "" {
		return e.printJSON(rows)
	}
	var table [][]string
	for _, r := range escaped(rows) {
		table = append(table, []string{r.Port, dash(r.Mode), tosString(r.TOS), dash(r.DesiredMode), tosString(r.DesiredTOS), dash(r.Source), dash(r.Error)})
	}
	return e.table([]string{"PORT", "MODE", "TOS", "DECLARED_MODE", "DECLARED_TOS", "SOURCE", "ERROR"}, table,
		plural(len(table), "RoCE port listed. ", "RoCE ports listed. ")+e.readAtText(at), "No RoCE ports.")
}

// settingErrors says why the port's settings named with prefix ("roce_",
// "qos_") do not hold, from the port's setting records: each table shows
// the errors of its own settings, not those of the others (a QoS refusal is
// no RoCE error).
func settingErrors(p dbusapi.Port, prefix string) string {
	var out []string
	for _, s := range p.Settings {
		if !strings.HasPrefix(s.Name, prefix) {
			continue
		}
		switch s.State {
		case dbusapi.SettingHolds, dbusapi.SettingUndeclared, dbusapi.SettingNotApplicable:
			continue
		}
		why := s.Why
		if why == "" {
			why = s.State
		}
		out = append(out, s.Title+": "+why)
	}
	return strings.Join(out, "; ")
}

// splitTarget parses DEV[/PORT]; port 0 means every port.
func splitTarget(cmd *cobra.Command, t string) (string, int, error) {
	dev, ps, has := strings.Cut(t, "/")
	if !has {
		return dev, 0, nil
	}
	n, err := strconv.ParseUint(ps, 10, 32)
	if err != nil || n == 0 || n > dbusapi.MaxPort {
		return "", 0, usagef(cmd, "%q: port must be a number from 1 to %d", t, dbusapi.MaxPort)
	}
	return dev, int(n), nil
}
