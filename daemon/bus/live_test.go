package bus_test

import (
	"testing"
	"time"

	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/dbusapi"
	"github.com/rdmad/rdmad/dbusapi/client"
)

// ReadPorts gives the ports' settings as the kernel holds them at the call:
// a TOS another process wrote with no event rdmad saw is there, with the
// time of the read, while the published property keeps rdmad's last read;
// a declared one that no longer holds says it changed since. Unknown names
// are NoSuchDevice and NoSuchPort, a port without a device InvalidArgs.
func TestReadPortsReadsTheKernelNow(t *testing.T) {
	e := newNewsEnv(t, tosConfig)
	hosttest.Write(t, e.root, host.ConfigfsPortPath("mlx5_1", 1, "default_roce_tos"), "3\n")
	hosttest.Write(t, e.root, host.ConfigfsPortPath("mlx5_0", 1, "default_roce_tos"), "7\n")
	c, err := client.Connect(e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	before := time.Now()
	at, ports, err := c.ReadPorts(t.Context(), "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if at.Before(before.Add(-time.Second)) || at.After(time.Now()) {
		t.Errorf("read at %s, the call ran from %s", at, before)
	}
	got := map[string]dbusapi.Port{}
	for _, p := range ports {
		got[p.Device] = p
	}
	if len(ports) != 2 || got["mlx5_1"].RoCETOS != 3 || got["mlx5_0"].RoCETOS != 7 {
		t.Fatalf("ReadPorts gave %d ports: %+v", len(ports), got)
	}
	if s := setting(got["mlx5_0"], "roce_tos"); s.State != "differs" || s.Why == "" {
		t.Errorf("mlx5_0/1's declared TOS read live: %+v", s)
	}
	var published int32
	if err := e.conn.Object(dbusapi.BusName, dbusapi.PortPath("mlx5_1", 1)).Call("org.freedesktop.DBus.Properties.Get", 0, dbusapi.PortIface, "RoCETOS").Store(&published); err != nil || published == 3 {
		t.Errorf("the published RoCETOS of mlx5_1/1 is %d (%v): a live read changed it", published, err)
	}
	if _, ports, err := c.ReadPorts(t.Context(), "mlx5_1", 1); err != nil || len(ports) != 1 || ports[0].Device != "mlx5_1" || ports[0].Number != 1 {
		t.Errorf("ReadPorts(mlx5_1, 1): %+v, %v", ports, err)
	}
	for _, tc := range []struct {
		device string
		port   uint32
		want   string
	}{
		{"mlx9_0", 0, dbusapi.ErrNoSuchDevice},
		{"mlx5_0", 9, dbusapi.ErrNoSuchPort},
		{"", 1, dbusapi.ErrInvalidArgs},
		{"mlx5_0", 1 << 20, dbusapi.ErrInvalidArgs},
	} {
		if _, _, err := c.ReadPorts(t.Context(), tc.device, tc.port); client.ErrorName(err) != tc.want {
			t.Errorf("ReadPorts(%q, %d): %v, want %s", tc.device, tc.port, err, tc.want)
		}
	}
}

func setting(p dbusapi.Port, name string) dbusapi.Setting {
	for _, s := range p.Settings {
		if s.Name == name {
			return s
		}
	}
	return dbusapi.Setting{}
}
