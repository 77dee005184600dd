package cli

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/rdmad/rdmad/dbusapi"
	"github.com/rdmad/rdmad/dbusapi/client"
)

func init() {
	register("", groupCommand("device", "RDMA devices and their ports", "list"))
	register("device", deviceListCommand)
	register("device", deviceShowCommand)
}

func deviceListCommand(e *env) *cobra.Command {
	return &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List RDMA devices",
		Long:    "One line per RDMA device: transport, driver, node GUID, ports, netdevs.",
		RunE:    func(*cobra.Command, []string) error { return e.deviceList() },
	}
}

func deviceShowCommand(e *env) *cobra.Command {
	return &cobra.Command{
		Use:               "show DEV",
		Short:             "Show one device and its ports",
		Long:              "Everything rdmad knows about one RDMA device and its ports.",
		Args:              exactArgs("DEV"),
		ValidArgsFunction: e.completeDevices(false),
		RunE:              func(_ *cobra.Command, args []string) error { return e.deviceShow(args[0]) },
	}
}

func (e *env) snapshot() (*client.Snapshot, error) {
	var s *client.Snapshot
	err := e.read(func(c *client.Client, cx context.Context) (err error) {
		s, err = c.Snapshot(cx)
		return err
	})
	return s, err
}

// liveSnapshot is the snapshot with the ports of dev (every device's for
// "") or its port (0: every port) as rdmad reads them from the kernel for
// this call (Manager.ReadPorts), and when it read them (in microseconds;
// 0 when they are rdmad's last read: rdmad was busy with other reads, or
// is older than rdmactl, which rdmactl says on stderr). rdmactl reads no
// kernel itself: it runs against --root fixtures and from pods.
func (e *env) liveSnapshot(dev string, port int) (*client.Snapshot, uint64, error) {
	var s *client.Snapshot
	var at uint64
	err := e.read(func(c *client.Client, cx context.Context) (err error) {
		if s, err = c.Snapshot(cx); err != nil {
			return err
		}
		if d := s.Device(dev); dev != "" && (d == nil || port != 0 && !hasPort(d, port)) {
			return nil // nothing to read: the command says so
		}
		t, ports, err := c.ReadPorts(cx, dev, uint32(port))
		switch name := client.ErrorName(err); {
		case err == nil:
			s.Update(ports)
			at = uint64(t.UnixMicro())
		case name == dbusapi.ErrBusy, name == "org.freedesktop.DBus.Error.UnknownMethod":
			fmt.Fprintf(e.stderr, "rdmactl: showing rdmad's last read, not the host now (%s)\n", escapeText(describeError(err)))
		default:
			return err
		}
		return nil
	})
	return s, at, err
}

func hasPort(d *dbusapi.Device, n int) bool {
	for _, p := range d.Ports {
		if int(p.Number) == n {
			return true
		}
	}
	return false
}

// readAtText is the legend's sentence saying when the values were read.
func (e *env) readAtText(at uint64) string {
	if at == 0 {
		return "Values as rdmad last read them."
	}
	return "Values read from the host at " + e.timestamp(at) + "."
}

// portTable prints one line per port, like `rdma link show`.
func (e *env) portTable(devs []dbusapi.Device) {
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	for _, d := range devs {
		for _, p := range d.Ports {
			line := fmt.Sprintf("%s/%d\tstate %s\tphysical_state %s\tnetdev %s", d.Name, p.Number, dash(p.State), dash(p.PhysState), dash(strings.Join(p.Netdevs, ",")))
			if p.Transport == "roce" {
				line += fmt.Sprintf("\troce_mode %q\ttos %s", p.RoCEMode, tosString(p.RoCETOS))
				if p.QoSTrust != "" {
					line += fmt.Sprintf("\ttrust %s\tpfc %s", p.QoSTrust, prioText(p.QoSPFC))
				}
			} else {
				line += fmt.Sprintf("\tlink_layer %s\tsm_lid %s", dash(p.LinkLayer), dash(p.SMLID))
			}
			fmt.Fprintln(tw, line)
		}
	}
	tw.Flush()
}

func tosString(v int32) string {
	if v < 0 {
		return "-"
	}
	return strconv.Itoa(int(v))
}

func (e *env) deviceList() error {
	s, err := e.snapshot()
	if err != nil {
		return err
	}
	if e.jsonMode() != "" {
		return e.printJSON(nonNil(s.Devices))
	}
	devs := escaped(s.Devices)
	var rows [][]string
	for _, d := range devs {
		rows = append(rows, []string{d.Name, dash(strings.Join(d.Transports, ",")), dash(d.Driver), dash(d.NodeGUID),
			strconv.Itoa(len(d.Ports)), dash(strings.Join(d.Netdevs, ","))})
	}
	return e.table([]string{"DEVICE", "TRANSPORT", "DRIVER", "NODE_GUID", "PORTS", "NETDEV"}, rows,
		plural(len(rows), "device listed.", "devices listed."), "No RDMA devices.")
}

func (e *env) deviceShow(name string) error {
	s, err := e.snapshot()
	if err != nil {
		return err
	}
	d := s.Device(name)
	if d == nil {
		return failf("no RDMA device %q: see rdmactl device list", name)
	}
	if e.jsonMode() != "" {
		return e.printJSON(d)
	}
	*d = escaped(*d)
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	kv := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, dash(v)) }
	kv("name", d.Name)
	kv("transport", strings.Join(d.Transports, ","))
	kv("node_type", d.NodeType)
	kv("node_guid", d.NodeGUID)
	kv("sys_image_guid", d.SysImageGUID)
	kv("fw_ver", d.FirmwareVersion)
	kv("hca_type", d.HCAType)
	kv("board_id", d.BoardID)
	kv("driver", d.Driver)
	kv("pci_address", d.PCIAddress)
	kv("parent", d.Parent)
	kv("netdevs", strings.Join(d.Netdevs, ","))
	kv("error", d.Error)
	tw.Flush()
	for _, p := range d.Ports {
		fmt.Fprintf(e.stdout, "\nport %d\n", p.Number)
		tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		kv := func(k, v string) { fmt.Fprintf(tw, "  %s\t%s\n", k, dash(v)) }
		kv("transport", p.Transport)
		kv("state", p.State)
		kv("physical_state", p.PhysState)
		kv("rate", p.Rate)
		kv("link_layer", p.LinkLayer)
		kv("lid", p.LID)
		kv("sm_lid", p.SMLID)
		kv("gid_types", strings.Join(p.GIDTypes, ","))
		kv("netdevs", strings.Join(p.Netdevs, ","))
		kv("roce_mode", p.RoCEMode)
		kv("roce_tos", tosString(p.RoCETOS))
		kv("desired_roce_mode", p.DesiredRoCEMode)
		kv("desired_roce_tos", tosString(p.DesiredRoCETOS))
		kv("desired_roce_source", p.DesiredRoCESource)
		if p.QoSTrust != "" {
			kv("qos_trust", p.QoSTrust)
			kv("qos_pfc", prioText(p.QoSPFC))
		}
		if p.DesiredQoSTrust != "" || p.DesiredQoSPFCSet {
			kv("desired_qos_trust", p.DesiredQoSTrust)
			if p.DesiredQoSPFCSet {
				kv("desired_qos_pfc", prioText(p.DesiredQoSPFC))
			}
			kv("desired_qos_source", p.DesiredQoSSource)
		}
		kv("vpi_type", p.VPIType)
		kv("error", p.Error)
		tw.Flush()
		if len(p.Settings) > 0 {
			fmt.Fprintln(e.stdout, "  settings")
			tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
			for _, st := range p.Settings {
				fmt.Fprintf(tw, "    %s\t%s\t%s\n", st.Title, dash(st.Observed), settingNote(st))
			}
			tw.Flush()
		}
	}
	return nil
}

// settingNote is what device show says of one setting next to its value:
// whether it is declared and where, and whether it holds.
func settingNote(st dbusapi.Setting) string {
	switch st.State {
	case dbusapi.SettingUndeclared:
		return "not declared"
	case dbusapi.SettingHolds:
		return "as declared (" + st.Source + ")"
	}
	note := st.State + ": declared " + st.Declared + " (" + st.Source + ")"
	if st.Why != "" {
		note += ": " + st.Why
	}
	return note
}
