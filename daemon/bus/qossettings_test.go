package bus_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/godbus/dbus/v5"

	"github.com/rdmad/rdmad/daemon/compose"
	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/dcb/dcbtest"
	"github.com/rdmad/rdmad/daemon/ethtool/ethtooltest"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/daemon/netns/netnstest"
	"github.com/rdmad/rdmad/dbusapi"
	"github.com/rdmad/rdmad/dbusapi/client"
	"github.com/rdmad/rdmad/test/bustest"
	"github.com/rdmad/rdmad/test/testdeps"
)

// losslessDaemon serves the mlx5 fixture on a private bus, with mlx5-like
// DCB and ethtool kernels under both netdevs: the bus address, the
// fixture's root and the kernels.
func losslessDaemon(t *testing.T) (addr, root string, k *dcbtest.Fake, e *ethtooltest.Fake) {
	t.Helper()
	dir := bustest.PublicDir(t)
	addr = privateBus(t, dir)
	root = fixture(t, dir, "mlx5", "[modules]\nenable = false\n")
	k, e = dcbtest.New(), ethtooltest.New()
	for _, n := range []string{"ens1f0np0", "ens1f1np1"} {
		dcbtest.MLX5(k.Add(n))
		ethtooltest.MLX5(e.Add(n))
	}
	conn, err := dbusapi.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	startDaemonKernel(t, conn, host.New(root), compose.Kernel{Modules: &hosttest.Modprobe{Root: root}, Netns: netnstest.New(config.NetnsShared),
		DCB: k.Kernel(), Ethtool: e.Kernel()})
	return addr, root, k, e
}

// SetQoSSettings over a real dbus-daemon: settings of several D-Bus types
// reach the kernels, the port's Settings publish them, a bad value is
// InvalidArgs naming the key with nothing touched, and busctl (another
// implementation of the wire format) makes the same call.
func TestSetQoSSettingsOverTheBus(t *testing.T) {
	addr, root, k, e := losslessDaemon(t)
	c, err := client.Connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	err = c.SetQoSSettings(t.Context(), "mlx5_0", 1, map[string]dbus.Variant{
		"pfc":           dbus.MakeVariant([]byte{3}),
		"cable_length":  dbus.MakeVariant(uint32(10)),
		"prio_tc":       dbus.MakeVariant([]byte{0, 0, 0, 1, 0, 0, 0, 0}),
		"tc_maxrate":    dbus.MakeVariant([]string{"0", "25Gbit", "0", "0", "0", "0", "0", "0"}),
		"pause":         dbus.MakeVariant(false),
		"udp_port_prio": dbus.MakeVariant(map[uint16]byte{4791: 3}),
	}, true)
	// mlx5 takes no datagram-port entry: not applicable fails the call,
	// and everything it set is put back.
	var de dbus.Error
	if !errors.As(err, &de) || de.Name != dbusapi.ErrFailed || !strings.Contains(err.Error(), "DSCP APP entries only") {
		t.Fatalf("udp_port_prio on mlx5: %v", err)
	}
	if n, _ := k.Netdev("ens1f0np0"); n.PFC.Enabled != 0 || n.PFC.Delay != 7 {
		t.Errorf("not put back: %+v", n.PFC)
	}
	if _, err := os.Stat(filepath.Join(root, config.DropInDir, config.PersistedName)); err == nil {
		t.Error("the refused call left a drop-in")
	}
	err = c.SetQoSSettings(t.Context(), "mlx5_0", 1, map[string]dbus.Variant{
		"pfc":          dbus.MakeVariant([]byte{3}),
		"cable_length": dbus.MakeVariant(uint32(10)),
		"prio_tc":      dbus.MakeVariant([]byte{0, 0, 0, 1, 0, 0, 0, 0}),
		"tc_maxrate":   dbus.MakeVariant([]string{"0", "25Gbit", "0", "0", "0", "0", "0", "0"}),
		"pause":        dbus.MakeVariant(false),
	}, true)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := k.Netdev("ens1f0np0")
	if n.PFC.Enabled != 0x08 || n.PFC.Delay != 10 || n.ETS.PrioTC[3] != 1 || n.Maxrate.Rate[1] != 25_000_000 {
		t.Errorf("DCB %+v %+v %+v", n.PFC, n.ETS, n.Maxrate)
	}
	if p, _ := e.Netdev("ens1f0np0"); !p.Pause.Off() {
		t.Errorf("pause %+v", p.Pause)
	}
	drop, err := os.ReadFile(filepath.Join(root, config.DropInDir, config.PersistedName))
	if err != nil || !strings.Contains(string(drop), "cable_length = 10\nprio_tc = [0, 0, 0, 1, 0, 0, 0, 0]\ntc_maxrate = [\"0\", \"25Gbit\"") {
		t.Errorf("drop-in: %s %v", drop, err)
	}
	var settings []dbusapi.Setting
	if err := c.Conn().Object(dbusapi.BusName, dbusapi.PortPath("mlx5_0", 1)).StoreProperty(dbusapi.PortIface+".Settings", &settings); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, s := range settings {
		if s.Name == "qos_cable_length" {
			found = s.State == dbusapi.SettingHolds && s.Declared == "10 m" && s.Observed == "10 m" && strings.Contains(s.Source, config.PersistedName)
		}
	}
	if !found {
		t.Errorf("Settings: %+v", settings)
	}

	// Bad values are InvalidArgs naming the key; nothing is written.
	writes := len(k.Writes())
	for _, bad := range []map[string]dbus.Variant{
		{"cable_length": dbus.MakeVariant(uint32(1000))},
		{"pfc_storm_timeout": dbus.MakeVariant(int32(50))},
		{"pause": dbus.MakeVariant(1.5)},
		{"device": dbus.MakeVariant("mlx5_1")},
		{},
	} {
		err := c.SetQoSSettings(t.Context(), "mlx5_0", 1, bad, false)
		if !errors.As(err, &de) || de.Name != dbusapi.ErrInvalidArgs {
			t.Errorf("%v: %v, want InvalidArgs", bad, err)
		}
	}
	if err := c.SetQoSSettings(t.Context(), "mlx5_0", 1, map[string]dbus.Variant{"cable_length": dbus.MakeVariant(uint32(1000))}, false); err == nil ||
		!strings.Contains(err.Error(), "cable_length: 1000 is out of range 1..999") {
		t.Errorf("message: %v", err)
	}
	if len(k.Writes()) != writes {
		t.Errorf("a refused argument wrote %q", k.Writes()[writes:])
	}

	testdeps.Tool(t, "busctl", "systemd")
	out, err := exec.Command("busctl", "--address="+addr, "call", dbusapi.BusName, "/org/rdmad1", dbusapi.ManagerIface, "SetQoSSettings",
		"sua{sv}b", "mlx5_1", "1", "2", "cable_length", "q", "20", "pause", "b", "false", "false").CombinedOutput()
	if err != nil {
		t.Fatalf("busctl call: %v\n%s", err, out)
	}
	if n, _ := k.Netdev("ens1f1np1"); n.PFC.Delay != 20 {
		t.Errorf("busctl's call: delay %d", n.PFC.Delay)
	}
}
