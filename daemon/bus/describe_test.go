package bus_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/rdmad/rdmad/daemon/host"
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

// Describe is the properties in one document: every string escaped once,
// as the properties are, so a name copied from `rdmactl status` (which
// prints Describe's) names the device (a backslash and a byte that is not
// UTF-8 were escaped twice: "\\\\" and "\\xff" named nothing).
func TestDescribeIsThePropertiesEscapedOnce(t *testing.T) {
	const name = "vf\xff\\b"
	dir := bustest.PublicDir(t)
	addr := privateBus(t, dir)
	root := fixture(t, dir, "mlx5", mlx5Config)
	hosttest.RenameDevice(t, root, "mlx5_1", name)
	for _, attr := range []string{"default_roce_mode=RoCE v2", "default_roce_tos=0"} {
		k, v, _ := strings.Cut(attr, "=")
		hosttest.Write(t, root, host.ConfigfsPortPath(name, 1, k), v+"\n")
	}
	startDaemon(t, addr, root)
	c, err := client.Connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	snap, err := c.Snapshot(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	desc := describeDoc(t, c)
	// Compared as the JSON rdmactl prints: object paths are not in it.
	if got, want := jsonOf(t, desc.Manager), jsonOf(t, snap.Manager); got != want {
		t.Errorf("Describe's manager differs from the properties:\n got %s\nwant %s", got, want)
	}
	if got, want := jsonOf(t, desc.Devices), jsonOf(t, snap.Devices); got != want {
		t.Errorf("Describe's devices differ from the properties:\n got %s\nwant %s", got, want)
	}
	if d := snap.Device(dbusapi.Escape(name)); d == nil {
		t.Errorf("no device published as %q", dbusapi.Escape(name))
	}
	if err := c.SetRoCE(t.Context(), desc.Devices[1].Name, 1, "", 21, false); err != nil {
		t.Errorf("SetRoCE by the name Describe gives (%q): %v", desc.Devices[1].Name, err)
	}
}

func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
