package bus_test

import (
	"encoding/json"
	"strings"
	"syscall"
	"testing"

	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/dbusapi"
	"github.com/rdmad/rdmad/dbusapi/client"
	"github.com/rdmad/rdmad/test/bustest"
)

// refusingEnv is rdmad on the mlx5 host declaring TOS 42 on every port,
// with a kernel that refuses it on mlx5_0/1.
type refusingEnv struct {
	dir, addr, root string
	k               *hosttest.Kernel
	d               *daemon
}

const refusedTOS = "mlx5_0/ports/1/default_roce_tos"

func newRefusingEnv(t *testing.T) *refusingEnv {
	t.Helper()
	e := &refusingEnv{dir: bustest.PublicDir(t)}
	e.addr = privateBus(t, e.dir)
	e.root = fixture(t, e.dir, "mlx5", mlx5Config+"\n[[roce]]\ndevice = \"mlx5_*\"\ntos = 42\n")
	e.k = hosttest.NewKernel(e.root)
	e.k.Refuse(refusedTOS, "", syscall.EIO)
	daemonConn, err := dbusapi.Dial(e.addr)
	if err != nil {
		t.Fatal(err)
	}
	e.d = startDaemonWith(t, daemonConn, e.k.Host())
	return e
}

// describeDoc calls Describe and decodes its document.
func describeDoc(t *testing.T, c *client.Client) dbusapi.Description {
	t.Helper()
	doc, err := c.Describe(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var d dbusapi.Description
	if err := json.Unmarshal([]byte(doc), &d); err != nil {
		t.Fatal(err)
	}
	return d
}

// A port the kernel refuses shows the refusal in its own Error property,
// in the Manager's LastResult and in Describe; the other device's port
// has no error and its value applied; and rdmad keeps answering.
func TestKernelRefusalIsVisibleOnItsObject(t *testing.T) {
	e := newRefusingEnv(t)
	root, k := e.root, e.k
	conn := dialT(t, e.addr)
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
	c, err := client.Connect(e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	d := describeDoc(t, c)
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
	k.Refuse(refusedTOS, "", 0)
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
