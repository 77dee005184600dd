package bus_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/rdmad/rdmad/daemon/bus"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/dbusapi"
	"github.com/rdmad/rdmad/dbusapi/client"
)

const planConfig = mlx5Config + `
[[roce]]
device = "mlx5_*"
tos = 106
`

func plannedSetting(p dbusapi.Plan, subject, name string) *dbusapi.PlannedSetting {
	for i, s := range p.Settings {
		if s.Subject.String() == subject && s.Name == name {
			return &p.Settings[i]
		}
	}
	return nil
}

// rdmactl plan through the running daemon: the files in force, then with
// a candidate on standard input as the drop-in 50-ansible.toml. Nothing
// on the host changes, byte for byte, and no drop-in appears.
func TestPlanThroughTheDaemon(t *testing.T) {
	e := newEnv(t, "mlx5", planConfig)
	before := treeDigest(t, e.root)
	code, out, errOut := rdmactl(t, e.addr, "plan")
	if code != 0 || !strings.Contains(out, "0 settings would change") {
		t.Errorf("plan of the files in force: exit %d\n%s%s", code, out, errOut)
	}
	candidate := "# rendered by Ansible\n[[roce]]\ndevice = \"mlx5_0\"\ntos = 96\n"
	code, out, errOut = rdmactlStdin(t, e.addr, candidate, "plan", "--with", "/dev/stdin", "--as", "50-ansible.toml")
	dropIn := filepath.Join(e.root, "etc/rdma/rdmad.d/50-ansible.toml")
	if code != 0 {
		t.Fatalf("plan --with /dev/stdin: exit %d\n%s%s", code, out, errOut)
	}
	row := regexpLine(out, `^mlx5_0/1 +roce_tos +106 +96 +`+regexp.QuoteMeta(dropIn)+`:2 +- +set$`)
	if row == "" {
		t.Errorf("no row setting mlx5_0/1's TOS 106 -> 96 from %s:2:\n%s", dropIn, out)
	}
	if !strings.Contains(out, "1 setting would change; none of them interrupts traffic") {
		t.Errorf("plan counts another number of changes:\n%s", out)
	}
	code, out, errOut = rdmactlStdin(t, e.addr, candidate, "-o", "json", "plan", "--with", "/dev/stdin", "--as", "50-ansible.toml")
	if code != 0 {
		t.Fatalf("-o json plan: exit %d\n%s%s", code, out, errOut)
	}
	p, err := dbusapi.DecodePlan(out)
	if err != nil {
		t.Fatal(err)
	}
	if s := plannedSetting(p, "mlx5_0/1", "roce_tos"); !p.Loads || s == nil || s.Now != "106" || s.Planned != "96" || s.Change != dbusapi.PlanSet ||
		s.InForce != "106" || s.InForceSource != filepath.Join(e.root, "etc/rdma/rdmad.toml")+":5" {
		t.Errorf("plan: %+v", p)
	}
	if after := treeDigest(t, e.root); after != before {
		t.Errorf("plan changed the host:\n%s", diffLines(before, after))
	}
	if got := e.read(t, "sys/kernel/config/rdma_cm/mlx5_0/ports/1/default_roce_tos"); got != "106" {
		t.Errorf("configfs TOS %s after a plan", got)
	}
}

// A hostile candidate is refused at its file:line by the nesting check,
// before any TOML parser; one above 1 MiB and a name that is no drop-in's
// are InvalidArgs naming the argument. Nothing changes.
func TestPlanRefusesHostileCandidates(t *testing.T) {
	e := newEnv(t, "mlx5", planConfig)
	before := treeDigest(t, e.root)
	deep := "[[roce]]\ndevice = \"mlx5_0\"\nx = " + strings.Repeat("[", 500000) + "\n"
	code, out, errOut := rdmactlStdin(t, e.addr, deep, "plan", "--with", "/dev/stdin", "--as", "50-ansible.toml")
	want := filepath.Join(e.root, "etc/rdma/rdmad.d/50-ansible.toml") + ":3: "
	if code != 1 || out != "" || !strings.Contains(errOut, want) || !strings.Contains(errOut, "nest") {
		t.Errorf("nested candidate: exit %d, want 1 and a problem at %s\n%s%s", code, want, out, errOut)
	}
	c, err := client.Connect(e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, tc := range []struct {
		name string
		cand []byte
		as   string
		arg  string
	}{
		{"oversized", bytes.Repeat([]byte("#"), dbusapi.MaxPlanCandidate+1), "50-ansible.toml", "candidate"},
		{"directory", []byte("[netns]\n"), "../rdmad.toml", "as"},
		{"not toml", []byte("[netns]\n"), "50-ansible.conf", "as"},
		{"hidden", []byte("[netns]\n"), ".50-ansible.toml", "as"},
		{"no name", []byte("[netns]\n"), "", "as"},
	} {
		_, err := c.Plan(t.Context(), tc.cand, tc.as)
		if got := client.ErrorName(err); got != dbusapi.ErrInvalidArgs {
			t.Errorf("%s: error %s %v, want InvalidArgs", tc.name, got, err)
			continue
		}
		if msg := client.ErrorMessage(err); !strings.Contains(msg, "argument "+tc.arg+":") {
			t.Errorf("%s: message %q does not name argument %s", tc.name, msg, tc.arg)
		}
	}
	// rdmactl does not send a file above the bound.
	big := filepath.Join(t.TempDir(), "big.toml")
	if err := os.WriteFile(big, bytes.Repeat([]byte("#"), dbusapi.MaxPlanCandidate+1), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := rdmactl(t, e.addr, "plan", "--with", big); code != 1 || !strings.Contains(errOut, "larger than") {
		t.Errorf("rdmactl plan with a 1 MiB + 1 file: exit %d %s", code, errOut)
	}
	if after := treeDigest(t, e.root); after != before {
		t.Errorf("refused plans changed the host:\n%s", diffLines(before, after))
	}
}

// At most bus.PlanSlots plans run at once (root may take every slot);
// the next one is Busy at once (not queued), rdmactl says so and exits 1,
// and plans work again once the others end.
func TestPlanBusyBeyondItsSlots(t *testing.T) {
	e := newEnv(t, "mlx5", planConfig)
	entered := make(chan struct{}, bus.PlanSlots)
	release := make(chan struct{})
	var once sync.Once
	e.d.srv.InPlanForTest(func() {
		entered <- struct{}{}
		<-release
	})
	defer once.Do(func() { close(release) })
	var wg sync.WaitGroup
	errs := make([]error, bus.PlanSlots)
	for i := range bus.PlanSlots {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := client.Connect(e.addr)
			if err != nil {
				errs[i] = err
				return
			}
			defer c.Close()
			_, errs[i] = c.Plan(t.Context(), nil, "")
		}()
	}
	for range bus.PlanSlots {
		select {
		case <-entered:
		case <-time.After(20 * time.Second):
			t.Fatal("the plans never started")
		}
	}
	code, out, errOut := rdmactl(t, e.addr, "plan")
	if code != 1 || out != "" || !strings.Contains(errOut, "busy") {
		t.Errorf("a plan beyond the slots: exit %d, want 1 and busy\n%s%s", code, out, errOut)
	}
	c, err := client.Connect(e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Plan(t.Context(), nil, ""); client.ErrorName(err) != dbusapi.ErrBusy {
		t.Errorf("a plan beyond the slots: %v, want %s", err, dbusapi.ErrBusy)
	}
	once.Do(func() { close(release) })
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("plan %d: %v", i, err)
		}
	}
	e.d.srv.InPlanForTest(nil)
	if code, out, errOut := rdmactl(t, e.addr, "plan"); code != 0 {
		t.Errorf("plan after the others: exit %d\n%s%s", code, out, errOut)
	}
}

// Plan's slots are per user: a uid other than root has one plan at a
// time, however many connections it uses, and one slot is always root's.
// One user holding plans makes nobody else Busy; only when the users
// beside root hold every other slot is a further user Busy, and root
// still plans. Each refused plan is counted as busy.
func TestPlanSlotsPerUser(t *testing.T) {
	e := newEnv(t, "mlx5", planConfig)
	// Users of Debian's base-passwd: the bus daemon refuses a uid
	// without a passwd entry.
	users := []uint32{nobody, 1, 2}
	if len(users) != bus.PlanSlots-1 {
		t.Fatalf("the test holds %d users' plans; rdmad keeps %d for users beside root", len(users), bus.PlanSlots-1)
	}
	entered := make(chan struct{}, len(users))
	release := make(chan struct{})
	var held atomic.Int32
	e.d.srv.InPlanForTest(func() {
		if held.Add(1) > int32(len(users)) {
			return // later plans run through
		}
		entered <- struct{}{}
		<-release
	})
	var released sync.Once
	defer released.Do(func() { close(release) })
	plan := callerSpec{Addr: e.addr, Method: "Plan", Args: argsOf(argY(nil), argS(""))}
	var waits []func() []callResult
	for i, uid := range users {
		waits = append(waits, startCaller(t, uid, plan))
		select {
		case <-entered:
		case <-time.After(20 * time.Second):
			t.Fatalf("the plan of uid %d never started: %+v", uid, waits[len(waits)-1]())
		}
		if i > 0 {
			continue
		}
		// The first user again, on another connection: Busy at once,
		// and another user is not.
		if res := callAs(t, e.addr, uid, false, "Plan", argY(nil), argS("")); res.Name != dbusapi.ErrBusy || !strings.Contains(res.Message, "the most a user has at once") {
			t.Errorf("a second plan of uid %d: %+v, want Busy", uid, res)
		}
	}
	if res := callAs(t, e.addr, 3, false, "Plan", argY(nil), argS("")); res.Name != dbusapi.ErrBusy || !strings.Contains(res.Message, "1 kept for root") {
		t.Errorf("a fourth user's plan while three users plan: %+v, want Busy", res)
	}
	if code, out, errOut := rdmactl(t, e.addr, "plan"); code != 0 {
		t.Errorf("root's plan while %d users plan: exit %d\n%s%s", len(users), code, out, errOut)
	}
	released.Do(func() { close(release) })
	for i, wait := range waits {
		if res := wait(); len(res) != 1 || res[0].Name != "" {
			t.Errorf("the plan of uid %d: %+v", users[i], res)
		}
	}
	var busy uint64
	for _, c := range e.d.srv.RefusedCalls() {
		if c.Method == "Plan" && c.Reason == bus.ReasonBusy {
			busy = c.Calls
		}
	}
	if busy != 2 {
		t.Errorf("%d refused plans counted busy, want 2: %+v", busy, e.d.srv.RefusedCalls())
	}
}

// regexpLine is the first line of out matching the pattern, "" when none.
func regexpLine(out, pattern string) string {
	re := regexp.MustCompile(pattern)
	for _, l := range strings.Split(out, "\n") {
		if re.MatchString(l) {
			return l
		}
	}
	return ""
}

// A plan whose kernel read does not answer (a driver stuck in a sysfs or
// configfs read) ends at its deadline with org.rdmad1.Error.Busy naming
// the step it was in, and holds no pass back meanwhile: a Reconcile ends
// while the plan's read still hangs. Once the read answers, plans work
// again.
func TestPlanStuckReadEndsAtItsDeadline(t *testing.T) {
	addr, k, d := startOnKernel(t, "mlx5", planConfig)
	const deadline = 300 * time.Millisecond
	d.srv.SetPlanTimeoutForTest(deadline)
	stuck := host.ConfigfsPortPath("mlx5_0", 1, "default_roce_tos")
	entered, release := make(chan struct{}), make(chan struct{})
	var first atomic.Bool
	var released sync.Once
	k.BeforeRead(func(rel string) {
		if rel == stuck && first.CompareAndSwap(false, true) {
			close(entered)
			<-release // the plan's read; the pass's reads go on
		}
	})
	defer released.Do(func() { close(release) })
	c, err := client.Connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	type answer struct {
		err  error
		took time.Duration
	}
	planned := make(chan answer, 1)
	go func() {
		start := time.Now()
		_, err := c.Plan(t.Context(), nil, "")
		planned <- answer{err, time.Since(start)}
	}()
	select {
	case <-entered:
	case <-time.After(20 * time.Second):
		t.Fatal("the plan never read the TOS")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := c.Reconcile(ctx); err != nil {
		t.Errorf("Reconcile while a plan's read hangs: %v", err)
	}
	select {
	case a := <-planned:
		var de dbus.Error
		if !errors.As(a.err, &de) || de.Name != dbusapi.ErrBusy || len(de.Body) != 1 {
			t.Fatalf("plan past its deadline: %v, want %s", a.err, dbusapi.ErrBusy)
		}
		msg, _ := de.Body[0].(string)
		for _, want := range []string{"Plan", deadline.String(), "settings of the devices"} {
			if !strings.Contains(msg, want) {
				t.Errorf("the error %q does not say %q", msg, want)
			}
		}
		if a.took > 10*time.Second {
			t.Errorf("the plan answered after %s", a.took)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the plan did not end at its deadline")
	}
	released.Do(func() { close(release) })
	d.srv.SetPlanTimeoutForTest(0)
	if code, out, errOut := rdmactl(t, addr, "plan"); code != 0 {
		t.Errorf("plan once the read answered: exit %d\n%s%s", code, out, errOut)
	}
}
