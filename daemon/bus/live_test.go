package bus_test

import (
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdmad/rdmad/daemon/bus"
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

// A live read whose kernel read does not answer ends its call at the
// deadline with Busy, and keeps its slot until the read returns: a user
// whose reads all hang is Busy at once for another, while root reads, and
// reads again once they return.
func TestReadPortsStuckReadEndsAtItsDeadline(t *testing.T) {
	addr, k, d := startOnKernel(t, "mlx5", planConfig)
	const deadline = 300 * time.Millisecond
	d.srv.SetLiveTimeoutForTest(deadline)
	stuck := host.ConfigfsPortPath("mlx5_0", 1, "default_roce_tos")
	entered, release := make(chan struct{}, bus.LiveSlotsPerUID), make(chan struct{})
	var reads atomic.Int32
	k.BeforeRead(func(rel string) {
		if rel == stuck && reads.Add(1) <= bus.LiveSlotsPerUID {
			entered <- struct{}{}
			<-release // the user's reads; later ones go on
		}
	})
	var released sync.Once
	defer released.Do(func() { close(release) })
	read := callerSpec{Addr: addr, Method: "ReadPorts", Args: argsOf(argS("mlx5_0"), argU(1))}
	for i := range bus.LiveSlotsPerUID {
		start := time.Now()
		wait := startCaller(t, nobody, read)
		select {
		case <-entered:
		case <-time.After(20 * time.Second):
			t.Fatalf("read %d never read the TOS", i+1)
		}
		res := wait()
		if len(res) != 1 || res[0].Name != dbusapi.ErrBusy {
			t.Fatalf("read %d past its deadline: %+v, want %s", i+1, res, dbusapi.ErrBusy)
		}
		for _, want := range []string{"ReadPorts", deadline.String()} {
			if !strings.Contains(res[0].Message, want) {
				t.Errorf("the error %q does not say %q", res[0].Message, want)
			}
		}
		if took := time.Since(start); took > 10*time.Second {
			t.Errorf("read %d answered after %s", i+1, took)
		}
	}
	other := argsOf(argS("mlx5_1"), argU(1))
	if res := callAs(t, addr, nobody, false, "ReadPorts", other...); res.Name != dbusapi.ErrBusy || !strings.Contains(res.Message, "the most a user has at once") {
		t.Errorf("a read while the user's reads hang: %+v, want Busy", res)
	}
	c, err := client.Connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, _, err := c.ReadPorts(t.Context(), "mlx5_1", 1); err != nil {
		t.Errorf("root's read while the user's reads hang: %v", err)
	}
	released.Do(func() { close(release) })
	waitFor(t, "the user's slots once its reads returned", func() bool {
		return callAs(t, addr, nobody, false, "ReadPorts", other...).Name == ""
	})
}

// A ReadPorts reply counts a port's corrections in Corrected as the
// published property does: a setting rdmad put back is there, with how
// many times.
func TestReadPortsCountsCorrections(t *testing.T) {
	e := newNewsEnv(t, tosConfig)
	e.tamper(t, "0")
	c, err := client.Connect(e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, ports, err := c.ReadPorts(t.Context(), "mlx5_0", 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(ports) != 1 || len(ports[0].Corrected) != 1 || ports[0].Corrected["roce_tos"] != 1 {
		t.Errorf("ReadPorts after a correction of mlx5_0/1's TOS: %+v, want Corrected roce_tos 1", ports)
	}
}
