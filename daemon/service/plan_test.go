package service_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdmad/rdmad/daemon/compose"
	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/daemon/reconcile"
	"github.com/rdmad/rdmad/daemon/service"
)

// treeDigest is every path under root with the bytes of each regular file
// and its mode: a plan must leave it as it was, byte for byte.
func treeDigest(t *testing.T, root string) string {
	t.Helper()
	var lines []string
	err := filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		line := p + " " + fi.Mode().String()
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			line += "=" + string(b)
		}
		lines = append(lines, line)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

func planned(p service.Plan, subject reconcile.Subject, setting string) *service.PlannedRecord {
	for i, r := range p.Records {
		if r.Subject == subject && r.Setting.Name == setting {
			return &p.Records[i]
		}
	}
	return nil
}

// A plan judges the files in force plus the candidate against the kernel
// and writes nothing: no configfs value, no managed file, no soft link,
// no netns switch, no drop-in, not even rdmad's state directory.
func TestPlanWritesNothing(t *testing.T) {
	e := newEnv(t, "\n[[roce]]\ndevice = \"mlx5_*\"\ntos = 106\n", nil)
	before, writes := treeDigest(t, e.root), e.k.WriteCount()
	candidate := "[[roce]]\ndevice = \"mlx5_0\"\nport = 1\ntos = 96\n\n[memlock]\ngroup = \"rdma\"\n\n" +
		"[netns]\nmode = \"exclusive\"\n\n[[link]]\nname = \"rxe9\"\ntype = \"rxe\"\nnetdev = \"eth1\"\n"
	p, err := e.svc.Plan(context.Background(), []byte(candidate), "50-ansible.toml", nil)
	if err != nil || p.Err != nil {
		t.Fatalf("plan: %v %v", err, p.Err)
	}
	if after := treeDigest(t, e.root); after != before {
		t.Errorf("plan changed the host tree")
	}
	if e.k.WriteCount() != writes {
		t.Errorf("plan wrote %d kernel attributes", e.k.WriteCount()-writes)
	}
	if m, _ := e.ns.Mode(); m != config.NetnsShared {
		t.Errorf("plan switched the netns mode to %v", m)
	}
	if calls := e.nl.Calls(); len(calls) > 0 {
		t.Errorf("plan made netlink calls %v", calls)
	}
	dropIn := filepath.Join(e.root, config.DropInDir, "50-ansible.toml")
	if want := e.h.Path(config.DropInDir) + "/50-ansible.toml"; !strings.Contains(strings.Join(p.Files, " "), want) {
		t.Errorf("files %v do not name %s", p.Files, want)
	}
	if _, err := os.Stat(dropIn); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the candidate became a file: %v", err)
	}

	tos := planned(p, reconcile.PortSubject("mlx5_0", 1), "roce_tos")
	if tos == nil {
		t.Fatalf("no mlx5_0/1 roce_tos in %+v", p.Records)
	}
	if reconcile.Text(tos.Declared) != "96" || reconcile.Text(tos.Observed) != "106" || tos.State != reconcile.Differs ||
		!errors.Is(tos.Why, reconcile.ErrReadOnly) || tos.Source.String() != dropIn+":1" {
		t.Errorf("mlx5_0/1 tos: planned %q now %q state %v why %v source %s", reconcile.Text(tos.Declared), reconcile.Text(tos.Observed), tos.State, tos.Why, tos.Source)
	}
	if reconcile.Text(tos.InForce.Declared) != "106" {
		t.Errorf("mlx5_0/1 tos in force: %q", reconcile.Text(tos.InForce.Declared))
	}
	if other := planned(p, reconcile.PortSubject("mlx5_1", 1), "roce_tos"); other == nil || other.State != reconcile.Holds {
		t.Errorf("mlx5_1/1 tos (106, holds): %+v", other)
	}
	var link, netns, memlock bool
	for _, r := range p.Records {
		switch {
		case r.Subject == reconcile.LinkSubject("rxe9"):
			link = r.State == reconcile.Differs
		case r.Setting.Key == "netns.mode":
			netns = r.State == reconcile.Differs && reconcile.Text(r.Declared) == "exclusive"
		case strings.HasPrefix(string(r.Setting.Key), "memlock"):
			memlock = memlock || r.State == reconcile.Differs
		}
	}
	if !link || !netns || !memlock {
		t.Errorf("the link (%v), the netns mode (%v) and the memlock files (%v) would change: %+v", link, netns, memlock, p.Records)
	}
}

// A candidate under the name of a drop-in in force takes its place: what
// only that drop-in declared is released.
func TestPlanReleasesWhatTheCandidateNoLongerDeclares(t *testing.T) {
	e := newEnv(t, "", func(e *env) {
		hosttest.Write(t, e.root, reconcile.BootIDFile, "4b0c2a49-3d1e-4c5f-9a77-d1e1b2c3d4e5\n")
	})
	if err := os.MkdirAll(filepath.Join(e.root, config.DropInDir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.root, config.DropInDir, "50-ansible.toml"), []byte("[[roce]]\ndevice = \"mlx5_0\"\ntos = 106\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := e.svc.Reload(); err != nil {
		t.Fatal(err)
	}
	e.svc.ReconcileNow(context.Background())
	p, err := e.svc.Plan(context.Background(), nil, "50-ansible.toml", nil)
	if err != nil || p.Err != nil {
		t.Fatalf("plan: %v %v", err, p.Err)
	}
	r := planned(p, reconcile.PortSubject("mlx5_0", 1), "roce_tos")
	// The pass would put back what rdmad found before it set 106: the
	// fixture's 0.
	if r == nil || !r.Released() || r.IsDeclared() || reconcile.Text(r.Observed) != "106" || reconcile.Text(r.InForce.Declared) != "106" || r.PutBack != "0" {
		t.Fatalf("released tos: %+v", r)
	}
	// Without a candidate, the files as they are: nothing changes.
	p, err = e.svc.Plan(context.Background(), nil, "", nil)
	if err != nil || p.Err != nil {
		t.Fatal(err, p.Err)
	}
	for _, r := range p.Records {
		if r.State != reconcile.Holds && r.State != reconcile.Inapplicable {
			t.Errorf("files in force: %s %s %v", r.Subject, r.Setting.Name, r.State)
		}
	}
}

// A candidate that does not load is a plan whose error names file:line;
// bad arguments are ArgErrors naming the argument.
func TestPlanRefusals(t *testing.T) {
	e := newEnv(t, "", nil)
	before := treeDigest(t, e.root)
	p, err := e.svc.Plan(context.Background(), []byte("[[roce]]\ndevice = \"mlx5_0\"\ntos = 900\n"), "50-x.toml", nil)
	var ce *config.Error
	if err != nil || !errors.As(p.Err, &ce) || !strings.HasSuffix(ce.Pos.String(), "rdmad.d/50-x.toml:3") {
		t.Errorf("bad value: %v, plan error %v", err, p.Err)
	}
	hostile := "a = " + strings.Repeat("[", 200000) + "\n"
	p, err = e.svc.Plan(context.Background(), []byte(hostile), "50-x.toml", nil)
	if err != nil || !errors.As(p.Err, &ce) || !strings.HasSuffix(ce.Pos.String(), "rdmad.d/50-x.toml:1") || !strings.Contains(ce.Msg, "nest") {
		t.Errorf("nested: %v, plan error %v", err, p.Err)
	}
	for _, tc := range []struct {
		cand []byte
		as   string
		arg  string
	}{
		{make([]byte, config.MaxCandidateSize+1), "50-x.toml", "candidate"},
		{[]byte("x"), "", "as"},
		{nil, "../rdmad.toml", "as"},
		{nil, "50-x.conf", "as"},
		{nil, ".50-x.toml", "as"},
	} {
		_, err := e.svc.Plan(context.Background(), tc.cand, tc.as, nil)
		var ae *service.ArgError
		if !errors.As(err, &ae) || ae.Arg != tc.arg {
			t.Errorf("Plan(%d bytes, %q) = %v, want an ArgError on %s", len(tc.cand), tc.as, err, tc.arg)
		}
	}
	if treeDigest(t, e.root) != before {
		t.Error("refused plans changed the host tree")
	}
}

// Plans read beside the passes, not behind them (the reconciler's lock is
// not theirs): plans of every kind rdmad keeps, run while passes correct
// the host and write found.json, share nothing a pass writes in place
// (run with -race), and each answers whole.
func TestPlansBesidePasses(t *testing.T) {
	f := newFleetHost(t)
	hosttest.Write(t, f.root, fleetDropIn, fleetPolicy)
	svc := f.rdmad(t)
	ctx := context.Background()
	candidate := []byte("[[roce]]\ndevice = \"mlx5_0\"\ntos = 96\n")
	done := make(chan struct{})
	var ran atomic.Int64
	var passes sync.WaitGroup
	defer func() { close(done); passes.Wait() }()
	passes.Add(1)
	go func() {
		defer passes.Done()
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			// Not hosttest.Write: t.Fatal belongs to the test's goroutine.
			if err := os.WriteFile(filepath.Join(f.root, host.ConfigfsPortPath("mlx5_0", 1, "default_roce_tos")), fmt.Appendf(nil, "%d\n", i%8), 0o644); err != nil {
				t.Error(err)
				return
			}
			svc.ReconcileNow(ctx)
			ran.Add(1)
		}
	}()
	// At least 20 plans and as many as it takes for 2 passes to run beside
	// them: without -race a plan is quick enough for 20 to end before a
	// second pass does.
	deadline := time.Now().Add(30 * time.Second) // guards a hang only
	for n := 0; n < 20 || ran.Load() < 2; n++ {
		if time.Now().After(deadline) {
			t.Fatalf("%d passes ran beside %d plans in 30 s", ran.Load(), n)
		}
		p, err := svc.Plan(ctx, candidate, "90-ansible.toml", nil)
		if err != nil || p.Err != nil {
			t.Fatalf("plan beside a pass: %v %v", err, p.Err)
		}
		r := planned(p, reconcile.PortSubject("mlx5_0", 1), "roce_tos")
		if r == nil || reconcile.Text(r.Declared) != "96" {
			t.Fatalf("plan without mlx5_0/1's TOS 96: %+v", r)
		}
		for _, name := range []string{"roce_mode", "netns_mode", "soft_link", "memlock_limits"} {
			found := false
			for _, rec := range p.Records {
				found = found || rec.Setting.Name == name
			}
			if !found {
				t.Fatalf("plan without %s", name)
			}
		}
	}
}

// A plan's pattern matches are bounded: rules whose selector has a
// pattern times the ports of the host at most service.MaxPlanGlobMatches,
// else the candidate is refused before any device is read. Rules that name
// devices exactly are not counted.
func TestPlanBoundsItsPatternMatches(t *testing.T) {
	root := t.TempDir()
	const devices = 64 // 128 ports
	if err := hosttest.Synth(root, devices); err != nil {
		t.Fatal(err)
	}
	hosttest.Write(t, root, "etc/rdma/rdmad.toml", "[modules]\nenable = false\n")
	svc, err := service.New(service.Options{Host: host.New(root), Parts: compose.Parts(compose.Kernel{Modules: &hosttest.Modprobe{}}), Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	svc.ReconcileNow(context.Background())
	rules := func(n int, device func(i int) string) []byte {
		var b strings.Builder
		for i := range n {
			fmt.Fprintf(&b, "[[roce]]\ndevice = %q\ntos = %d\n", device(i), i%256)
		}
		return []byte(b.String())
	}
	glob := func(int) string { return "mlx5_*" }
	most := service.MaxPlanGlobMatches / (2 * devices)
	_, err = svc.Plan(context.Background(), rules(most+1, glob), "50-x.toml", nil)
	var ae *service.ArgError
	if !errors.As(err, &ae) || ae.Arg != "candidate" || !strings.Contains(err.Error(), fmt.Sprintf("%d rules with a pattern", most+1)) {
		t.Errorf("a plan of %d glob rules on %d ports: %v, want an ArgError on candidate", most+1, 2*devices, err)
	}
	if p, err := svc.Plan(context.Background(), rules(most, glob), "50-x.toml", nil); err != nil || p.Err != nil || len(p.Records) != 2*devices {
		t.Errorf("a plan of %d glob rules: %v, %v, %d records", most, err, p.Err, len(p.Records))
	}
	exact := func(i int) string { return fmt.Sprintf("mlx5_%d", i%devices) }
	if p, err := svc.Plan(context.Background(), rules(2*most, exact), "50-x.toml", nil); err != nil || p.Err != nil {
		t.Errorf("a plan of %d rules naming devices exactly: %v, %v", 2*most, err, p.Err)
	}
}

// A plan keeps the runtime overlay on top of the planned files, as the
// pass after a reload does: a TOS set over D-Bus without persist still
// wins over the candidate's, and the plan neither writes it nor releases
// it.
func TestPlanKeepsRuntimeChanges(t *testing.T) {
	e := newEnv(t, "\n[[roce]]\ndevice = \"mlx5_*\"\ntos = 106\n", nil)
	ctx := context.Background()
	if err := e.svc.SetRoCE(ctx, service.RoCEChange{Device: "mlx5_0", Port: 1, TOS: 77}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ candidate, as string }{
		{"", ""},
		{"[[roce]]\ndevice = \"mlx5_0\"\ntos = 96\n", "50-ansible.toml"},
	} {
		p, err := e.svc.Plan(ctx, []byte(c.candidate), c.as, nil)
		if err != nil || p.Err != nil {
			t.Fatalf("plan %q: %v %v", c.as, err, p.Err)
		}
		r := planned(p, reconcile.PortSubject("mlx5_0", 1), "roce_tos")
		if r == nil || reconcile.Text(r.Declared) != "77" || r.Source.File != config.RuntimeFile || r.State != reconcile.Holds || r.Writes() || r.Released() {
			t.Errorf("plan %q: mlx5_0/1 tos %+v, want the runtime 77, holding, not written", c.as, r)
		}
		if r := planned(p, reconcile.PortSubject("mlx5_1", 1), "roce_tos"); r == nil || reconcile.Text(r.Declared) != "106" {
			t.Errorf("plan %q: mlx5_1/1 tos %+v, want the files' 106", c.as, r)
		}
	}
}
