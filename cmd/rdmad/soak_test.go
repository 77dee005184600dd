package main_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/dbusapi"
	"github.com/rdmad/rdmad/dbusapi/client"
	"github.com/rdmad/rdmad/test/testdeps"
)

// soakDuration is SOAK_DURATION (make soak: 30s), or a few seconds for
// make test.
// minFlatRun is the shortest soak whose memory, thread and file counts are
// judged for growth.
const minFlatRun = 20 * time.Second

func soakDuration(t *testing.T) time.Duration {
	s := os.Getenv("SOAK_DURATION")
	if s == "" {
		return 3 * time.Second
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatalf("SOAK_DURATION=%q: %v", s, err)
	}
	return d
}

var (
	raceBinOnce sync.Once
	raceBin     string
	raceBinErr  error
)

// raceRdmad is rdmad built with the race detector (RDMAD_TEST_BINDIR's
// rdmad when that is set: it is run as it is).
func raceRdmad(t *testing.T) string {
	t.Helper()
	if os.Getenv("RDMAD_TEST_BINDIR") != "" {
		return rdmadBin
	}
	// -race builds with cgo: a C compiler (make test's own go test -race
	// needs one too).
	if out, err := exec.Command("go", "env", "CGO_ENABLED", "CC").Output(); err != nil || !strings.HasPrefix(string(out), "1\n") {
		testdeps.Missing(t, "cgo (go build -race)", "gcc", fmt.Errorf("go env CGO_ENABLED CC: %q, %v", out, err))
	} else if cc := strings.Fields(strings.TrimPrefix(string(out), "1\n")); len(cc) > 0 {
		testdeps.Tool(t, cc[0], "gcc")
	}
	raceBinOnce.Do(func() {
		dir, err := os.MkdirTemp("", "rdmad-race-")
		if err != nil {
			raceBinErr = err
			return
		}
		raceBin = filepath.Join(dir, "rdmad")
		if out, err := exec.Command("go", "build", "-race", "-o", raceBin, ".").CombinedOutput(); err != nil {
			raceBinErr = fmt.Errorf("go build -race: %v\n%s", err, out)
		}
	})
	if raceBinErr != nil {
		t.Fatal(raceBinErr)
	}
	return raceBin
}

// procStat reads the resident memory (KiB), threads and open files of pid.
func procStat(pid int) (rssKiB, threads, fds int) {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "VmRSS:":
			rssKiB, _ = strconv.Atoi(f[1])
		case "Threads:":
			threads, _ = strconv.Atoi(f[1])
		}
	}
	ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	return rssKiB, threads, len(ents)
}

// goroutines ends the process with SIGQUIT and counts the goroutines of
// its dump (GOTRACEBACK=all).
func goroutines(t *testing.T, p *proc) int {
	t.Helper()
	p.signal(t, syscall.SIGQUIT)
	p.exit(t, 10*time.Second)
	return len(regexp.MustCompile(`(?m)^goroutine \d+ [^\n]*\[`).FindAllString(p.logs.String(), -1))
}

// roceConfig is a drop-in declaring tos for every RoCE port.
func roceConfig(tos int) string {
	return fmt.Sprintf("[[roce]]\ndevice = \"*\"\nmode = \"v2\"\ntos = %d\n", tos)
}

// TestSoak runs the real rdmad on a private bus and the demo fixture host
// for SOAK_DURATION while 8 clients mix reads and writes, the
// configuration is rewritten (sometimes broken), SIGHUPs arrive and real
// netdevs come and go (when this user may create veth pairs). Every call
// must answer (no deadlock); at the end a declaration is put in force and
// configfs must equal it exactly; threads, files and goroutines must be
// flat. It runs twice: built with -race, where the race detector must have
// nothing to say (its own memory grows with the run, so RSS is only
// reported), and as shipped, where RSS must be flat too.
func TestSoak(t *testing.T) {
	t.Parallel() // a bus and a host of its own; the test mostly waits
	t.Run("race", func(t *testing.T) { soak(t, raceRdmad(t), false) })
	t.Run("memory", func(t *testing.T) { soak(t, rdmadBin, true) })
}

func soak(t *testing.T, bin string, checkRSS bool) {
	duration := soakDuration(t)
	root, env, _ := demoHost(t)
	env = append(env, "GOTRACEBACK=all")
	dropIn := filepath.Join(root, "etc/rdma/rdmad.d/50-roce.toml")
	hosttest.Write(t, root, "etc/rdma/rdmad.d/50-roce.toml", roceConfig(106))
	addr := privateBus(t)

	start := func(args ...string) *proc { return startBinary(t, bin, env, args...) }

	// Baseline: the goroutines of an idle rdmad on the same host.
	idle := start("--root", root, "--bus", "none")
	waitFor(t, idle, "the idle rdmad holds its lock", func() bool {
		b, _ := os.ReadFile(filepath.Join(root, host.LockFile))
		return string(b) == strconv.Itoa(idle.cmd.Process.Pid)+"\n"
	})
	time.Sleep(time.Second)
	baseline := goroutines(t, idle)

	p := start("--root", root, "--bus", addr)
	connect := func() *client.Client {
		c, err := client.Connect(addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	waitFor(t, p, "rdmad answers on the bus", func() bool {
		return exec.Command(rdmactlBin, "--bus", addr, "status").Run() == nil
	})
	admin := connect()
	pid := p.cmd.Process.Pid
	time.Sleep(500 * time.Millisecond) // background module loads end

	ctx, stop := context.WithTimeout(context.Background(), duration)
	defer stop()
	var wg sync.WaitGroup
	var calls, refused atomic.Int64
	var failMu sync.Mutex
	var failures []string
	fail := func(format string, args ...any) {
		failMu.Lock()
		defer failMu.Unlock()
		if len(failures) < 20 {
			failures = append(failures, fmt.Sprintf(format, args...))
		}
	}
	// Every call answers within callTimeout, or rdmad is wedged.
	const callTimeout = 30 * time.Second
	ports := []struct {
		dev  string
		port uint32
	}{{"mlx5_0", 1}, {"mlx5_1", 1}, {"mlx4_0", 2}, {"rxe0", 1}, {"mlx5_0", 0}}

	for i := range 8 {
		c := connect()
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(i), 7))
			for ctx.Err() == nil {
				cctx, cancel := context.WithTimeout(context.Background(), callTimeout)
				var err error
				what := ""
				switch n := r.IntN(20); {
				case n < 6:
					what = "Snapshot"
					_, err = c.Snapshot(cctx)
				case n < 9:
					what = "Describe"
					_, err = c.Describe(cctx)
				case n < 15:
					pt := ports[r.IntN(len(ports))]
					mode := []string{"", "v1", "v2"}[r.IntN(3)]
					tos := int32(r.IntN(257)) - 1
					if mode == "" && tos < 0 {
						tos = 5
					}
					what = fmt.Sprintf("SetRoCE(%s/%d, %q, %d)", pt.dev, pt.port, mode, tos)
					err = c.SetRoCE(cctx, pt.dev, pt.port, mode, tos, r.IntN(4) == 0)
				case n < 17:
					what = "Reload"
					_, err = c.Reload(cctx)
				default:
					what = "Reconcile"
					_, err = c.Reconcile(cctx)
				}
				timedOut := cctx.Err() != nil
				cancel()
				calls.Add(1)
				switch {
				case err == nil:
				case timedOut || errors.Is(err, context.DeadlineExceeded):
					fail("client %d: %s did not answer within %s: rdmad is wedged", i, what, callTimeout)
					return
				case client.ErrorName(err) == dbusapi.ErrConfig:
					refused.Add(1) // a broken config rewrite is in force
				case client.ErrorName(err) == dbusapi.ErrFailed && strings.Contains(err.Error(), "configuration"):
					refused.Add(1) // persisting reloads the broken file
				default:
					fail("client %d: %s: %v", i, what, err)
				}
			}
		}()
	}
	// Configuration rewrites (every fifth one broken), SIGHUPs, netdevs.
	wg.Add(1)
	go func() {
		defer wg.Done()
		r := rand.New(rand.NewPCG(99, 1))
		for n := 0; ctx.Err() == nil; n++ {
			content := roceConfig(r.IntN(256))
			if n%5 == 4 {
				content = "[[roce]]\ndevice = \"*\"\ntos = 900\n"
			}
			tmp := dropIn + ".swp"
			_ = os.WriteFile(tmp, []byte(content), 0o644)
			_ = os.Rename(tmp, dropIn)
			if n%2 == 0 {
				_ = p.cmd.Process.Signal(syscall.SIGHUP)
			}
			select {
			case <-ctx.Done():
			case <-time.After(time.Duration(100+r.IntN(200)) * time.Millisecond):
			}
		}
	}()
	netdevs := exec.Command("ip", "link", "add", "rdsoak0", "type", "veth", "peer", "name", "rdsoak1").Run() == nil
	if netdevs {
		exec.Command("ip", "link", "del", "rdsoak0").Run()
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer exec.Command("ip", "link", "del", "rdsoak0").Run()
			for ctx.Err() == nil {
				exec.Command("ip", "link", "add", "rdsoak0", "type", "veth", "peer", "name", "rdsoak1").Run()
				exec.Command("ip", "link", "set", "rdsoak0", "up").Run()
				exec.Command("ip", "link", "del", "rdsoak0").Run()
				time.Sleep(50 * time.Millisecond)
			}
		}()
	} else {
		t.Log("cannot create veth pairs here: no netdev events in this soak")
	}
	// Samples of memory, threads and files.
	type sample struct{ rss, threads, fds int }
	var samples []sample
	sampleDone := make(chan struct{})
	go func() {
		defer close(sampleDone)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			rss, th, fds := procStat(pid)
			samples = append(samples, sample{rss, th, fds})
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	wg.Wait()
	<-sampleDone
	for _, f := range failures {
		t.Error(f)
	}
	if !p.running() {
		t.Fatalf("rdmad died during the soak: %v", p.err)
	}

	// The final declaration: the files, then a persisted value for every
	// RoCE device, which replaces what the clients set at runtime.
	hosttest.Write(t, root, "etc/rdma/rdmad.d/50-roce.toml", roceConfig(33))
	fctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	if _, err := admin.Reload(fctx); err != nil {
		t.Fatalf("final reload: %v", err)
	}
	for _, dev := range []string{"mlx5_0", "mlx5_1", "mlx4_0", "rxe0"} {
		if err := admin.SetRoCE(fctx, dev, 0, "v1", 77, true); err != nil {
			t.Fatalf("final SetRoCE %s: %v", dev, err)
		}
	}
	if _, err := admin.Reconcile(fctx); err != nil {
		t.Fatal(err)
	}
	snap, err := admin.Snapshot(fctx)
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, d := range snap.Devices {
		for _, pt := range d.Ports {
			if pt.Transport != "roce" {
				continue
			}
			checked++
			if pt.DesiredRoCEMode != "v1" || pt.DesiredRoCETOS != 77 || pt.Error != "" {
				t.Errorf("%s/%d declared %q/%d, error %q; want v1/77", d.Name, pt.Number, pt.DesiredRoCEMode, pt.DesiredRoCETOS, pt.Error)
			}
			mode := hosttest.Read(t, root, host.ConfigfsPortPath(d.Name, int(pt.Number), "default_roce_mode"))
			tos := hosttest.Read(t, root, host.ConfigfsPortPath(d.Name, int(pt.Number), "default_roce_tos"))
			if mode != "IB/RoCE v1" || tos != "77" {
				t.Errorf("%s/%d: configfs %q/%s, declared IB/RoCE v1/77", d.Name, pt.Number, mode, tos)
			}
		}
	}
	if checked != 4 {
		t.Errorf("checked %d RoCE ports, want 4", checked)
	}

	// Flat: the last quarter of the run against the second. A few seconds
	// (make test) are mostly start-up, where growth is expected and proves
	// nothing: only a run of minFlatRun or more (make soak) is judged.
	judge := duration >= minFlatRun
	if n := len(samples); n >= 8 {
		q2, q4 := samples[n/4:n/2], samples[3*n/4:]
		peak := func(s []sample, f func(sample) int) int {
			m := 0
			for _, x := range s {
				m = max(m, f(x))
			}
			return m
		}
		rss := func(s sample) int { return s.rss }
		th := func(s sample) int { return s.threads }
		fd := func(s sample) int { return s.fds }
		t.Logf("%s over %s: %d calls (%d refused by a broken config), RSS %d -> %d KiB, threads %d -> %d, files %d -> %d",
			filepath.Base(filepath.Dir(bin))+"/"+filepath.Base(bin), duration, calls.Load(), refused.Load(), peak(q2, rss), peak(q4, rss), peak(q2, th), peak(q4, th), peak(q2, fd), peak(q4, fd))
		if judge && checkRSS && peak(q4, rss) > peak(q2, rss)*5/4+4<<10 {
			t.Errorf("memory grows: RSS peak %d KiB in the second quarter, %d KiB in the last", peak(q2, rss), peak(q4, rss))
		}
		if judge && peak(q4, fd) > peak(q2, fd)+4 {
			t.Errorf("open files grow: %d -> %d", peak(q2, fd), peak(q4, fd))
		}
		if judge && peak(q4, th) > peak(q2, th)+8 {
			t.Errorf("threads grow: %d -> %d", peak(q2, th), peak(q4, th))
		}
	}
	for _, c := range []*client.Client{admin} {
		c.Close()
	}
	time.Sleep(500 * time.Millisecond) // let the last calls' goroutines end
	if n := goroutines(t, p); n > baseline+10 {
		t.Errorf("rdmad has %d goroutines after the soak, %d when idle", n, baseline)
	} else {
		t.Logf("goroutines: %d after the soak, %d idle", n, baseline)
	}
	if strings.Contains(p.logs.String(), "DATA RACE") {
		t.Errorf("the race detector found a race:\n%s", tail(p.logs.String()[strings.Index(p.logs.String(), "WARNING: DATA RACE"):], 8000))
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
