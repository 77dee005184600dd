package bus

import (
	"fmt"
	"testing"

	"github.com/godbus/dbus/v5"

	"github.com/rdmad/rdmad/dbusapi"
)

// Bounds of rdmad's own part of a GetManagedObjects call, per object: an
// object keeps its model and its property map is made for the call
// (objects.go), in one allocation for the map and none per property. A
// boxed value per property (27 for a port) fails here; the whole round
// trip, godbus's encoding and decoding included, is held in test/perf.
// About 1.3 times what was measured when they were set.
const (
	gmoAllocsPerObject = 8
	gmoBytesPerObject  = 2800
)

func TestGetManagedObjectsAllocationBound(t *testing.T) {
	const devices = 64
	s := &Server{objects: map[dbus.ObjectPath]*object{}}
	s.reclaim.done = true // no timer
	for d := 0; d < devices; d++ {
		name := fmt.Sprintf("mlx5_%d", d)
		dev := dbusapi.Device{Name: name, Transports: []string{"RoCE"}, NodeType: "1: CA", Driver: "mlx5_core", Netdevs: []string{"ens1"}}
		for p := 1; p <= 2; p++ {
			port := dbusapi.Port{Device: name, Number: uint32(p), Transport: "RoCE", State: "ACTIVE", PhysState: "LinkUp",
				Rate: "100 Gb/sec (4X EDR)", LinkLayer: "Ethernet", GIDTypes: []string{"IB/RoCE v1", "RoCE v2"}, Netdevs: []string{"ens1"},
				RoCEMode: "IB/RoCE v1", RoCETOS: 106, DesiredRoCEMode: "IB/RoCE v1", DesiredRoCETOS: 106, DesiredRoCESource: "/etc/rdma/rdmad.toml:3",
				Drift:    map[string]bool{"roce_mode": false, "roce_tos": false},
				Settings: []dbusapi.Setting{{Name: "roce_mode", State: "holds"}, {Name: "roce_tos", State: "holds"}}}
			dev.PortPaths = append(dev.PortPaths, dbusapi.PortPath(name, p))
			s.objects[dbusapi.PortPath(name, p)] = newObject(dbusapi.PortIface, port)
		}
		s.objects[dbusapi.DevicePath(name)] = newObject(dbusapi.DeviceIface, dev)
	}
	objects := len(s.objects)
	allocs := testing.AllocsPerRun(5, func() {
		if out, _ := s.getManagedObjects(); len(out) != objects {
			t.Fatalf("%d objects in the reply, want %d", len(out), objects)
		}
	})
	res := testing.Benchmark(func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			s.getManagedObjects()
		}
	})
	t.Logf("%.0f allocations, %d bytes for %d objects", allocs, res.AllocedBytesPerOp(), objects)
	if allocs > float64(gmoAllocsPerObject*objects) {
		t.Errorf("%.0f allocations for %d objects, bound %d an object", allocs, objects, gmoAllocsPerObject)
	}
	if b := res.AllocedBytesPerOp(); !raceDetector && b > int64(gmoBytesPerObject*objects) {
		t.Errorf("%d bytes for %d objects, bound %d an object", b, objects, gmoBytesPerObject)
	}
}
