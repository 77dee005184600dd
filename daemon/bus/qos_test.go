package bus_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/godbus/dbus/v5"

	"github.com/rdmad/rdmad/daemon/compose"
	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/dcb/dcbtest"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/daemon/netns/netnstest"
	"github.com/rdmad/rdmad/dbusapi"
	"github.com/rdmad/rdmad/dbusapi/client"
	"github.com/rdmad/rdmad/test/bustest"
)

// SetQoS over a real dbus-daemon: the fake DCB kernel gets PFC and the
// DSCP table, the Port's QoSTrust and QoSPFC follow with
// PropertiesChanged, persist writes rdmad's drop-in, and a refusal
// (a netdev without DCB) is org.rdmad1.Error.Failed with nothing left.
func TestSetQoSOverTheBus(t *testing.T) {
	dir := bustest.PublicDir(t)
	addr := privateBus(t, dir)
	root := fixture(t, dir, "mlx5", "[modules]\nenable = false\n")
	k := dcbtest.New()
	k.Add("ens1f0np0")
	k.AddNoDCB("ens1f1np1")
	conn, err := dbusapi.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	startDaemonKernel(t, conn, host.New(root), compose.Kernel{Modules: &hosttest.Modprobe{Root: root}, Netns: netnstest.New(config.NetnsShared), DCB: k.Kernel()})

	watch := dialT(t, addr)
	port := dbusapi.PortPath("mlx5_0", 1)
	if err := watch.AddMatchSignal(dbus.WithMatchObjectPath(port), dbus.WithMatchInterface("org.freedesktop.DBus.Properties")); err != nil {
		t.Fatal(err)
	}
	sigs := make(chan *dbus.Signal, 16)
	watch.Signal(sigs)
	c, err := client.Connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.SetQoS(t.Context(), "mlx5_0", 1, "dscp", []uint8{3}, false, true); err != nil {
		t.Fatal(err)
	}
	if n, _ := k.Netdev("ens1f0np0"); n.PFC.Enabled != 0x08 || len(n.Apps) != 64 {
		t.Errorf("kernel: PFC %#x, %d APP entries", n.PFC.Enabled, len(n.Apps))
	}
	changed := waitSignal(t, sigs, "org.freedesktop.DBus.Properties.PropertiesChanged").Body[1].(map[string]dbus.Variant)
	if v, ok := changed["QoSPFC"].Value().([]byte); !ok || string(v) != "\x03" {
		t.Errorf("QoSPFC in signal = %v (changed: %v)", changed["QoSPFC"], changed)
	}
	if v := changed["QoSTrust"]; v.Value() != "dscp" {
		t.Errorf("QoSTrust in signal = %v", v)
	}
	if v := changed["DesiredQoSSource"]; !strings.Contains(v.Value().(string), config.PersistedName) {
		t.Errorf("DesiredQoSSource = %v", v)
	}
	drop, err := os.ReadFile(filepath.Join(root, config.DropInDir, config.PersistedName))
	if err != nil || !strings.Contains(string(drop), "[[qos]]\ndevice = \"mlx5_0\"\nport = 1\ntrust = \"dscp\"\npfc = [3]\n") {
		t.Errorf("drop-in: %s %v", drop, err)
	}
	// Keep PFC, change trust only.
	if err := c.SetQoS(t.Context(), "mlx5_0", 1, "pcp", nil, true, false); err != nil {
		t.Fatal(err)
	}
	if n, _ := k.Netdev("ens1f0np0"); n.PFC.Enabled != 0x08 || len(n.Apps) != 0 {
		t.Errorf("after trust pcp: PFC %#x, %d APP entries", n.PFC.Enabled, len(n.Apps))
	}
	doc, err := c.Describe(t.Context())
	if err != nil || !strings.Contains(doc, `"qos": [`) || !strings.Contains(doc, `"trust": "pcp"`) || !strings.Contains(doc, `"pfc_set": false`) {
		t.Errorf("Describe's runtime overlay lacks the runtime QoS: %v\n%s", err, doc)
	}
	err = c.SetQoS(t.Context(), "mlx5_1", 1, "", []uint8{3}, false, false)
	var de dbus.Error
	if !errors.As(err, &de) || de.Name != dbusapi.ErrFailed || !strings.Contains(err.Error(), "ens1f1np1 does not support DCB") {
		t.Errorf("no DCB: %v", err)
	}
	err = c.SetQoS(t.Context(), "mlx5_0", 1, "ip", nil, true, false)
	if !errors.As(err, &de) || de.Name != dbusapi.ErrInvalidArgs {
		t.Errorf("trust ip: %v", err)
	}
}
