package bus_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/rdmad/rdmad/daemon/compose"
	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/daemon/netns/netnstest"
	"github.com/rdmad/rdmad/dbusapi"
	"github.com/rdmad/rdmad/dbusapi/client"
	"github.com/rdmad/rdmad/test/bustest"
)

// A device renamed by a VF driver or a container to a name with bytes
// D-Bus cannot carry, white space, a newline and glob characters gets a
// valid object path, is published escaped (every reader keeps working),
// and can be addressed by the name as published.
func TestHostileDeviceNameOnTheBus(t *testing.T) {
	const name = "vf\xff \n*[..]$x\u202e"
	dir := bustest.PublicDir(t)
	addr := privateBus(t, dir)
	root := fixture(t, dir, "mlx5", mlx5Config)
	hosttest.RenameDevice(t, root, "mlx5_1", name)
	for _, attr := range []string{"default_roce_mode=RoCE v2", "default_roce_tos=0"} {
		k, v, _ := strings.Cut(attr, "=")
		hosttest.Write(t, root, host.ConfigfsPortPath(name, 1, k), v+"\n")
	}
	startDaemon(t, addr, root)
	conn := dialT(t, addr)
	objs := managedObjects(t, conn)
	path := dbusapi.DevicePath(name)
	if !path.IsValid() {
		t.Fatalf("object path %q is not valid", path)
	}
	dev, ok := objs[path][dbusapi.DeviceIface]
	if !ok {
		t.Fatalf("no object %s among %d", path, len(objs))
	}
	published := dev["Name"].Value().(string)
	if published != `vf\xff \x0a*[..]$x\xe2\x80\xae` || dbusapi.Unescape(published) != name {
		t.Errorf("Name published as %q", published)
	}
	if code, out, errOut := rdmactl(t, addr, "-o", "json", "status"); code != 0 || !json.Valid([]byte(out)) {
		t.Errorf("status -o json: exit %d %s", code, errOut)
	}

	c, err := client.Connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.SetRoCE(t.Context(), published, 1, "", 21, false); err != nil {
		t.Fatalf("SetRoCE by the published name: %v", err)
	}
	if got := hosttest.Read(t, root, host.ConfigfsPortPath(name, 1, "default_roce_tos")); got != "21" {
		t.Errorf("tos = %q", got)
	}
	if got := hosttest.Read(t, root, host.ConfigfsPortPath("mlx5_0", 1, "default_roce_tos")); got == "21" {
		t.Error("the call for the hostile name changed mlx5_0")
	}
	ents, _ := os.ReadDir(filepath.Join(root, host.ConfigfsRdmaCM))
	if len(ents) != 2 {
		t.Errorf("configfs rdma_cm has %d entries after the call", len(ents))
	}
}

// Names longer than the kernel allows are refused with InvalidArgs naming
// the argument, before anything is looked up, and the message does not
// carry the whole name back.
func TestOverlongNamesAreInvalidArgs(t *testing.T) {
	e := newEnv(t, "mlx5", mlx5Config)
	conn := dialT(t, e.addr)
	obj := conn.Object(dbusapi.BusName, dbusapi.RootPath)
	before := treeDigest(t, e.root)
	long := func(n int) string { return strings.Repeat("n", n) }
	for _, tc := range []struct {
		method string
		args   []any
		arg    string
	}{
		{"SetRoCE", []any{long(64), uint32(0), "v2", int32(-1), false}, "device"},
		{"SetRoCE", []any{long(1 << 20), uint32(0), "v2", int32(-1), false}, "device"},
		{"AddLink", []any{long(64), "rxe", "ens1f0np0", false}, "name"},
		{"AddLink", []any{"rxe0", "rxe", long(16), false}, "netdev"},
		{"AddLink", []any{"rxe0", "rxe", long(1 << 20), true}, "netdev"},
		{"DeleteLink", []any{long(1 << 20), false}, "name"},
	} {
		err := obj.Call(dbusapi.ManagerIface+"."+tc.method, 0, tc.args...).Err
		msg := client.ErrorMessage(err)
		if client.ErrorName(err) != dbusapi.ErrInvalidArgs || !strings.Contains(msg, "argument "+tc.arg+":") {
			t.Errorf("%s with a %d-byte %s: %s %.200s", tc.method, len(tc.args[0].(string))+len(tc.args[2].(string)), tc.arg, client.ErrorName(err), msg)
		}
		if len(msg) > 300 {
			t.Errorf("%s: the error message is %d bytes long", tc.method, len(msg))
		}
	}
	if after := treeDigest(t, e.root); after != before {
		t.Errorf("refused calls changed files:\n%s", diffLines(before, after))
	}
	var v dbus.Variant
	if err := obj.Call("org.freedesktop.DBus.Properties.Get", 0, dbusapi.ManagerIface, "Version").Store(&v); err != nil {
		t.Errorf("rdmad stopped answering: %v", err)
	}
}

// When Diagnose cannot encode its findings, the error it returns may quote
// what a finding holds (here the raw name of a device renamed to bytes
// D-Bus cannot carry): it is published escaped, so the caller gets the
// error and rdmad stays on the bus (dbus-daemon drops a connection that
// sends a string that is not UTF-8).
func TestDiagnoseErrorIsPublishedEscaped(t *testing.T) {
	const name = "vf\xff\n0"
	dir := bustest.PublicDir(t)
	addr := privateBus(t, dir)
	root := fixture(t, dir, "mlx5", mlx5Config)
	hosttest.RenameDevice(t, root, "mlx5_1", name)
	d := startDaemon(t, addr, root)
	d.srv.EncodeFindingsForTest(func(fs []dbusapi.Finding) (string, error) {
		for _, f := range fs {
			if dev := dbusapi.Unescape(f.Subject.Device); dev == name {
				return "", fmt.Errorf("encode finding %s of %s: unsupported", f.ID, dev)
			}
		}
		return "", fmt.Errorf("no finding about %q among %d", name, len(fs))
	})
	c, err := client.Connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Unescaped, the error never reaches the caller: bound the wait.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	_, err = c.Diagnose(ctx)
	if err == nil {
		t.Fatal("Diagnose succeeded with a failing encoder")
	}
	msg := client.ErrorMessage(err)
	if client.ErrorName(err) != dbusapi.ErrFailed || !strings.Contains(msg, `of vf\xff\x0a0: unsupported`) {
		t.Errorf("Diagnose: %s %q, want Failed with the device name escaped", client.ErrorName(err), msg)
	}
	if _, err := c.Describe(t.Context()); err != nil {
		t.Errorf("rdmad stopped answering after the error: %v", err)
	}
}

// Properties.Get and GetAll quote at most 64 bytes of the interface or
// property name they were given: a 100,000-byte name is not echoed back.
func TestPropertyErrorsQuoteBoundedNames(t *testing.T) {
	e := newEnv(t, "mlx5", mlx5Config)
	conn := dialT(t, e.addr)
	long := strings.Repeat("i", 100000)
	for path, iface := range map[dbus.ObjectPath]string{
		dbusapi.RootPath: dbusapi.ManagerIface, dbusapi.PortPath("mlx5_0", 1): dbusapi.PortIface,
		"/org/rdmad1/devices/none":                     long, // no object: the interface is unknown
		dbus.ObjectPath("/org/rdmad1/devices/" + long): long, // nor is a long path echoed back whole
	} {
		obj := conn.Object(dbusapi.BusName, path)
		for _, tc := range []struct {
			call string
			args []any
			want string
		}{
			{"Get", []any{long, "Version"}, "org.freedesktop.DBus.Error.UnknownInterface"},
			{"GetAll", []any{long}, "org.freedesktop.DBus.Error.UnknownInterface"},
			{"Get", []any{iface, long}, ""},
		} {
			err := obj.Call("org.freedesktop.DBus.Properties."+tc.call, 0, tc.args...).Err
			if err == nil {
				t.Fatalf("%s %s with a 100,000-byte name succeeded", path, tc.call)
			}
			msg := client.ErrorMessage(err)
			if len(msg) > 200 {
				t.Errorf("%s %s: the error message is %d bytes long: %.120s...", path, tc.call, len(msg), msg)
			}
			if !strings.Contains(msg, strings.Repeat("i", 64)+`"...`) {
				t.Errorf("%s %s: message %.200q does not quote the name's first 64 bytes", path, tc.call, msg)
			}
			if tc.want != "" && client.ErrorName(err) != tc.want {
				t.Errorf("%s %s: %s, want %s", path, tc.call, client.ErrorName(err), tc.want)
			}
		}
	}
}

// A persisted netns mode the running kernel refuses now (EBUSY: other
// network namespaces exist) holds for the next boot: the call says so
// with org.rdmad1.Error.NextBoot on the wire, not Error.Failed.
func TestNextBootErrorOnTheWire(t *testing.T) {
	dir := bustest.PublicDir(t)
	addr := privateBus(t, dir)
	root := fixture(t, dir, "mlx5", mlx5Config+"\n[netns]\nmode = \"shared\"\n")
	nk := netnstest.New(config.NetnsShared)
	nk.Refuse(syscall.EBUSY)
	conn, err := dbusapi.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	startDaemonKernel(t, conn, host.New(root), compose.Kernel{Modules: &hosttest.Modprobe{Root: root}, Netns: nk})
	c, err := client.Connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	err = c.SetNetnsMode(t.Context(), "exclusive", true)
	if got := client.ErrorName(err); got != dbusapi.ErrNextBoot {
		t.Fatalf("persisted SetNetnsMode refused with EBUSY now: %s %v, want %s", got, err, dbusapi.ErrNextBoot)
	}
	// A runtime switch refused the same way is a plain failure: nothing
	// holds for the next boot.
	if got := client.ErrorName(c.SetNetnsMode(t.Context(), "exclusive", false)); got != dbusapi.ErrFailed {
		t.Errorf("runtime SetNetnsMode refused with EBUSY: %s, want %s", got, dbusapi.ErrFailed)
	}
}
