package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rdmad/rdmad/daemon/memlock"
	"github.com/rdmad/rdmad/dbusapi"
	"github.com/rdmad/rdmad/dbusapi/client"
)

func findCheck(checks []Check, target, name string) *Check {
	for i := range checks {
		if checks[i].Target == target && strings.HasPrefix(checks[i].Check, name) {
			return &checks[i]
		}
	}
	return nil
}

func snapshot(smLID string) *client.Snapshot {
	return &client.Snapshot{
		Manager: dbusapi.Manager{LastResult: "ok"},
		Devices: []dbusapi.Device{{Name: "mlx4_0", Ports: []dbusapi.Port{
			{Number: 1, Transport: "infiniband", State: "ACTIVE", SMLID: smLID, DesiredRoCETOS: -1},
			{Number: 2, Transport: "roce", State: "DOWN", RoCEMode: "RoCE v2", RoCETOS: 0, DesiredRoCEMode: "v2", DesiredRoCETOS: 106},
		}}},
	}
}

func TestDiagnosePorts(t *testing.T) {
	checks := Diagnose(snapshot("0x0000"), Local{UverbsLoaded: true})
	if c := findCheck(checks, "mlx4_0/1", "subnet manager"); c == nil || c.OK {
		t.Errorf("sm_lid 0x0000 must fail the subnet manager check: %+v", c)
	}
	if c := findCheck(Diagnose(snapshot("0x0001"), Local{}), "mlx4_0/1", "subnet manager"); c == nil || !c.OK {
		t.Errorf("sm_lid 0x0001: %+v", c)
	}
	if c := findCheck(checks, "mlx4_0/2", "port ACTIVE"); c == nil || c.OK {
		t.Errorf("DOWN port passed: %+v", c)
	}
	if c := findCheck(checks, "mlx4_0/2", "policy applied"); c == nil || c.OK || !strings.Contains(c.Detail, "declared 106") {
		t.Errorf("TOS 0 with 106 declared passed: %+v", c)
	}
	if c := findCheck(checks, "host", "ib_uverbs"); c == nil || !c.OK {
		t.Errorf("uverbs: %+v", c)
	}
	if c := findCheck(Diagnose(snapshot("0x1"), Local{}), "host", "ib_uverbs"); c == nil || c.OK {
		t.Errorf("uverbs missing passed: %+v", c)
	}
}

func TestDiagnoseLocalMemlockAndNFS(t *testing.T) {
	root := t.TempDir()
	write := func(rel, data string) {
		p := filepath.Join(root, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(memlock.LimitsFile, "# Managed by rdmad\n@rdma soft memlock unlimited\n@rdma hard memlock unlimited\n")
	write("proc/fs/nfsd/portlist", "tcp 2049\nudp 2049\n")
	write("sys/module/ib_uverbs/uevent", "")
	l := ProbeLocal(root)
	if l.Group != "rdma" || l.SoftLimit != "unlimited" || !l.UverbsLoaded || !l.NFSDRunning {
		t.Fatalf("probe = %+v", l)
	}

	// A member of the group whose session still has the distribution default.
	l.InGroup, l.SessionKiB = true, 8192
	c := findCheck(Diagnose(snapshot("0x1"), l), "session", "memlock")
	if c == nil || c.OK || !strings.Contains(c.Detail, "log in again") {
		t.Errorf("8 MiB session with unlimited declared: %+v", c)
	}
	l.SessionKiB = -1
	if c := findCheck(Diagnose(snapshot("0x1"), l), "session", "memlock"); c == nil || !c.OK {
		t.Errorf("unlimited session: %+v", c)
	}
	l.SoftLimit, l.SessionKiB = "67108864", 67108864
	if c := findCheck(Diagnose(snapshot("0x1"), l), "session", "memlock"); c == nil || !c.OK {
		t.Errorf("64G session with 64G declared: %+v", c)
	}

	c = findCheck(Diagnose(snapshot("0x1"), l), "nfsd", "NFS over RDMA")
	if c == nil || c.OK || !strings.Contains(c.Detail, "rdma 20049") {
		t.Errorf("nfsd without rdma: %+v", c)
	}
	l.NFSDPorts = append(l.NFSDPorts, "rdma 20049")
	if c := findCheck(Diagnose(snapshot("0x1"), l), "nfsd", "NFS over RDMA"); c == nil || !c.OK {
		t.Errorf("nfsd with rdma: %+v", c)
	}
	// Not managed, not running: no checks to make.
	if checks := Diagnose(snapshot("0x1"), ProbeLocal(t.TempDir())); findCheck(checks, "session", "memlock") != nil || findCheck(checks, "nfsd", "") != nil {
		t.Errorf("checks without memlock or nfsd: %+v", checks)
	}
}

func TestHelpOnlyAsCommand(t *testing.T) {
	e := &env{}
	if _, err := e.globals([]string{"help"}); err != errHelp {
		t.Errorf("help as the command: %v", err)
	}
	rest, err := e.globals([]string{"link", "add", "help", "--type", "rxe", "--bus", "session"})
	if err != nil || strings.Join(rest, " ") != "link add help --type rxe" || e.bus != "session" {
		t.Errorf("link named help: rest %q err %v bus %q", rest, err, e.bus)
	}
}
