package reconcile_test

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/daemon/reconcile"
	"github.com/rdmad/rdmad/daemon/roce"
)

// A device that goes while rdmad runs is a warning naming its PCI
// address, and the state keeps what it was (doctor names it when an
// [[expect]] rule misses it) until a device of the same identity is back;
// a rename is neither.
func TestDepartedDeviceIsLoggedAndKept(t *testing.T) {
	root := hosttest.Copy(t, "demo")
	var logs bytes.Buffer
	h := host.New(root)
	r := reconcile.New(reconcile.Options{Host: h, Log: slog.New(slog.NewTextHandler(&logs, nil)),
		DeviceParts: []reconcile.DevicePart{&roce.Part{Host: h, Loader: &hosttest.Modprobe{Root: root}}}, Detail: host.DetailFull})
	pass := func(sc reconcile.Scope) { r.Pass(context.Background(), demoPolicy(), sc) }
	pass(reconcile.Scope{Full: true})
	var changes []reconcile.Change
	r.OnChange(func(c reconcile.Change) { changes = append(changes, c) })

	link := filepath.Join(root, host.ClassInfiniband, "mlx5_1")
	target, err := os.Readlink(link)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(link); err != nil {
		t.Fatal(err)
	}
	pass(reconcile.Scope{Full: true})
	gone := r.Snapshot().Departed
	if len(gone) != 1 || gone[0].Name != "mlx5_1" || gone[0].PCI != "0000:3b:00.1" || gone[0].Driver != "mlx5_core" || gone[0].Gone.IsZero() {
		t.Fatalf("departed = %+v", gone)
	}
	line := lineWith(logs.String(), "RDMA device gone")
	for _, w := range []string{"level=WARN", "device=mlx5_1", "pci=0000:3b:00.1", "driver=mlx5_core"} {
		if !strings.Contains(line, w) {
			t.Errorf("log line %q lacks %q", line, w)
		}
	}
	if len(changes) != 1 || !reflect.DeepEqual(changes[0].Removed, []string{"mlx5_1"}) || len(changes[0].Added) != 0 {
		t.Errorf("changes %+v", changes)
	}

	// Back under another name (the kernel numbers devices in the order
	// they register): no longer departed, and an arrival.
	back := filepath.Join(root, host.ClassInfiniband, "mlx5_7")
	if err := os.Symlink(strings.Replace(target, "/mlx5_1", "/mlx5_7", 1), back); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(root, "sys/devices/pci0000:3a/0000:3a:00.0/0000:3b:00.1/infiniband/mlx5_1"),
		filepath.Join(root, "sys/devices/pci0000:3a/0000:3a:00.0/0000:3b:00.1/infiniband/mlx5_7")); err != nil {
		t.Fatal(err)
	}
	changes = nil
	pass(reconcile.Scope{Devices: map[string][]int{"mlx5_7": nil}})
	if d := r.Snapshot().Departed; len(d) != 0 {
		t.Errorf("departed after the device came back: %+v", d)
	}
	if len(changes) != 1 || !reflect.DeepEqual(changes[0].Added, []string{"mlx5_7"}) {
		t.Errorf("changes %+v", changes)
	}

	// A rename in one pass (rdma dev set mlx5_7 name mlx5_9) is not a
	// departure.
	logs.Reset()
	if err := os.Rename(back, filepath.Join(root, host.ClassInfiniband, "mlx5_9")); err != nil {
		t.Fatal(err)
	}
	pass(reconcile.Scope{Devices: map[string][]int{"mlx5_7": nil, "mlx5_9": nil}})
	if d := r.Snapshot().Departed; len(d) != 0 {
		t.Errorf("a rename departed: %+v", d)
	}
	if strings.Contains(logs.String(), "RDMA device gone") || !strings.Contains(logs.String(), "RDMA device renamed") {
		t.Errorf("rename logged as:\n%s", logs.String())
	}
}

func lineWith(log, s string) string {
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, s) {
			return l
		}
	}
	return ""
}
