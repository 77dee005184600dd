package bus_test

import (
	"encoding/json"
	"strings"
	"syscall"
	"testing"

	"github.com/rdmad/rdmad/daemon/bus"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/dbusapi"
	"github.com/rdmad/rdmad/dbusapi/client"
	"github.com/rdmad/rdmad/test/bustest"
)

// A port the kernel refuses shows the refusal in its own Error property,
// in the Manager's LastResult and in Describe; the other device's port
// has no error and its value applied; and rdmad keeps answering.
func TestKernelRefusalIsVisibleOnItsObject(t *testing.T) {
	dir := bustest.PublicDir(t)
	addr := privateBus(t, dir)
	root := fixture(t, dir, "mlx5", mlx5Config+"\n[[roce]]\ndevice = \"mlx5_*\"\ntos = 42\n")
	k := hosttest.NewKernel(root)
	k.Refuse("mlx5_0/ports/1/default_roce_tos", "", syscall.EIO)
	daemonConn, err := bus.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	startDaemonWith(t, daemonConn, k.Host())
	conn := dialT(t, addr)
	objs := managedObjects(t, conn)
	bad := objs[dbusapi.PortPath("mlx5_0", 1)][dbusapi.PortIface]["Error"].Value().(string)
	if !strings.Contains(bad, "roce tos") || !strings.Contains(bad, "input/output error") {
		t.Errorf("mlx5_0/1 Error = %q", bad)
	}
	good := objs[dbusapi.PortPath("mlx5_1", 1)][dbusapi.PortIface]
	if e := good["Error"].Value().(string); e != "" || good["RoCETOS"].Value().(int32) != 42 {
		t.Errorf("mlx5_1/1 Error %q, TOS %v", e, good["RoCETOS"].Value())
	}
	if lr := managerProp(t, conn, "LastResult").(string); !strings.Contains(lr, "1 failed") || !strings.Contains(lr, "mlx5_0/1") {
		t.Errorf("LastResult %q", lr)
	}
	c, err := client.Connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	doc, err := c.Describe(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var d dbusapi.Description
	if err := json.Unmarshal([]byte(doc), &d); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, a := range d.Actions {
		if a.Status == "failed" && a.Subject.Device == "mlx5_0" && a.Subject.Port == 1 && strings.Contains(a.Error, "input/output error") {
			found = true
		}
	}
	if !found {
		t.Errorf("Describe has no failed action for mlx5_0/1: %+v", d.Actions)
	}
	// The kernel accepts again: a Reconcile clears the error.
	k.Refuse("mlx5_0/ports/1/default_roce_tos", "", 0)
	if _, err := c.Reconcile(t.Context()); err != nil {
		t.Fatal(err)
	}
	if e := managedObjects(t, conn)[dbusapi.PortPath("mlx5_0", 1)][dbusapi.PortIface]["Error"].Value().(string); e != "" {
		t.Errorf("Error after the kernel accepted: %q", e)
	}
	if got := hosttest.Read(t, root, host.ConfigfsPortPath("mlx5_0", 1, "default_roce_tos")); got != "42" {
		t.Errorf("tos %s", got)
	}
}
