package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/dbusapi"
	"github.com/rdmad/rdmad/test/bustest"
	"github.com/rdmad/rdmad/test/livetest"
)

// callerEnv makes this test binary, run again as another uid, a D-Bus
// caller of rdmad instead of a test run (TestMain).
const callerEnv = "RDMAD_TEST_CALLER"

// callerSpec is what the caller does: Count calls of SetRoCE, At a time
// on one connection; it prints how many answered with each error name.
type callerSpec struct {
	Addr      string
	Count, At int
}

func runCaller(spec string) int {
	var s callerSpec
	if err := json.Unmarshal([]byte(spec), &s); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	conn, err := dbusapi.Dial(s.Addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	obj := conn.Object(dbusapi.BusName, dbusapi.RootPath)
	answers := map[string]int{}
	for sent := 0; sent < s.Count; {
		var calls []*dbus.Call
		for ; sent < s.Count && len(calls) < s.At; sent++ {
			calls = append(calls, obj.Go(dbusapi.ManagerIface+".SetRoCE", 0, make(chan *dbus.Call, 1), "mlx5_0", uint32(1), "", int32(7), false))
		}
		for _, c := range calls {
			<-c.Done
			name := "ok"
			if de, ok := c.Err.(dbus.Error); ok {
				name = de.Name
			} else if c.Err != nil {
				name = c.Err.Error()
			}
			answers[name]++
		}
	}
	if err := json.NewEncoder(os.Stdout).Encode(answers); err != nil {
		return 2
	}
	return 0
}

// callerBinary copies this test binary where every uid may run it.
func callerBinary(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(bustest.PublicDir(t), "caller")
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

var (
	summaryCalls = regexp.MustCompile(`msg="more refused calls than logged" .*\bcalls=(\d+)`)
	refusedTotal = regexp.MustCompile(`(?m)^rdmad_refused_calls_total\{method="SetRoCE",reason="[a-z-]+"\} (\d+)$`)
)

// 5,000 refused calls from one unprivileged user (the bus authenticates it
// as uid 65534; no polkit answers, so each is denied or, beyond the user's
// outstanding checks, busy) add at most 100 lines to rdmad's log, among
// them a summary with the count of the calls not logged one by one;
// rdmad_refused_calls_total counts all 5,000; and rdmad's own lines
// still come (an applied change after the flood is logged).
func TestRefusedCallsFloodNeitherTheLogNorTheMetric(t *testing.T) {
	t.Parallel() // a bus and a host of its own; the test mostly waits
	if os.Getuid() != 0 {
		t.Skip("needs root to call as another uid")
	}
	addr := privateBus(t)
	root, env, _ := demoHost(t)
	hosttest.Write(t, root, "etc/rdma/rdmad.d/70-metrics.toml", "[metrics]\ntextfile = \"/var/lib/node_exporter/rdmad.prom\"\n")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	daemon := exec.CommandContext(ctx, rdmadBin, "--root", root, "--bus", addr)
	daemon.Env = env
	logs := &livetest.SyncBuffer{}
	daemon.Stderr = logs
	if err := daemon.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cancel()
		_ = daemon.Wait()
		if t.Failed() {
			t.Logf("rdmad log:\n%s", logs.String())
		}
	}()
	ctl := func(args ...string) error {
		out, err := exec.Command(rdmactlBin, append([]string{"--bus", addr}, args...)...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("rdmactl %v: %v: %s", args, err, out)
		}
		return nil
	}
	eventually(t, "rdmad answers on the bus", func() bool { return ctl("status") == nil })
	time.Sleep(time.Second) // start-up's lines (module loads, the first metrics write) are in
	start := len(logs.String())

	const calls = 5000
	spec, _ := json.Marshal(callerSpec{Addr: addr, Count: calls, At: 64})
	cmd := exec.Command(callerBinary(t), "-test.run=^$")
	cmd.Env = append(os.Environ(), callerEnv+"="+string(spec))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	cmd.Dir = "/"
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("caller: %v", err)
	}
	var answers map[string]int
	if err := json.Unmarshal(out, &answers); err != nil {
		t.Fatalf("caller output %q: %v", out, err)
	}
	if answers[dbusapi.ErrAccessDenied]+answers[dbusapi.ErrBusy] != calls {
		t.Fatalf("answers %v, want %d refusals (AccessDenied or Busy)", answers, calls)
	}

	// The window ends within 10 s of the first refusal: its summary.
	var logged, summed int
	deadline := time.Now().Add(30 * time.Second)
	for {
		added := logs.String()[start:]
		logged, summed = 0, 0
		for _, line := range strings.Split(added, "\n") {
			if strings.Contains(line, `msg="call refused"`) {
				logged++
			}
			if m := summaryCalls.FindStringSubmatch(line); m != nil {
				n, _ := strconv.Atoi(m[1])
				summed += n
			}
		}
		if logged+summed == calls {
			if n := strings.Count(added, "\n"); n > 100 {
				t.Errorf("%d lines added to rdmad's log by %d refused calls, want at most 100", n, calls)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d refused calls logged one by one and %d summed up, want %d in all", logged, summed, calls)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if summed == 0 {
		t.Error("no summary line")
	}

	prom := filepath.Join(root, "var/lib/node_exporter/rdmad.prom")
	eventually(t, "rdmad_refused_calls_total counts every refused call", func() bool {
		b, _ := os.ReadFile(prom)
		total := 0
		for _, m := range refusedTotal.FindAllStringSubmatch(string(b), -1) {
			n, _ := strconv.Atoi(m[1])
			total += n
		}
		return total == calls
	})

	// rdmad's own lines are not the ones dropped.
	if err := ctl("roce", "set", "mlx5_0/1", "--tos", "9"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the change is logged as applied", func() bool {
		return regexp.MustCompile(`msg=applied subject=mlx5_0/1 .*to=9`).MatchString(logs.String())
	})
}
