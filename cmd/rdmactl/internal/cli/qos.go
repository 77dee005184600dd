package cli

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/godbus/dbus/v5"
	"github.com/spf13/cobra"

	"github.com/rdmad/rdmad/daemon/config/value"
	"github.com/rdmad/rdmad/dbusapi"
	"github.com/rdmad/rdmad/dbusapi/client"
)

func init() {
	register("", groupCommand("qos", "lossless RoCE: PFC, trust, ETS, pause, ECN of the ports' netdevs", "show"))
	register("qos", qosShowCommand)
	register("qos", qosSetCommand)
}

func qosShowCommand(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "show [DEV[/PORT]]",
		Short: "Show the lossless RoCE settings of the ports' netdevs, now and declared",
		Long: `The trust mode and PFC priorities of the netdev under each Ethernet port (of
DEV, or of its port PORT), as the kernel reports them through DCB, and what
[[qos]] rules or runtime changes declare, with where that comes from; then
the rest of its lossless profile, one setting a line (cable length, ETS,
rate limits, buffers, APP entries, DCBX mode, global pause, PFC storm
timeout, ECN and CNP marking): what the netdev holds now, what is declared,
and whether it holds. rdmad reads the netdev of every RoCE port, declared
or not, so this replaces dcb show, ethtool -a and mlnx_qos -i for
inspection; what a netdev does not have is not listed. The values are the
host's at the call: rdmad reads them from the kernel for it, and the footer
(read_usec in JSON) says when.`,
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
	var persist, yes bool
	given := map[string]*string{} // by key, the text of each flag of dbusapi.QoSKeys
	c := &cobra.Command{
		Use:   "set DEV[/PORT] [--trust dscp|pcp] [--pfc P,P...|none] [--pause on|off] [--cable-length M] [--ecn P,P...|none] ... [--persist]",
		Short: "Set the lossless RoCE settings of a port's netdev",
		Long: fmt.Sprintf(`Set the lossless RoCE settings of the netdev under one port, or under every
Ethernet port of DEV, as a [[qos]] rule would (rdmad.toml(5) says what each
does): the trust mode (dscp: the full DSCP table, DSCP to DSCP >> 3; pcp: no
DSCP entries) and the priorities with PFC on (%s, comma-separated; none
turns PFC off) through DCB, and the rest of a lossless profile with the
flags below. Without --persist the change lasts until rdmad stops; with it,
it is written to /etc/rdma/rdmad.d/zz-rdmad-persist.toml and survives
restarts. A netdev without the setting, or whose DCB the firmware or lldpad
manages, refuses it, and what the call had changed is put back.
A change that interrupts traffic, by rdmad's table of what each driver does
(on mlx5 new PFC priorities toggle the port's link, about a second without
traffic; a new trust mode may reset the netdev's queues), is listed and
asked about first when standard input is a terminal (--yes answers yes),
and noted on standard error once rdmad accepted the call.`, value.PriorityRange),
		Example: `  rdmactl qos set mlx5_0/1 --trust dscp --pfc 3 --persist
  rdmactl qos set mlx5_0 --pause off --cable-length 10 --ecn 3 --pfc-storm-timeout 100`,
		Args:              exactArgs("DEV[/PORT]"),
		ValidArgsFunction: e.completeDevices(true),
		RunE: func(cmd *cobra.Command, args []string) error {
			dev, port, err := splitTarget(cmd, args[0])
			if err != nil {
				return err
			}
			trust, pfc := *given["trust"], *given["pfc"]
			hasTrust, hasPFC := cmd.Flags().Changed("trust"), cmd.Flags().Changed("pfc")
			if err := value.Trust(trust); hasTrust && err != nil {
				return usagef(cmd, "--trust: %v", err)
			}
			prios, err := parsePFC(pfc)
			if hasPFC && err != nil {
				return usagef(cmd, "--pfc %q: %v", pfc, err)
			}
			settings := map[string]dbus.Variant{}
			for _, k := range dbusapi.QoSKeys {
				if k.Name == "trust" || k.Name == "pfc" || given[k.Name] == nil || !cmd.Flags().Changed(k.Flag()) {
					continue
				}
				v, err := flagValue(k, *given[k.Name])
				if err != nil {
					return usagef(cmd, "--%s %q: %v", k.Flag(), *given[k.Name], err)
				}
				settings[k.Name] = v
			}
			if !hasTrust && !hasPFC && len(settings) == 0 {
				return usagef(cmd, "nothing to set: give --trust, --pfc or another setting")
			}
			keys := slices.Sorted(maps.Keys(settings))
			if hasTrust {
				keys = append(keys, "trust")
			}
			if hasPFC {
				keys = append(keys, "pfc")
			}
			ints := e.qosInterruptions(dev, port, keys, trust, prios)
			if err := e.confirm("qos set", ints, yes); err != nil {
				return err
			}
			call := func(c *client.Client, cx context.Context) error {
				return c.SetQoS(cx, dev, uint32(port), trust, prios, !hasPFC, persist)
			}
			if len(settings) > 0 {
				if hasTrust {
					settings["trust"] = dbus.MakeVariant(trust)
				}
				if hasPFC {
					settings["pfc"] = dbus.MakeVariant(append([]byte{}, prios...))
				}
				call = func(c *client.Client, cx context.Context) error {
					return c.SetQoSSettings(cx, dev, uint32(port), settings, persist)
				}
			}
			if err := e.change(call); err != nil {
				return err
			}
			e.noteInterruptions(ints)
			return nil
		},
	}
	// A flag for each key the contract's table gives a help: a new key
	// is a flag without a change here.
	for _, k := range dbusapi.QoSKeys {
		if k.Help == "" {
			continue
		}
		given[k.Name] = c.Flags().String(k.Flag(), "", k.HelpText())
		if choices := flagChoices(k); choices != nil {
			_ = c.RegisterFlagCompletionFunc(k.Flag(), fixed(choices...))
		}
	}
	c.Flags().BoolVar(&persist, "persist", false, "also write it to rdmad's drop-in, so it survives restarts")
	c.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask before a change that interrupts traffic")
	return c
}

// flagChoices is what the shell completes for a key's flag: its choices,
// on or off, or a priority set's example and none.
func flagChoices(k dbusapi.QoSKey) []string {
	switch {
	case k.Type == "s":
		return k.Choices
	case k.Type == "b":
		return []string{"on", "off"}
	case k.Type == "ay" && k.Count == 0:
		return []string{"3", "none"}
	}
	return nil
}

// flagValue reads a qos set flag's text as the D-Bus value of its key
// (dbusapi.QoSKeys): the syntax here, each number against its key's range
// (the rule rdmad checks, refused in its words), the rest (sums, rates,
// sizes) by rdmad.
func flagValue(k dbusapi.QoSKey, s string) (dbus.Variant, error) {
	switch k.Type {
	case "s":
		if len(k.Choices) > 0 && !slices.Contains(k.Choices, s) {
			return dbus.Variant{}, fmt.Errorf("want %s", strings.Join(k.Choices, " or "))
		}
		return dbus.MakeVariant(s), nil
	case "b":
		return onOffFlag(s)
	case "u", "y", "q":
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return dbus.Variant{}, fmt.Errorf("want a number %s", k.Values)
		}
		if err := k.Values.Check(n); err != nil {
			return dbus.Variant{}, err
		}
		switch k.Type {
		case "y":
			return dbus.MakeVariant(byte(n)), nil
		case "q":
			return dbus.MakeVariant(uint16(n)), nil
		}
		return dbus.MakeVariant(uint32(n)), nil
	case "ay":
		if k.Count == 0 {
			p, err := parsePFC(s)
			return dbus.MakeVariant(append([]byte{}, p...)), err
		}
		return byteList(s, k.Count, k.Values)
	case "as":
		return stringList(s, k.Count, k.Choices)
	case "a{qy}":
		return portPrio(s, k.Keys, k.Values)
	}
	return dbus.Variant{}, fmt.Errorf("rdmactl cannot read a value of D-Bus type %s", k.Type)
}

func byteList(s string, n int, r value.Range) (dbus.Variant, error) {
	f := strings.Split(s, ",")
	if len(f) != n {
		return dbus.Variant{}, fmt.Errorf("want %d numbers separated by commas", n)
	}
	out := make([]byte, n)
	for i, x := range f {
		v, err := strconv.ParseInt(strings.TrimSpace(x), 10, 64)
		if err != nil {
			return dbus.Variant{}, fmt.Errorf("%q is not a number %s", x, r)
		}
		if err := r.Check(v); err != nil {
			return dbus.Variant{}, err
		}
		out[i] = byte(v)
	}
	return dbus.MakeVariant(out), nil
}

func stringList(s string, n int, choices []string) (dbus.Variant, error) {
	f := strings.Split(s, ",")
	if len(f) != n {
		return dbus.Variant{}, fmt.Errorf("want %d values separated by commas", n)
	}
	for i := range f {
		f[i] = strings.TrimSpace(f[i])
		if len(choices) > 0 && !slices.Contains(choices, f[i]) {
			return dbus.Variant{}, fmt.Errorf("%q is not %s", f[i], strings.Join(choices, " or "))
		}
	}
	return dbus.MakeVariant(f), nil
}

func portPrio(s string, ports, prios value.Range) (dbus.Variant, error) {
	out := map[uint16]byte{}
	for _, e := range strings.Split(s, ",") {
		p, q, ok := strings.Cut(strings.TrimSpace(e), ":")
		port, err1 := strconv.ParseInt(p, 10, 64)
		prio, err2 := strconv.ParseInt(q, 10, 64)
		if !ok || err1 != nil || err2 != nil {
			return dbus.Variant{}, fmt.Errorf("want PORT:PRIO entries separated by commas, such as 4791:3")
		}
		if err := ports.Check(port); err != nil {
			return dbus.Variant{}, fmt.Errorf("port %w", err)
		}
		if err := prios.Check(prio); err != nil {
			return dbus.Variant{}, fmt.Errorf("port %d: priority %w", port, err)
		}
		out[uint16(port)] = byte(prio)
	}
	return dbus.MakeVariant(out), nil
}

func onOffFlag(s string) (dbus.Variant, error) {
	switch s {
	case "on":
		return dbus.MakeVariant(true), nil
	case "off":
		return dbus.MakeVariant(false), nil
	}
	return dbus.Variant{}, fmt.Errorf("want on or off")
}

// qosInterruptions is what a qos set of keys on dev (port, or every
// Ethernet port) would interrupt, by rdmad's table (the Manager's
// Disruptions) and the ports as rdmad publishes them: a key whose driver
// has a row that interrupts traffic, unless the port already holds the
// value given (PFC, trust).
func (e *env) qosInterruptions(dev string, port int, keys []string, trust string, prios []uint8) []interruption {
	var out []interruption
	e.ethernetPorts(dev, port, func(p dbusapi.Port, subject string, rowOf func(string) (dbusapi.Disruption, bool)) {
		known := p.QoSTrust != "" // the DCB of a port rdmad read
		for _, k := range keys {
			row, ok := rowOf("qos." + k)
			if !ok {
				continue
			}
			change := k
			switch {
			case k == "pfc" && known && prioText(p.QoSPFC) == prioText(prios):
				continue
			case k == "pfc" && known:
				change = fmt.Sprintf("PFC %s to %s", prioText(p.QoSPFC), prioText(prios))
			case k == "pfc":
				change = "PFC to " + prioText(prios)
			case k == "trust" && known && p.QoSTrust == trust:
				continue
			case k == "trust" && known:
				change = fmt.Sprintf("trust %s to %s", p.QoSTrust, trust)
			case k == "trust":
				change = "trust to " + trust
			}
			out = append(out, interruption{subject: subject, change: change, effect: row.Effect, driver: row.Driver, when: row.When})
		}
	})
	return out
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
			return nil, fmt.Errorf("want priorities %s separated by commas, or none", value.PriorityRange)
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
	// Settings is every [[qos]] setting rdmad publishes for the port
	// (trust and PFC again among them), declared or as the kernel holds it.
	Settings []dbusapi.Setting `json:"settings"`
	// Read is as in RoCEJSON.
	Read uint64 `json:"read_usec"`
}

func (e *env) qosShow(cmd *cobra.Command, target string) error {
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
	rows := []QoSJSON{}
	for _, d := range s.Devices {
		if dev != "" && d.Name != dev {
			continue
		}
		for _, p := range d.Ports {
			if (port != 0 && int(p.Number) != port) || (p.Transport != "roce" && p.Transport != "iwarp") {
				continue
			}
			settings := []dbusapi.Setting{}
			for _, st := range p.Settings {
				if strings.HasPrefix(st.Name, "qos_") {
					settings = append(settings, st)
				}
			}
			rows = append(rows, QoSJSON{Port: fmt.Sprintf("%s/%d", d.Name, p.Number), Netdevs: nonNil(p.Netdevs),
				Trust: p.QoSTrust, PFC: dbusapi.Priorities(nonNil(p.QoSPFC)), DesiredTrust: p.DesiredQoSTrust, DesiredPFC: dbusapi.Priorities(nonNil(p.DesiredQoSPFC)),
				DesiredPFCSet: p.DesiredQoSPFCSet, Source: p.DesiredQoSSource, Error: settingErrors(p, "qos_"), Settings: settings, Read: at})
		}
	}
	if e.jsonMode() != "" {
		return e.printJSON(rows)
	}
	var table, more [][]string
	for _, r := range escaped(rows) {
		pfc, want := "-", "-"
		if r.Trust != "" {
			pfc = prioText(r.PFC)
		}
		if r.DesiredPFCSet {
			want = prioText(r.DesiredPFC)
		}
		table = append(table, []string{r.Port, dash(strings.Join(r.Netdevs, ",")), dash(r.Trust), pfc, dash(r.DesiredTrust), want, dash(r.Source), dash(r.Error)})
		// The rest of the profile, one setting a line: what the netdev
		// holds, what is declared, and whether it holds.
		for _, st := range r.Settings {
			if st.Name == "qos_pfc" || st.Name == "qos_trust" {
				continue
			}
			more = append(more, []string{r.Port, st.Title, dash(st.Observed), dash(st.Declared), st.State, dash(st.Source), dash(st.Why)})
		}
	}
	legend := plural(len(table), "Ethernet port listed. ", "Ethernet ports listed. ") + e.readAtText(at)
	if len(more) == 0 {
		return e.table([]string{"PORT", "NETDEV", "TRUST", "PFC", "DECLARED_TRUST", "DECLARED_PFC", "SOURCE", "ERROR"}, table, legend, "No Ethernet ports.")
	}
	if err := e.table([]string{"PORT", "NETDEV", "TRUST", "PFC", "DECLARED_TRUST", "DECLARED_PFC", "SOURCE", "ERROR"}, table, "", ""); err != nil {
		return err
	}
	fmt.Fprintln(e.stdout)
	return e.table([]string{"PORT", "SETTING", "NOW", "DECLARED", "STATE", "SOURCE", "WHY"}, more, legend, "")
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
