package bus_test

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/rdmad/rdmad/dbusapi/client"
)

// Describe answers from one state: a pass that lands while the document
// is built (here: right after the state was taken, clearing the only
// failure and removing a device) shows in none of its parts, so the
// Manager's LastResult agrees with the errors of the devices listed.
func TestDescribeIsOneSnapshot(t *testing.T) {
	e := newRefusingEnv(t)
	var once sync.Once
	e.d.srv.AfterDescribeSnapshotForTest(func() {
		once.Do(func() {
			e.k.Refuse(refusedTOS, "", 0)
			if err := os.Rename(filepath.Join(e.root, "sys/class/infiniband/mlx5_1"), filepath.Join(e.dir, "mlx5_1.away")); err != nil {
				t.Error(err)
			}
			if rep := e.d.svc.ReconcileNow(t.Context()); rep.Failed() {
				t.Errorf("the pass in between failed: %v", rep.Failures())
			}
		})
	})
	c, err := client.Connect(e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	desc := describeDoc(t, c)
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
	if desc = describeDoc(t, c); len(desc.Devices) != 1 || desc.LastResult != "ok" {
		t.Errorf("after the pass: %d devices, last_result %q", len(desc.Devices), desc.LastResult)
	}
}
