// Command benchtable is `make bench`: it measures rdmad on generated hosts
// of 1, 64 and 1,024 devices and prints one table, with the vendor shell
// procedure and the floors (the bare system calls of a no-change and of a
// cold pass, godbus's own work on the GetManagedObjects reply) measured in
// the same run, what the health monitor's sample, a no-change pass and a
// GetManagedObjects round trip allocate, and the targets of
// docs/performance.md checked as ratios of that run.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/daemon/reconcile"
	"github.com/rdmad/rdmad/dbusapi"
	"github.com/rdmad/rdmad/test/bustest"
	"github.com/rdmad/rdmad/test/perf"
)

func main() {
	sizes := flag.String("sizes", "1,64,1024", "device counts")
	runs := flag.Int("runs", 7, "repetitions of each measurement (the median is shown)")
	idle := flag.Duration("idle", time.Minute, "how long the daemon's idle CPU is measured, at the largest size (0: not measured)")
	flag.Parse()
	if err := run(*sizes, *runs, *idle); err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(1)
	}
}

type row struct {
	n                                       int
	cold, shell, noChange, floor, daemonAll time.Duration
	coldFloor, gmoFloor                     time.Duration
	event, setRoCE, gmo, startName          time.Duration
	rssKB, rssServedKB                      int
	storm                                   perf.StormResult
	allocs                                  allocRow
}

func run(sizeList string, runs int, idle time.Duration) error {
	bin, err := buildRdmad()
	if err != nil {
		return err
	}
	defer os.RemoveAll(filepath.Dir(bin))
	busDir, err := os.MkdirTemp("", "rdmad-bench-bus-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(busDir)
	addr, stopBus, err := bustest.Run(busDir)
	if err != nil {
		return err
	}
	defer stopBus()

	var rows []row
	var drift []driftRow
	fields := strings.Split(sizeList, ",")
	for i, f := range fields {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return fmt.Errorf("size %q: %w", f, err)
		}
		fmt.Fprintf(os.Stderr, "benchtable: N=%d ...\n", n)
		r, err := measure(bin, addr, n, runs)
		if err != nil {
			return fmt.Errorf("at %d devices: %w", n, err)
		}
		rows = append(rows, r)
		var idleHere time.Duration
		if i == len(fields)-1 {
			idleHere = idle
		}
		dr, err := measureDrift(bin, addr, n, runs, idleHere)
		if err != nil {
			return fmt.Errorf("live truth at %d devices: %w", n, err)
		}
		drift = append(drift, dr)
	}
	ref, err := setRoCEReference(addr, runs)
	if err != nil {
		return err
	}
	print(rows, ref, runs)
	printDrift(drift, runs, idle)
	return nil
}

func buildRdmad() (string, error) {
	dir, err := os.MkdirTemp("", "rdmad-bench-bin-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "rdmad")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/rdmad")
	cmd.Dir = hosttest.RepoRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
}

// median runs fn runs times and returns the median duration.
func median(runs int, fn func() (time.Duration, error)) (time.Duration, error) {
	var ds []time.Duration
	for i := 0; i < runs; i++ {
		d, err := fn()
		if err != nil {
			return 0, err
		}
		ds = append(ds, d)
	}
	return middle(ds), nil
}

// middle is the median of ds (reordered).
func middle(ds []time.Duration) time.Duration {
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[len(ds)/2]
}

func timed(fn func() error) (time.Duration, error) {
	t0 := time.Now()
	err := fn()
	return time.Since(t0), err
}

func measure(bin, addr string, n, runs int) (row, error) {
	r := row{n: n}
	h, err := perf.NewHost(n)
	if err != nil {
		return r, err
	}
	defer h.Remove()
	once := func() error {
		out, err := exec.Command(bin, "--root", h.Root, "--once").CombinedOutput()
		if err != nil {
			return fmt.Errorf("rdmad --once: %v\n%s", err, out)
		}
		return nil
	}
	// Each pass and its floor take turns, run by run, so a busy moment of
	// the machine falls on both alike.
	var colds, coldFloors []time.Duration
	for i := 0; i < runs; i++ {
		for _, m := range []struct {
			fn  func() error
			out *[]time.Duration
		}{{once, &colds}, {h.FloorCold, &coldFloors}} {
			if err := h.Reset(); err != nil {
				return r, err
			}
			d, err := timed(m.fn)
			if err != nil {
				return r, err
			}
			*m.out = append(*m.out, d)
		}
	}
	r.cold, r.coldFloor = middle(colds), middle(coldFloors)
	if err := h.Reset(); err != nil {
		return r, err
	}
	if err := once(); err != nil {
		return r, err
	}
	if err := h.Verify(); err != nil {
		return r, err
	}
	var noChanges, floors []time.Duration
	for i := 0; i < runs; i++ {
		d, err := timed(once)
		if err != nil {
			return r, err
		}
		f, err := timed(h.Floor)
		if err != nil {
			return r, err
		}
		noChanges, floors = append(noChanges, d), append(floors, f)
	}
	r.noChange, r.floor = middle(noChanges), middle(floors)
	shellRuns := runs
	if n >= 512 {
		shellRuns = 3 // seconds each
	}
	if r.shell, err = median(shellRuns, func() (time.Duration, error) {
		if err := h.Reset(); err != nil {
			return 0, err
		}
		return timed(func() error {
			out, err := exec.Command("bash", "-c", perf.ShellScript, "shell", h.Root).CombinedOutput()
			if err != nil {
				return fmt.Errorf("shell loop: %v\n%s", err, out)
			}
			return nil
		})
	}); err != nil {
		return r, err
	}
	if err := h.Verify(); err != nil {
		return r, fmt.Errorf("after the shell loop: %w", err)
	}

	if err := h.Reset(); err != nil {
		return r, err
	}
	d, err := perf.StartDaemon(h, addr)
	if err != nil {
		return r, err
	}
	rec := d.Svc.Reconciler()
	pol := d.Svc.PolicyInForce()
	dev := fmt.Sprintf("mlx5_%d", n/2)
	if r.daemonAll, err = median(runs, func() (time.Duration, error) {
		return timed(func() error { d.Svc.ReconcileNow(context.Background()); return nil })
	}); err != nil {
		return r, err
	}
	if r.event, err = median(runs*3, func() (time.Duration, error) {
		return timed(func() error {
			rec.Pass(context.Background(), pol, reconcile.Scope{Devices: map[string][]int{dev: nil}})
			return nil
		})
	}); err != nil {
		return r, err
	}
	i := 0
	if r.setRoCE, err = median(runs*3, func() (time.Duration, error) {
		i++
		return timed(func() error { return d.SetRoCE(dev, 1, int32(i%200)) })
	}); err != nil {
		return r, err
	}
	d.Stop()

	if r.startName, r.rssKB, err = startToName(bin, addr, h, runs); err != nil {
		return r, err
	}
	if r.gmo, r.gmoFloor, r.rssServedKB, err = serve(bin, addr, h, fmt.Sprintf("mlx5_%d", n/2), runs); err != nil {
		return r, err
	}
	if r.storm, err = perf.Storm(h, time.Second); err != nil {
		return r, err
	}
	if r.storm.Configured != n {
		return r, fmt.Errorf("boot storm: %d of %d devices configured", r.storm.Configured, n)
	}
	if r.allocs, err = measureAllocs(h, addr); err != nil {
		return r, err
	}
	return r, nil
}

// setRoCEReference is the one-port SetRoCE round trip on a 3-device host,
// the reference the 1,024-device call is held to.
func setRoCEReference(addr string, runs int) (time.Duration, error) {
	h, err := perf.NewHost(3)
	if err != nil {
		return 0, err
	}
	defer h.Remove()
	d, err := perf.StartDaemon(h, addr)
	if err != nil {
		return 0, err
	}
	defer d.Stop()
	i := 0
	return median(runs*3, func() (time.Duration, error) {
		i++
		return timed(func() error { return d.SetRoCE("mlx5_1", 1, int32(i%200)) })
	})
}

// startToName starts the rdmad binary as a daemon and measures the time
// until it owns org.rdmad1 (it takes the name after the first full pass),
// and its resident memory then.
func startToName(bin, addr string, h *perf.Host, runs int) (time.Duration, int, error) {
	conn, err := dbusapi.Dial(addr)
	if err != nil {
		return 0, 0, err
	}
	defer conn.Close()
	if err := conn.AddMatchSignal(dbus.WithMatchInterface("org.freedesktop.DBus"), dbus.WithMatchMember("NameOwnerChanged"),
		dbus.WithMatchArg(0, dbusapi.BusName)); err != nil {
		return 0, 0, err
	}
	sig := make(chan *dbus.Signal, 16)
	conn.Signal(sig)
	rss := 0
	d, err := median(runs, func() (time.Duration, error) {
		if err := h.Reset(); err != nil {
			return 0, err
		}
		cmd := exec.Command(bin, "--root", h.Root, "--bus", addr)
		t0 := time.Now()
		if err := cmd.Start(); err != nil {
			return 0, err
		}
		defer func() { cmd.Process.Kill(); cmd.Wait() }()
		timeout := time.After(60 * time.Second)
		for {
			select {
			case s := <-sig:
				if len(s.Body) == 3 && s.Body[2] != "" {
					took := time.Since(t0)
					time.Sleep(200 * time.Millisecond) // settle: background work ends
					rss = vmRSS(cmd.Process.Pid)
					return took, nil
				}
			case <-timeout:
				return 0, fmt.Errorf("rdmad did not take %s within 60s", dbusapi.BusName)
			}
		}
	})
	return d, rss, err
}

// servedIdle is how long the daemon idles after the calls before its
// resident memory is read.
const servedIdle = 5 * time.Second

// serve starts the rdmad binary as a daemon and makes the calls a client
// makes: GetManagedObjects through godbus runs times (the median round
// trip is returned: rdmad's own process, with its own runtime settings,
// encodes the reply), each followed by godbus's own work on the same
// reply in this process (perf.GodbusFloor: the floor, whose median is
// returned too), then Describe and a one-port SetRoCE; then it lets rdmad
// idle for servedIdle and reads its resident memory.
func serve(bin, addr string, h *perf.Host, dev string, runs int) (gmo, floor time.Duration, rssKB int, _ error) {
	if err := h.Reset(); err != nil {
		return 0, 0, 0, err
	}
	conn, err := dbusapi.Dial(addr)
	if err != nil {
		return 0, 0, 0, err
	}
	defer conn.Close()
	cmd := exec.Command(bin, "--root", h.Root, "--bus", addr)
	if err := cmd.Start(); err != nil {
		return 0, 0, 0, err
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	obj := conn.Object(dbusapi.BusName, dbusapi.RootPath)
	deadline := time.Now().Add(60 * time.Second)
	for {
		var owner string
		if err := conn.BusObject().Call("org.freedesktop.DBus.GetNameOwner", 0, dbusapi.BusName).Store(&owner); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return 0, 0, 0, fmt.Errorf("rdmad did not take %s within 60s", dbusapi.BusName)
		}
		time.Sleep(20 * time.Millisecond)
	}
	want := 3 * h.N
	var calls, floors []time.Duration
	for i := 0; i < runs; i++ {
		var objs perf.ManagedObjects
		d, err := timed(func() error {
			if err := obj.Call("org.freedesktop.DBus.ObjectManager.GetManagedObjects", 0).Store(&objs); err != nil {
				return fmt.Errorf("call GetManagedObjects: %w", err)
			}
			if len(objs) != want {
				return fmt.Errorf("GetManagedObjects: %d objects, want %d", len(objs), want)
			}
			return nil
		})
		if err != nil {
			return 0, 0, 0, err
		}
		f, err := timed(perf.GodbusFloor(objs))
		if err != nil {
			return 0, 0, 0, err
		}
		calls, floors = append(calls, d), append(floors, f)
	}
	var doc string
	if err := obj.Call(dbusapi.ManagerIface+".Describe", 0).Store(&doc); err != nil {
		return 0, 0, 0, fmt.Errorf("call Describe: %w", err)
	}
	if err := obj.Call(dbusapi.ManagerIface+".SetRoCE", 0, dev, uint32(1), "", int32(7), false).Err; err != nil {
		return 0, 0, 0, fmt.Errorf("call SetRoCE: %w", err)
	}
	doc = ""
	time.Sleep(servedIdle)
	return middle(calls), middle(floors), vmRSS(cmd.Process.Pid), nil
}

func vmRSS(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.Atoi(f[1])
			return kb
		}
	}
	return 0
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d)/float64(time.Millisecond)) }

func ratio(a, b time.Duration) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", float64(a)/float64(b))
}

func print(rows []row, ref time.Duration, runs int) {
	host, _ := os.Hostname()
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("rdmad performance, %s, %s, hosts in %s (every port with mlx5's counter files), median of %d runs (shell: 3 at N>=512); times in ms; load average %s\n\n",
		time.Now().Format("2006-01-02 15:04"), host, perf.TempBase(), runs, strings.Join(strings.Fields(string(load))[:3], " "))
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "N\tcold --once\tcold floor\tcold/floor\tshell loop\tshell/cold\tno-change --once\tfloor\tno-change/floor\tdaemon full pass\tdevice event\tSetRoCE 1 port\tGetManagedObjects\tgodbus floor\tGMO/floor\tstart to bus name\tRSS MB\tRSS served MB\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.1f\t%.1f\t\n", r.n,
			ms(r.cold), ms(r.coldFloor), ratio(r.cold, r.coldFloor), ms(r.shell), ratio(r.shell, r.cold),
			ms(r.noChange), ms(r.floor), ratio(r.noChange, r.floor), ms(r.daemonAll), ms(r.event), ms(r.setRoCE),
			ms(r.gmo), ms(r.gmoFloor), ratio(r.gmo, r.gmoFloor), ms(r.startName), float64(r.rssKB)/1024, float64(r.rssServedKB)/1024)
	}
	tw.Flush()
	fmt.Printf("\nboot storm (the devices arrive one by one within 1 s, each with its uevent):\n")
	for _, r := range rows {
		fmt.Printf("  N=%-5d converged %s ms after the last event; %d passes; each device configured by at most %d\n",
			r.n, ms(r.storm.Converged), r.storm.Passes, r.storm.MaxPerDev)
	}
	fmt.Printf("\nallocations (in process, least of 3 runs):\n")
	for _, r := range rows {
		fmt.Printf("  N=%-5d health monitor sample %s; no-change pass %s; GetManagedObjects round trip %s\n",
			r.n, r.allocs.sample, r.allocs.noChange, r.allocs.gmo)
	}
	fmt.Printf("\nSetRoCE 1 port on a 3-device host: %s ms\n", ms(ref))
	fmt.Println("floor: bare open/read/close of each port's link_layer, mode and TOS; cold floor: per port, read link_layer, write mode and TOS, read both back (bare system calls, one after another).")
	fmt.Println("GetManagedObjects: the round trip from a godbus client to the rdmad binary running as a daemon; godbus floor: godbus's own work on the same reply in this process (its transport's send, CountFds then EncodeTo, and a client's DecodeMessage and Store).")
	fmt.Println("sample: the health monitor reading every port's counters (after its baseline); round trip: rdmad in process, both ends' godbus work included.")
	fmt.Printf("RSS: 200 ms after the daemon took its name; RSS served: after %d GetManagedObjects, Describe and a SetRoCE, then %s idle.\n", runs, servedIdle)
	if len(rows) < 2 {
		return
	}
	first, last := rows[0], rows[len(rows)-1]
	fmt.Printf("\nscaling from N=%d to N=%d (%dx the devices): device event %s, full pass %s, SetRoCE %s\n",
		first.n, last.n, last.n/max(first.n, 1), ratio(last.event, first.event), ratio(last.daemonAll, first.daemonAll), ratio(last.setRoCE, first.setRoCE))
	fmt.Printf("\ntargets at N=%d:\n", last.n)
	check := func(ok bool, what string) {
		mark := "met"
		if !ok {
			mark = "NOT MET"
		}
		fmt.Printf("  %-7s %s\n", mark, what)
	}
	check(last.cold < 150*time.Millisecond, fmt.Sprintf("cold --once under 150 ms: %s ms", ms(last.cold)))
	check(last.cold*2 <= last.coldFloor*3, fmt.Sprintf("cold --once at most 1.5x the cold floor: %s", ratio(last.cold, last.coldFloor)))
	check(last.shell >= 50*last.cold, fmt.Sprintf("cold --once at least 50x faster than the shell loop: %s", ratio(last.shell, last.cold)))
	check(last.noChange*2 <= last.floor*3, fmt.Sprintf("no-change --once at most 1.5x the floor: %s", ratio(last.noChange, last.floor)))
	check(last.setRoCE < 10*time.Millisecond, fmt.Sprintf("one-port SetRoCE under 10 ms: %s ms", ms(last.setRoCE)))
	check(last.setRoCE <= 2*ref, fmt.Sprintf("one-port SetRoCE at most 2x a 3-device host: %s", ratio(last.setRoCE, ref)))
	check(last.gmo*5 <= last.gmoFloor*6, fmt.Sprintf("GetManagedObjects at most 1.2x godbus's floor: %s (%s ms against %s ms)", ratio(last.gmo, last.gmoFloor), ms(last.gmo), ms(last.gmoFloor)))
	check(last.startName < time.Second, fmt.Sprintf("bus name under 1 s after start: %s ms", ms(last.startName)))
	check(last.rssKB <= 30*1024, fmt.Sprintf("RSS at most 30 MB: %.1f MB", float64(last.rssKB)/1024))
	check(last.rssServedKB <= 30*1024, fmt.Sprintf("RSS after serving, %s idle, at most 30 MB: %.1f MB", servedIdle, float64(last.rssServedKB)/1024))
	if last.n >= 1024 {
		check(last.allocs.sample.bytes <= sampleTarget, fmt.Sprintf("a health monitor sample at %d devices allocates at most 1 MB: %s", last.n, last.allocs.sample))
	}
	check(last.storm.Converged < time.Second && last.storm.MaxPerDev <= 2,
		fmt.Sprintf("boot storm converges within 1 s of the last event (%s ms), each device configured once or twice (%d)", ms(last.storm.Converged), last.storm.MaxPerDev))
}
