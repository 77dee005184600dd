package perf

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"os"
	"testing"

	"github.com/godbus/dbus/v5"

	"github.com/rdmad/rdmad/daemon/compose"
	"github.com/rdmad/rdmad/daemon/dcb/dcbtest"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/daemon/reconcile"
	"github.com/rdmad/rdmad/daemon/service"
	"github.com/rdmad/rdmad/test/bustest"
)

var sizes = []int{1, 64, 1024}

func newService(b testing.TB, h *Host, oneShot bool) *service.Service {
	b.Helper()
	svc, err := service.New(service.Options{Host: host.New(h.Root), Parts: compose.Parts(compose.Kernel{Modules: NoModprobe{}}),
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), OneShot: oneShot})
	if err != nil {
		b.Fatal(err)
	}
	return svc
}

// hosts are generated once per size for the whole run (generating 1,024
// devices takes seconds) and removed by TestMain.
var hosts = map[int]*Host{}

func TestMain(m *testing.M) {
	if spec := os.Getenv(plannerEnv); spec != "" {
		os.Exit(runPlanner(spec))
	}
	code := m.Run()
	for _, h := range hosts {
		h.Remove()
	}
	os.Exit(code)
}

func forSizes(b *testing.B, fn func(b *testing.B, h *Host)) {
	for _, n := range sizes {
		b.Run(fmt.Sprintf("N=%d", n), func(b *testing.B) {
			h := hosts[n]
			if h == nil {
				var err error
				if h, err = NewHost(n); err != nil {
					b.Fatal(err)
				}
				hosts[n] = h
			}
			if err := h.Reset(); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			fn(b, h)
		})
	}
}

// BenchmarkOnceCold is the pass of `rdmad --once` with every port to change.
func BenchmarkOnceCold(b *testing.B) {
	forSizes(b, func(b *testing.B, h *Host) {
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			if err := h.Reset(); err != nil {
				b.Fatal(err)
			}
			svc := newService(b, h, true)
			b.StartTimer()
			if rep := svc.ReconcileNow(context.Background()); rep.Failed() {
				b.Fatal(rep.Failures())
			}
		}
	})
}

// BenchmarkOnceNoChange is the pass of `rdmad --once` with nothing to do.
func BenchmarkOnceNoChange(b *testing.B) {
	forSizes(b, func(b *testing.B, h *Host) {
		svc := newService(b, h, true)
		svc.ReconcileNow(context.Background())
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			svc.ReconcileNow(context.Background())
		}
	})
}

// BenchmarkFloor reads the files a no-change pass needs with bare syscalls.
func BenchmarkFloor(b *testing.B) {
	forSizes(b, func(b *testing.B, h *Host) {
		for i := 0; i < b.N; i++ {
			if err := h.Floor(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkFloorCold is the bare system calls of a cold pass, the floor
// BenchmarkOnceCold is held to.
func BenchmarkFloorCold(b *testing.B) {
	forSizes(b, func(b *testing.B, h *Host) {
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			if err := h.Reset(); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			if err := h.FloorCold(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkDaemonFull is the daemon's full pass (everything it publishes).
func BenchmarkDaemonFull(b *testing.B) {
	forSizes(b, func(b *testing.B, h *Host) {
		svc := newService(b, h, false)
		svc.ReconcileNow(context.Background())
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			svc.ReconcileNow(context.Background())
		}
	})
}

// BenchmarkDeviceEvent is one device's uevent in the daemon: flat in N.
func BenchmarkDeviceEvent(b *testing.B) {
	forSizes(b, func(b *testing.B, h *Host) {
		svc := newService(b, h, false)
		svc.ReconcileNow(context.Background())
		rec := svc.Reconciler()
		scope := reconcile.Scope{Devices: map[string][]int{fmt.Sprintf("mlx5_%d", h.N/2): nil}}
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			rec.Pass(context.Background(), svc.PolicyInForce(), scope)
		}
	})
}

func startDaemon(b *testing.B, h *Host) *Daemon {
	b.Helper()
	addr := bustest.Start(b)
	d, err := StartDaemon(h, addr)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(d.Stop)
	return d
}

// BenchmarkGetManagedObjects is one client round trip of every object.
func BenchmarkGetManagedObjects(b *testing.B) {
	forSizes(b, func(b *testing.B, h *Host) {
		d := startDaemon(b, h)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			n, err := d.GetManagedObjects()
			if err != nil || n != 3*h.N {
				b.Fatalf("%d objects, %v", n, err)
			}
		}
	})
}

// BenchmarkReadPorts is one ReadPorts round trip of every port (rdmactl
// roce show and qos show): rdmad reads each port's configfs RoCE mode and
// TOS and each netdev's DCB state (a fake DCB kernel behind the real
// codec, as mlx5 answers) and sends them as Port properties.
func BenchmarkReadPorts(b *testing.B) {
	forSizes(b, func(b *testing.B, h *Host) {
		k := dcbtest.New()
		for i := 0; i < h.N; i++ {
			dcbtest.MLX5(k.Add(hosttest.SynthNetdev(i)))
		}
		addr := bustest.Start(b)
		d, err := StartDaemonKernel(h, addr, compose.Kernel{Modules: NoModprobe{}, DCB: k.Kernel()})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(d.Stop)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if n, err := d.ReadPorts(); err != nil || n != 2*h.N {
				b.Fatalf("%d ports read, %v", n, err)
			}
		}
	})
}

// managedObjectsReply is rdmad's GetManagedObjects reply on h as a godbus
// message, as godbus builds it to send: the stages of the round trip below
// are godbus's own work on it, which rdmad does not control.
func managedObjectsReply(b *testing.B, h *Host) *dbus.Message {
	b.Helper()
	objs, err := startDaemon(b, h).ManagedObjects()
	if err != nil {
		b.Fatal(err)
	}
	msg := &dbus.Message{Type: dbus.TypeMethodReply, Headers: map[dbus.HeaderField]dbus.Variant{
		dbus.FieldReplySerial: dbus.MakeVariant(uint32(1)),
		dbus.FieldSignature:   dbus.MakeVariant(dbus.SignatureOf(objs)),
	}, Body: []any{objs}}
	return msg
}

// BenchmarkManagedObjectsEncode is one encoding of the GetManagedObjects
// reply by godbus. Sending it costs two: godbus's unix transport encodes
// the body once to count the file descriptors in it (Message.CountFds),
// then again to write it.
func BenchmarkManagedObjectsEncode(b *testing.B) {
	forSizes(b, func(b *testing.B, h *Host) {
		msg := managedObjectsReply(b, h)
		var buf bytes.Buffer
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			buf.Reset()
			if err := msg.EncodeTo(&buf, binary.LittleEndian); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(buf.Len()), "bytes/reply")
	})
}

// BenchmarkManagedObjectsDecode is a godbus client's decoding of the reply
// into the usual map of Variants (DecodeMessage, then Store).
func BenchmarkManagedObjectsDecode(b *testing.B) {
	forSizes(b, func(b *testing.B, h *Host) {
		var buf bytes.Buffer
		if err := managedObjectsReply(b, h).EncodeTo(&buf, binary.LittleEndian); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			m, err := dbus.DecodeMessage(bytes.NewReader(buf.Bytes()))
			if err != nil {
				b.Fatal(err)
			}
			var objs map[dbus.ObjectPath]map[string]map[string]dbus.Variant
			if err := dbus.Store(m.Body, &objs); err != nil || len(objs) != 3*h.N {
				b.Fatalf("%d objects, %v", len(objs), err)
			}
		}
	})
}

// BenchmarkGodbusFloor is godbus's own work on the reply (GodbusFloor):
// what BenchmarkGetManagedObjects is held to.
func BenchmarkGodbusFloor(b *testing.B) {
	forSizes(b, func(b *testing.B, h *Host) {
		objs, err := startDaemon(b, h).ManagedObjects()
		if err != nil {
			b.Fatal(err)
		}
		floor := GodbusFloor(objs)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if err := floor(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkSetRoCEPort is one SetRoCE round trip on one port.
func BenchmarkSetRoCEPort(b *testing.B) {
	forSizes(b, func(b *testing.B, h *Host) {
		d := startDaemon(b, h)
		dev := fmt.Sprintf("mlx5_%d", h.N/2)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if err := d.SetRoCE(dev, 1, int32(i%200)); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkVerifyReadBack is the [drift] verify_interval pass on a host
// that holds the policy: every declared setting read again, nothing
// written. BenchmarkFloorVerify is the bare reads it needs.
func BenchmarkVerifyReadBack(b *testing.B) {
	forSizes(b, func(b *testing.B, h *Host) {
		svc := newService(b, h, false)
		svc.ReconcileNow(context.Background())
		all := map[string]bool{}
		for i := 0; i < h.N; i++ {
			all[fmt.Sprintf("mlx5_%d", i)] = true
		}
		rec, pol := svc.Reconciler(), svc.PolicyInForce()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			rep := rec.Pass(context.Background(), pol, reconcile.Scope{Recheck: all, Verify: true})
			for _, a := range rep.Actions {
				if a.Status != reconcile.Unchanged {
					b.Fatalf("the verify read-back of a host that holds the policy did %s", a)
				}
			}
		}
	})
}

func BenchmarkFloorVerify(b *testing.B) {
	forSizes(b, func(b *testing.B, h *Host) {
		for i := 0; i < b.N; i++ {
			if err := h.FloorVerify(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
