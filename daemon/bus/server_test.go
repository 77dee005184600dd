package bus_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/godbus/dbus/v5"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/reconcile"
	"github.com/rdmad/rdmad/dbusapi"
)

func managedObjects(t *testing.T, conn *dbus.Conn) map[dbus.ObjectPath]map[string]map[string]dbus.Variant {
	t.Helper()
	var objs map[dbus.ObjectPath]map[string]map[string]dbus.Variant
	if err := conn.Object(dbusapi.BusName, dbusapi.RootPath).Call("org.freedesktop.DBus.ObjectManager.GetManagedObjects", 0).Store(&objs); err != nil {
		t.Fatal(err)
	}
	return objs
}

func managerProp(t *testing.T, conn *dbus.Conn, name string) any {
	t.Helper()
	v, err := conn.Object(dbusapi.BusName, dbusapi.RootPath).GetProperty(dbusapi.ManagerIface + "." + name)
	if err != nil {
		t.Fatal(err)
	}
	return v.Value()
}

// A change that names a device no longer in the state (delivered late)
// must not bring the removed device back.
func TestStaleChangeDoesNotResurrectADevice(t *testing.T) {
	e := newEnv(t, "mlx5", mlx5Config)
	conn := dialT(t, e.addr)
	if err := os.Rename(filepath.Join(e.root, "sys/class/infiniband/mlx5_1"), filepath.Join(e.dir, "mlx5_1.away")); err != nil {
		t.Fatal(err)
	}
	e.d.svc.ReconcileNow(t.Context())
	_ = e.d.srv.Flush(t.Context())
	if _, ok := managedObjects(t, conn)[dbusapi.DevicePath("mlx5_1")]; ok {
		t.Fatal("setup: mlx5_1 still published after its removal")
	}
	e.d.srv.SyncForTest(reconcile.Change{Updated: []string{"mlx5_1"}})
	if _, ok := managedObjects(t, conn)[dbusapi.DevicePath("mlx5_1")]; ok {
		t.Error("a stale change re-added the removed mlx5_1")
	}
	if got := managerProp(t, conn, "Devices").([]dbus.ObjectPath); len(got) != 1 {
		t.Errorf("Manager.Devices = %v after an older state", got)
	}
}

// Deleting a declared link that does not exist in the kernel runs no
// kernel call, yet Manager.Links must drop it.
func TestDeleteAbsentLinkUpdatesLinks(t *testing.T) {
	e := newEnv(t, "mlx5", mlx5Config+"\n[[link]]\nname = \"rxe0\"\ntype = \"rxe\"\nnetdev = \"ens1f0np0\"\n")
	conn := dialT(t, e.addr)
	links := func() string {
		var names []string
		for _, l := range managerProp(t, conn, "Links").([][]any) {
			names = append(names, l[0].(string))
		}
		return strings.Join(names, ",")
	}
	if got := links(); got != "rxe0" {
		t.Fatalf("setup: Links = %q", got)
	}
	if code, _, stderr := rdmactl(t, e.addr, "link", "del", "rxe0"); code != 0 {
		t.Fatalf("link del: exit %d: %s", code, stderr)
	}
	if got := links(); got != "" {
		t.Errorf("Links after deleting rxe0 = %q", got)
	}
}

// NetnsMode is the mode in force: a runtime one shows at once.
func TestNetnsModeShowsRuntimeMode(t *testing.T) {
	e := newEnv(t, "mlx5", mlx5Config+"\n[netns]\nmode = \"shared\"\n")
	conn := dialT(t, e.addr)
	if err := e.d.svc.SetNetnsMode(t.Context(), config.NetnsExclusive, false); err != nil {
		t.Fatal(err)
	}
	_ = e.d.srv.Flush(t.Context()) // as the bus does before it replies to a call
	if got := managerProp(t, conn, "NetnsMode"); got != "exclusive" {
		t.Errorf("NetnsMode = %v, want the runtime exclusive", got)
	}
}

// rdmactl netns set and rdmactl reconcile reach their methods.
func TestRdmactlNetnsSetAndReconcile(t *testing.T) {
	e := newEnv(t, "mlx5", mlx5Config+"\n[[roce]]\ndevice = \"mlx5_0\"\ntos = 9\n")
	conn := dialT(t, e.addr)
	if code, _, stderr := rdmactl(t, e.addr, "netns", "set", "exclusive"); code != 0 {
		t.Fatalf("netns set: exit %d: %s", code, stderr)
	}
	if got := managerProp(t, conn, "NetnsMode"); got != "exclusive" {
		t.Errorf("NetnsMode = %v", got)
	}
	if code, _, _ := rdmactl(t, e.addr, "netns", "set", "private"); code != 2 {
		t.Errorf("netns set private: exit %d, want 2", code)
	}
	// Someone resets the TOS behind rdmad's back; reconcile puts it back.
	if err := os.WriteFile(filepath.Join(e.root, "sys/kernel/config/rdma_cm/mlx5_0/ports/1/default_roce_tos"), []byte("0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := rdmactl(t, e.addr, "-o", "json", "reconcile")
	if code != 0 || !strings.Contains(out, `"changed": 1`) {
		t.Errorf("reconcile: exit %d: %s%s", code, out, stderr)
	}
	if got := e.read(t, "sys/kernel/config/rdma_cm/mlx5_0/ports/1/default_roce_tos"); got != "9" {
		t.Errorf("tos after reconcile = %s", got)
	}
}
