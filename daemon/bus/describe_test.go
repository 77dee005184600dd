package bus_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/rdmad/rdmad/daemon/bus"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/dbusapi"
	"github.com/rdmad/rdmad/dbusapi/client"
	"github.com/rdmad/rdmad/test/bustest"
)

// Describe answers from one state: a pass that lands while the document
// is built (here: right after the state was taken, clearing the only
// failure and removing a device) shows in none of its parts, so the
// Manager's LastResult agrees with the errors of the devices listed.
func TestDescribeIsOneSnapshot(t *testing.T) {
	dir := bustest.PublicDir(t)
	addr := privateBus(t, dir)
	root := fixture(t, dir, "mlx5", mlx5Config+"\n[[roce]]\ndevice = \"mlx5_*\"\ntos = 42\n")
	k := hosttest.NewKernel(root)
	k.Refuse("mlx5_0/ports/1/default_roce_tos", "", syscall.EIO)
	daemonConn, err := bus.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	d := startDaemonWith(t, daemonConn, k.Host())
	var once sync.Once
	d.srv.AfterDescribeSnapshotForTest(func() {
		once.Do(func() {
			k.Refuse("mlx5_0/ports/1/default_roce_tos", "", 0)
			if err := os.Rename(filepath.Join(root, "sys/class/infiniband/mlx5_1"), filepath.Join(dir, "mlx5_1.away")); err != nil {
				t.Error(err)
			}
			if rep := d.svc.ReconcileNow(t.Context()); rep.Failed() {
				t.Errorf("the pass in between failed: %v", rep.Failures())
			}
		})
	})
	c, err := client.Connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	doc, err := c.Describe(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var desc dbusapi.Description
	if err := json.Unmarshal([]byte(doc), &desc); err != nil {
		t.Fatal(err)
	}
	// The state taken: two devices, mlx5_0/1 refused.
	if len(desc.Devices) != 2 {
		t.Fatalf("Describe lists %d devices, want the 2 of the state it took", len(desc.Devices))
	}
	if e := desc.Devices[0].Ports[0].Error; !strings.Contains(e, "input/output error") {
		t.Errorf("mlx5_0/1 error = %q, want the refusal of the state taken", e)
	}
	if !strings.HasPrefix(desc.LastResult, "1 failed") || !strings.Contains(desc.LastResult, "mlx5_0/1") {
		t.Errorf("last_result = %q, but the devices it lists carry the mlx5_0/1 refusal", desc.LastResult)
	}
	// The pass in between did happen: the next Describe shows it.
	doc, err = c.Describe(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	desc = dbusapi.Description{}
	if err := json.Unmarshal([]byte(doc), &desc); err != nil {
		t.Fatal(err)
	}
	if len(desc.Devices) != 1 || desc.LastResult != "ok" {
		t.Errorf("after the pass: %d devices, last_result %q", len(desc.Devices), desc.LastResult)
	}
}
