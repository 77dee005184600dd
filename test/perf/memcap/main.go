// Command memcap measures the memory the rdmad binary needs at its worst
// on a 1,024-device host, the number that sizes the unit's MemoryHigh= and
// MemoryMax= and the DaemonSet's memory limit (docs/performance.md,
// "Memory bound"). It runs `make bench-memory`.
//
// rdmad runs as a daemon, as shipped, on a generated host (hosttest.Synth)
// with the metrics textfile on and a real dbus-daemon, and is driven through
// what costs it most, each phase while the previous one's garbage may still
// be resident:
//
//  1. start and the first full pass;
//  2. 4 clients calling GetManagedObjects 3 times each, with Describe and
//     Diagnose calls beside them;
//  3. a reload of a drop-in at the pre-parser's breadth bound in its
//     costliest shape (65,536 key parts as 6-deep dotted keys), refused,
//     while 2 clients call GetManagedObjects;
//  4. a reload of a valid drop-in declaring a [[roce]] and a [[qos]] rule
//     for each device (about 35,000 key parts): a full pass with QoS, and
//     the last good configuration saved;
//  5. two plans at once (as root; users beside root hold at most 3 at
//     once, one each), each of a candidate drop-in
//     near Plan's 1 MiB bound.
//
// It prints VmHWM (the peak resident set) and VmRSS after each phase.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/dbusapi"
	"github.com/rdmad/rdmad/test/bustest"
	"github.com/rdmad/rdmad/test/perf"
)

func main() {
	n := flag.Int("devices", 1024, "devices of the generated host")
	clients = flag.Int("clients", 4, "clients calling GetManagedObjects at once")
	flag.Parse()
	if err := run(*n); err != nil {
		fmt.Fprintln(os.Stderr, "memcap:", err)
		os.Exit(1)
	}
}

var clients *int

func run(n int) error {
	dir, err := os.MkdirTemp("", "rdmad-memcap-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "rdmad")
	build := exec.Command("go", "build", "-o", bin, "./cmd/rdmad")
	build.Dir = hosttest.RepoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("go build: %v\n%s", err, out)
	}
	busDir := filepath.Join(dir, "bus")
	if err := os.Mkdir(busDir, 0o755); err != nil {
		return err
	}
	addr, stopBus, err := bustest.Run(busDir)
	if err != nil {
		return err
	}
	defer stopBus()

	h, err := perf.NewHost(n)
	if err != nil {
		return err
	}
	defer h.Remove()
	write := func(rel, content string) error {
		p := filepath.Join(h.Root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		return os.WriteFile(p, []byte(content), 0o644)
	}
	if err := write("etc/rdma/rdmad.d/70-metrics.toml", "[metrics]\ntextfile = \"/var/lib/prometheus/node-exporter/rdmad.prom\"\n"); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(h.Root, "var/lib/prometheus/node-exporter"), 0o755); err != nil {
		return err
	}

	cmd := exec.Command(bin, "--root", h.Root, "--bus", addr) // its log is not shown: refusals name every line
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	pid := cmd.Process.Pid
	conn, err := dbusapi.Dial(addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	obj := conn.Object(dbusapi.BusName, dbusapi.RootPath)
	for deadline := time.Now().Add(2 * time.Minute); ; {
		var owner string
		if conn.BusObject().Call("org.freedesktop.DBus.GetNameOwner", 0, dbusapi.BusName).Store(&owner) == nil {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("rdmad did not take its name")
		}
		time.Sleep(20 * time.Millisecond)
	}
	report := func(phase string) {
		hwm, rss := status(pid, "VmHWM:"), status(pid, "VmRSS:")
		fmt.Printf("%-58s VmHWM %6.1f MiB  VmRSS %6.1f MiB\n", phase, float64(hwm)/1024, float64(rss)/1024)
	}
	report(fmt.Sprintf("1. started, first full pass (%d devices)", n))

	gmo := func(clients, times int) error {
		var wg sync.WaitGroup
		errs := make(chan error, clients*times+4)
		for c := 0; c < clients; c++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				cc, err := dbusapi.Dial(addr)
				if err != nil {
					errs <- err
					return
				}
				defer cc.Close()
				o := cc.Object(dbusapi.BusName, dbusapi.RootPath)
				for i := 0; i < times; i++ {
					var objs map[dbus.ObjectPath]map[string]map[string]dbus.Variant
					if err := o.Call("org.freedesktop.DBus.ObjectManager.GetManagedObjects", 0).Store(&objs); err != nil {
						errs <- err
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		return <-errs
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := 0; i < 2; i++ {
			var doc string
			_ = obj.Call(dbusapi.ManagerIface+".Describe", 0).Store(&doc)
		}
	}()
	go func() {
		defer wg.Done()
		for i := 0; i < 2; i++ {
			var doc string
			_ = obj.Call(dbusapi.ManagerIface+".Diagnose", 0).Store(&doc)
		}
	}()
	if err := gmo(*clients, 3); err != nil {
		return fmt.Errorf("GetManagedObjects: %w", err)
	}
	wg.Wait()
	report(fmt.Sprintf("2. %d clients x 3 GetManagedObjects, Describe, Diagnose", *clients))

	var wide strings.Builder
	for i := 0; i < 65536/6; i++ {
		fmt.Fprintf(&wide, "k%d.b.c.d.e.f = 1\n", i)
	}
	if err := write("etc/rdma/rdmad.d/80-wide.toml", wide.String()); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- gmo(2, 1) }()
	reloadErr := obj.Call(dbusapi.ManagerIface+".Reload", 0).Err
	if err := <-done; err != nil {
		return err
	}
	if reloadErr == nil {
		return fmt.Errorf("the drop-in at the breadth bound was accepted")
	}
	report(fmt.Sprintf("3. reload of %d KiB of 6-deep dotted keys (refused)", wide.Len()>>10))

	var rules strings.Builder
	for i := 0; i < n; i++ {
		fmt.Fprintf(&rules, "[[roce]]\ndevice = \"mlx5_%d\"\nport = 1\nmode = \"v2\"\ntos = 26\n\n", i)
		fmt.Fprintf(&rules, "[[qos]]\ndevice = \"mlx5_%d\"\nport = 1\ntrust = \"dscp\"\npfc = [3]\ndscp_prio = { 26 = 3, 10 = 1, 46 = 5 }\n\n", i)
	}
	if err := os.Remove(filepath.Join(h.Root, "etc/rdma/rdmad.d/80-wide.toml")); err != nil {
		return err
	}
	if err := write("etc/rdma/rdmad.d/60-rules.toml", rules.String()); err != nil {
		return err
	}
	var summary string
	if err := obj.Call(dbusapi.ManagerIface+".Reload", 0).Store(&summary); err != nil {
		return fmt.Errorf("reload of the per-device rules: %w", err)
	}
	report(fmt.Sprintf("4. reload of a rule pair per device (%d KiB), saved", rules.Len()>>10))

	// Two plans at once (as root, which may hold every slot), each of a candidate near
	// its 1 MiB bound: every device read, the candidate parsed and judged.
	var candidate strings.Builder
	for round := 0; ; round++ {
		var b strings.Builder
		for i := 0; i < n; i++ {
			fmt.Fprintf(&b, "[[roce]]\ndevice = \"mlx5_%d\"\nport = 1\ntos = %d\n\n", i, 4*(round%60))
		}
		if candidate.Len()+b.Len() > 1<<20 {
			break
		}
		candidate.WriteString(b.String())
	}
	plans := make(chan error, 2)
	for i := 0; i < 2; i++ {
		go func() {
			var out string
			plans <- obj.Call(dbusapi.ManagerIface+".Plan", 0, []byte(candidate.String()), "90-plan.toml").Store(&out)
		}()
	}
	for i := 0; i < 2; i++ {
		if err := <-plans; err != nil {
			return fmt.Errorf("plan of a %d KiB candidate: %w", candidate.Len()>>10, err)
		}
	}
	report(fmt.Sprintf("5. 2 plans at once of a %d KiB candidate each", candidate.Len()>>10))
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	return nil
}

// status reads a "Name: N kB" line of /proc/PID/status, in KiB.
func status(pid int, name string) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == name {
			kb, _ := strconv.Atoi(f[1])
			return kb
		}
	}
	return 0
}
