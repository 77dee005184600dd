package memlock_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/memlock"
	"github.com/rdmad/rdmad/daemon/reconcile"
)

func TestRender(t *testing.T) {
	m := &config.Memlock{Group: "rdma", Soft: config.Limit{Unlimited: true}, Hard: config.Limit{Unlimited: true}}
	if got := string(memlock.RenderLimits(m)); !strings.HasSuffix(got, "@rdma soft memlock unlimited\n@rdma hard memlock unlimited\n") || !strings.HasPrefix(got, memlock.Header) {
		t.Errorf("limits = %q", got)
	}
	if got := string(memlock.RenderSystemd(m)); !strings.Contains(got, "[Manager]\nDefaultLimitMEMLOCK=infinity\n") {
		t.Errorf("systemd = %q", got)
	}
	m = &config.Memlock{Group: "hpc", Soft: config.Limit{Bytes: 64 << 30}, Hard: config.Limit{Unlimited: true}}
	if got := string(memlock.RenderLimits(m)); !strings.Contains(got, "@hpc soft memlock 67108864\n@hpc hard memlock unlimited\n") {
		t.Errorf("limits (KiB) = %q", got)
	}
	if got := string(memlock.RenderSystemd(m)); !strings.Contains(got, "DefaultLimitMEMLOCK=68719476736:infinity\n") {
		t.Errorf("systemd soft:hard = %q", got)
	}
}

func TestApplyWritesOnceAndRemovesOwnFilesOnly(t *testing.T) {
	root := t.TempDir()
	h := host.New(root)
	p := &memlock.Part{Host: h}
	pol := &config.Policy{Memlock: &config.Memlock{Group: "rdma", Soft: config.Limit{Unlimited: true}, Hard: config.Limit{Unlimited: true}, Services: true}}
	acts := p.ApplyHost(context.Background(), &reconcile.HostRun{Policy: pol}).Actions
	if len(acts) != 2 || acts[0].Status != reconcile.Changed || acts[1].Status != reconcile.Changed {
		t.Fatalf("first: %+v", acts)
	}
	st1, _ := os.Stat(filepath.Join(root, memlock.LimitsFile))
	acts = p.ApplyHost(context.Background(), &reconcile.HostRun{Policy: pol}).Actions
	if len(acts) != 2 || acts[0].Status != reconcile.Unchanged || acts[1].Status != reconcile.Unchanged {
		t.Fatalf("second: %+v", acts)
	}
	st2, _ := os.Stat(filepath.Join(root, memlock.LimitsFile))
	if !st1.ModTime().Equal(st2.ModTime()) || !os.SameFile(st1, st2) {
		t.Error("unchanged file was rewritten")
	}

	// services = false removes rdmad's systemd drop-in.
	pol.Memlock.Services = false
	acts = p.ApplyHost(context.Background(), &reconcile.HostRun{Policy: pol}).Actions
	if _, err := os.Stat(filepath.Join(root, memlock.SystemdFile)); !os.IsNotExist(err) {
		t.Errorf("systemd drop-in still there: %v (%+v)", err, acts)
	}

	// No [memlock]: rdmad's limits file goes; an admin's file of the same name is never touched.
	if err := os.WriteFile(filepath.Join(root, memlock.SystemdFile), []byte("[Manager]\nDefaultLimitMEMLOCK=1M\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	acts = p.ApplyHost(context.Background(), &reconcile.HostRun{Policy: &config.Policy{}}).Actions
	if len(acts) != 1 || acts[0].To != "absent" || acts[0].Status != reconcile.Changed {
		t.Fatalf("remove: %+v", acts)
	}
	if _, err := os.Stat(filepath.Join(root, memlock.LimitsFile)); !os.IsNotExist(err) {
		t.Error("limits file not removed")
	}
	if b, _ := os.ReadFile(filepath.Join(root, memlock.SystemdFile)); !strings.Contains(string(b), "1M") {
		t.Error("admin's file was touched")
	}
	pol.Memlock.Services = true
	acts = p.ApplyHost(context.Background(), &reconcile.HostRun{Policy: pol}).Actions
	if acts[1].Status != reconcile.Failed || !errors.Is(acts[1].Err, host.ErrNotManaged) {
		t.Errorf("overwrite of a foreign file: %+v", acts[1])
	}
}

// The memlock part undoes its own actions: each file goes back to what it
// held, a file that did not exist is removed, a removed one comes back.
func TestUndo(t *testing.T) {
	h := host.New(t.TempDir())
	p := &memlock.Part{Host: h}
	ctx := context.Background()
	m := &config.Memlock{Group: "rdma", Soft: config.Limit{Unlimited: true}, Hard: config.Limit{Unlimited: true}, Services: true}
	acts := p.ApplyHost(ctx, &reconcile.HostRun{Policy: &config.Policy{Memlock: m}}).Actions
	for _, a := range acts {
		if err := p.Undo(ctx, a); err != nil {
			t.Fatalf("Undo(%v): %v", a, err)
		}
	}
	for _, f := range []string{memlock.LimitsFile, memlock.SystemdFile} {
		if _, err := os.Stat(h.Path(f)); !os.IsNotExist(err) {
			t.Errorf("%s after undoing its creation: %v", f, err)
		}
	}

	p.ApplyHost(ctx, &reconcile.HostRun{Policy: &config.Policy{Memlock: m}})
	before, err := os.ReadFile(h.Path(memlock.LimitsFile))
	if err != nil {
		t.Fatal(err)
	}
	m2 := *m
	m2.Group = "hpc"
	for _, pol := range []*config.Policy{{Memlock: &m2}, {}} { // a change, then a removal
		acts := p.ApplyHost(ctx, &reconcile.HostRun{Policy: pol}).Actions
		if acts[0].Kind != memlock.Limits.Kind() || acts[0].Status != reconcile.Changed {
			t.Fatalf("apply %+v: %v", pol.Memlock, acts)
		}
		if err := p.Undo(ctx, acts[0]); err != nil {
			t.Fatal(err)
		}
		if got, _ := os.ReadFile(h.Path(memlock.LimitsFile)); string(got) != string(before) {
			t.Errorf("after undo (%+v): %q, want %q", pol.Memlock, got, before)
		}
	}
}

// A file value found.json holds is put back only when its lines are what
// rdmad writes for a [memlock] the configuration accepts.
func TestFoundFilesMustBeWhatRdmadWrites(t *testing.T) {
	snap := func(s string) host.FileSnapshot { return host.FileSnapshot{Exists: true, Data: []byte(s)} }
	m := &config.Memlock{Group: "rdma", Soft: config.Limit{Bytes: 64 << 30}, Hard: config.Limit{Unlimited: true}}
	for _, tc := range []struct {
		setting *reconcile.Setting
		value   host.FileSnapshot
		ok      bool
	}{
		{memlock.Limits.Setting(), host.FileSnapshot{}, true},
		{memlock.Limits.Setting(), snap(string(memlock.RenderLimits(m))), true},
		{memlock.Limits.Setting(), snap(string(memlock.RenderLimits(m)) + "# a comment\n"), true},
		{memlock.Limits.Setting(), snap(string(memlock.RenderLimits(m)) + "* hard memlock unlimited\n"), false},
		{memlock.Limits.Setting(), snap(memlock.Header + "@* soft memlock unlimited\n@* hard memlock unlimited\n"), false},
		{memlock.Limits.Setting(), snap(memlock.Header + "@rdma soft memlock unlimited\n@rdma hard memlock 1024\n"), false}, // soft above hard
		{memlock.Limits.Setting(), snap("@rdma soft memlock unlimited\n@rdma hard memlock unlimited\n"), false},             // no header
		{memlock.Systemd.Setting(), snap(string(memlock.RenderSystemd(m))), true},
		{memlock.Systemd.Setting(), snap(string(memlock.RenderSystemd(m)) + "DefaultLimitNOFILE=infinity\n"), false},
		{memlock.Systemd.Setting(), snap(memlock.Header + "[Manager]\nDefaultLimitMEMLOCK=0\n"), false},
	} {
		if err := tc.setting.Valid(tc.value); (err == nil) != tc.ok {
			t.Errorf("%s %q: %v, want ok %v", tc.setting.Name, tc.value.Data, err, tc.ok)
		}
	}
}
