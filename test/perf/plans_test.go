package perf

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rdmad/rdmad/dbusapi"
	"github.com/rdmad/rdmad/dbusapi/client"
	"github.com/rdmad/rdmad/test/bustest"
)

// plannerEnv makes this test binary, run again as an unprivileged uid, the
// user of BenchmarkSetRoCEBesidePlans who keeps Plan busy.
const plannerEnv = "RDMAD_PERF_PLANNER"

// plannerSpec is what the planner does: Conns connections, each calling
// Plan with a candidate of Kind ("refused": more pattern rules than a plan
// matches at 1,024 devices; "admitted": as many as it does) in a loop,
// until it is killed. It prints one line per answer: "ok", or the error's
// name.
type plannerSpec struct {
	Addr  string
	Kind  string
	Conns int
}

// planCandidate is a drop-in of about 1 MiB. "refused" is 4,304 rules with
// a 246-byte pattern each (a plan of it would make 8.8 million pattern
// matches at 2,048 ports); "admitted" has as many such rules as a plan
// matches at 2,048 ports (512), the rest rules naming a device exactly.
func planCandidate(kind string, devices int) []byte {
	var b strings.Builder
	long := "*" + strings.Repeat("[a-z]*", 40) // no device name matches it, after a walk through every position
	for i := 0; b.Len() < 1<<20-300; i++ {
		device := long
		if kind == "admitted" && i >= 512 {
			device = fmt.Sprintf("mlx5_%d", i%devices)
		}
		fmt.Fprintf(&b, "[[roce]]\ndevice = %q\ntos = %d\n\n", device, i%256)
	}
	return []byte(b.String())
}

func runPlanner(spec string) int {
	var s plannerSpec
	if err := json.Unmarshal([]byte(spec), &s); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	candidate := planCandidate(s.Kind, 1024)
	var out sync.Mutex
	var wg sync.WaitGroup
	for range s.Conns {
		conn, err := dbusapi.Dial(s.Addr)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			obj := conn.Object(dbusapi.BusName, dbusapi.RootPath)
			for {
				var doc string
				err := obj.Call(dbusapi.ManagerIface+".Plan", 0, candidate, "90-plan.toml").Store(&doc)
				res := "ok"
				if err != nil {
					if res = client.ErrorName(err); res == "" {
						res = err.Error()
					}
				}
				out.Lock()
				fmt.Println(res)
				out.Unlock()
			}
		}()
	}
	wg.Wait()
	return 0
}

// publicBinary copies this test binary where an unprivileged uid can run
// it.
func publicBinary(b *testing.B) string {
	self, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	data, err := os.ReadFile(self)
	if err != nil {
		b.Fatal(err)
	}
	dir := bustest.PublicDir(b)
	bin := filepath.Join(dir, "planner")
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		b.Fatal(err)
	}
	return bin
}

// answers counts the planner's answers by kind.
type answers struct {
	mu sync.Mutex
	n  map[string]int
}

func (a *answers) Write(p []byte) (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, l := range strings.Split(strings.TrimSpace(string(p)), "\n") {
		if l != "" {
			a.n[l]++
		}
	}
	return len(p), nil
}

// BenchmarkSetRoCEBesidePlans is root's SetRoCE on one port at 1,024
// devices while an unprivileged user (uid 65534) keeps 4 connections
// calling Plan with a 1 MiB candidate, one plan after another: with
// "refused" candidates (more pattern rules than a plan matches: each is
// parsed, then refused) and with "admitted" ones (worked out whole, on one
// CPU). It reports the SetRoCE round trip (ms/op, p50-ms, p99-ms, max-ms)
// and what the user's plans got per second; root's own plan during the
// run must be served (not Busy). Idle, the same round trip is
// BenchmarkSetRoCEPort. Run it as root (the user is another uid), with
// GOMAXPROCS set to the CPUs it may use.
func BenchmarkSetRoCEBesidePlans(b *testing.B) {
	if os.Getuid() != 0 {
		b.Skip("needs root to run the planning user as another uid")
	}
	const n = 1024
	h := hosts[n]
	if h == nil {
		var err error
		if h, err = NewHost(n); err != nil {
			b.Fatal(err)
		}
		hosts[n] = h
	}
	if err := h.Reset(); err != nil {
		b.Fatal(err)
	}
	addr := bustest.Start(b)
	d, err := StartDaemon(h, addr)
	if err != nil {
		b.Fatal(err)
	}
	defer d.Stop()
	bin := publicBinary(b)
	for _, kind := range []string{"refused", "admitted"} {
		b.Run("plans="+kind, func(b *testing.B) {
			spec, _ := json.Marshal(plannerSpec{Addr: addr, Kind: kind, Conns: 4})
			cmd := exec.Command(bin, "-test.run=^$", "-test.bench=^$")
			cmd.Env = append(os.Environ(), plannerEnv+"="+string(spec))
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
			cmd.Dir = "/"
			got := &answers{n: map[string]int{}}
			var stderr strings.Builder
			cmd.Stdout, cmd.Stderr = got, &stderr
			if err := cmd.Start(); err != nil {
				b.Fatal(err)
			}
			defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
			// The user's plans are under way before the clock starts.
			for deadline := time.Now().Add(30 * time.Second); ; {
				got.mu.Lock()
				started := len(got.n) > 0
				got.mu.Unlock()
				if started {
					break
				}
				if time.Now().After(deadline) {
					b.Fatalf("the user's plans never answered: %s", stderr.String())
				}
				time.Sleep(50 * time.Millisecond)
			}
			var rootPlan atomic.Value
			go func() {
				var doc string
				err := d.Client.Object(dbusapi.BusName, dbusapi.RootPath).Call(dbusapi.ManagerIface+".Plan", 0, []byte{}, "").Store(&doc)
				rootPlan.Store(fmt.Sprint(err))
			}()
			dev := fmt.Sprintf("mlx5_%d", n/2)
			took := make([]time.Duration, 0, b.N)
			start := time.Now()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				if err := d.SetRoCE(dev, 1, int32(i%200)); err != nil {
					b.Fatal(err)
				}
				took = append(took, time.Since(t0))
			}
			b.StopTimer()
			elapsed := time.Since(start)
			for deadline := time.Now().Add(60 * time.Second); rootPlan.Load() == nil && time.Now().Before(deadline); {
				time.Sleep(10 * time.Millisecond)
			}
			if got := rootPlan.Load(); got != "<nil>" {
				b.Errorf("root's plan beside the user's: %v", got)
			}
			slices.Sort(took)
			ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
			b.ReportMetric(ms(took[len(took)/2]), "p50-ms")
			b.ReportMetric(ms(took[len(took)*99/100]), "p99-ms")
			b.ReportMetric(ms(took[len(took)-1]), "max-ms")
			got.mu.Lock()
			defer got.mu.Unlock()
			for name, c := range got.n {
				label := name
				if i := strings.LastIndex(name, "."); i >= 0 {
					label = name[i+1:]
				}
				b.ReportMetric(float64(c)/elapsed.Seconds(), "plan-"+strings.ToLower(label)+"/s")
			}
		})
	}
}
