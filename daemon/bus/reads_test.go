package bus_test

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"

	"github.com/godbus/dbus/v5"

	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/dbusapi"
	"github.com/rdmad/rdmad/test/bustest"
)

// hostileNetdev is a netdev name with a backslash, a control byte and a
// byte that is not UTF-8.
const hostileNetdev = "e\\t\x01h\xfe"

// hostileReadEnv is rdmad on the mlx5 host with hostile names in every
// string source the read methods publish: a drop-in named 50-a\b.toml
// (ConfigFiles, DesiredRoCESource, Diagnose), a device renamed to bytes
// with backslashes, control bytes and no UTF-8 (object paths, Name,
// errors), netdev names of the same kind in the ports' GID tables
// (Netdevs), and a rule whose selector holds a backslash (Diagnose's
// rule-unmatched finding).
func hostileReadEnv(t *testing.T) (addr string) {
	t.Helper()
	dir := bustest.PublicDir(t)
	addr = privateBus(t, dir)
	root := fixture(t, dir, "mlx5", mlx5Config+"\n[[roce]]\ndevice = 'no\\\\such*'\ntos = 3\n")
	const dev = "vf\\x\\\x02\xff\n"
	hosttest.RenameDevice(t, root, "mlx5_1", dev)
	for _, attr := range []string{"default_roce_mode=RoCE v2", "default_roce_tos=0"} {
		k, v, _ := strings.Cut(attr, "=")
		hosttest.Write(t, root, host.ConfigfsPortPath(dev, 1, k), v+"\n")
	}
	for _, d := range []string{"mlx5_0", dev} {
		ndev := filepath.Join(root, host.ClassInfiniband, d, "ports/1/gid_attrs/ndevs/0")
		if err := os.WriteFile(ndev, []byte(hostileNetdev+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dropIn := filepath.Join(root, "etc/rdma/rdmad.d", `50-a\b.toml`)
	if err := os.MkdirAll(filepath.Dir(dropIn), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dropIn, []byte("[[roce]]\ndevice = \"mlx5_*\"\ntos = 12\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	startDaemon(t, addr, root)
	return addr
}

// readAll calls every read method once: Describe, Diagnose,
// GetManagedObjects, and Get and GetAll of every property of every object,
// and returns each reply as text (maps printed in key order).
func readAll(t *testing.T, conn *dbus.Conn) map[string]string {
	t.Helper()
	out := map[string]string{}
	root := conn.Object(dbusapi.BusName, dbusapi.RootPath)
	for _, m := range []string{"Describe", "Diagnose"} {
		var doc string
		if err := root.Call(dbusapi.ManagerIface+"."+m, 0).Store(&doc); err != nil {
			t.Fatalf("%s: %v", m, err)
		}
		out[m] = doc
	}
	var objs map[dbus.ObjectPath]map[string]map[string]dbus.Variant
	if err := root.Call("org.freedesktop.DBus.ObjectManager.GetManagedObjects", 0).Store(&objs); err != nil {
		t.Fatal(err)
	}
	out["GetManagedObjects"] = fmt.Sprint(objs)
	paths := []dbus.ObjectPath{dbusapi.RootPath}
	for p := range objs {
		paths = append(paths, p)
	}
	sort.Slice(paths, func(i, j int) bool { return paths[i] < paths[j] })
	for _, p := range paths {
		iface := dbusapi.ManagerIface
		for i := range objs[p] {
			iface = i
		}
		obj := conn.Object(dbusapi.BusName, p)
		var all map[string]dbus.Variant
		if err := obj.Call("org.freedesktop.DBus.Properties.GetAll", 0, iface).Store(&all); err != nil {
			t.Fatalf("GetAll %s: %v", p, err)
		}
		out["GetAll "+string(p)] = fmt.Sprint(all)
		for name := range all {
			var v dbus.Variant
			if err := obj.Call("org.freedesktop.DBus.Properties.Get", 0, iface, name).Store(&v); err != nil {
				t.Fatalf("Get %s %s: %v", p, name, err)
			}
			out["Get "+string(p)+" "+name] = v.String()
		}
	}
	return out
}

func heapAfterGC() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// No published value shares memory with state it must not change: with hostile names in every string source, 20 rounds of every read
// method give byte-identical replies, and the heap after GC does not grow.
// Describe once escaped the policy's file names in place, doubling each
// backslash of 50-a\b.toml on every call until the OOM killer stopped
// rdmad.
func TestReadsRepeatIdenticallyWithHostileNames(t *testing.T) {
	addr := hostileReadEnv(t)
	conn := dialT(t, addr)
	first := readAll(t, conn)
	// Each hostile source reaches the replies (escaped, at each reply's
	// own level of quoting).
	for _, want := range []string{"50-a", "b.toml", "vf_5cx_5c_02_ff_0a", "x01h", "such*"} {
		found := false
		for _, reply := range first {
			if strings.Contains(reply, want) {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("setup: no reply carries %s", want)
		}
	}
	heap := heapAfterGC()
	for round := 2; round <= 20; round++ {
		got := readAll(t, conn)
		if len(got) != len(first) {
			t.Fatalf("round %d: %d replies, first round %d", round, len(got), len(first))
		}
		for call, reply := range got {
			if reply != first[call] {
				t.Fatalf("round %d: %s changed (%d bytes, first round %d):\n%.300s\nwas\n%.300s", round, call, len(reply), len(first[call]), reply, first[call])
			}
		}
	}
	// Everything of the 19 rounds is garbage by now; what stays is the
	// noise of the runtime and the bus connections.
	if grown := int64(heapAfterGC()) - int64(heap); grown > 1<<20 {
		t.Errorf("the heap grew by %d bytes over 19 rounds of reads", grown)
	}
}
