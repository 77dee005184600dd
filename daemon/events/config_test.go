package events

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/service"
)

func tosOf(p *config.Policy) int {
	for i := len(p.RoCE) - 1; i >= 0; i-- {
		if p.RoCE[i].TOS != nil {
			return *p.RoCE[i].TOS
		}
	}
	return -1
}

func roceTOS(tos string) string {
	return "[modules]\nenable = false\n\n[[roce]]\ndevice = \"mlx5_*\"\ntos = " + tos + "\n"
}

type watched struct {
	svc     *service.Service
	reloads chan struct{}
	req     chanRequester
	ctx     context.Context
	etc     string
}

func startWatcher(t *testing.T) *watched {
	t.Helper()
	root := t.TempDir()
	etc := filepath.Join(root, "etc/rdma")
	writeFile(t, filepath.Join(etc, "rdmad.toml"), roceTOS("10"))
	h := host.New(root)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	svc, err := service.New(service.Options{Host: h, Parts: serviceParts, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	w := &watched{svc: svc, reloads: make(chan struct{}, 64), req: make(chanRequester, 64), etc: etc}
	svc.OnConfigChange(func() { w.reloads <- struct{}{} })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // failure guard
	w.ctx = ctx
	ready := make(chan struct{})
	cw := &ConfigWatcher{
		MainFile: svc.ConfigFile(), DropInDir: svc.DropInDir(), ModulesDir: filepath.Join(etc, "modules"),
		Debounce: 20 * time.Millisecond, Reload: svc.Reload, Req: w.req, Log: log,
		OnReady: func() { close(ready) },
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); cw.Run(ctx) }()
	t.Cleanup(func() { cancel(); wg.Wait() })
	select {
	case <-ready:
	case <-ctx.Done():
		t.Fatal("watcher not ready")
	}
	return w
}

// until waits for reloads until cond holds.
func (w *watched) until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-w.reloads:
		case <-w.ctx.Done():
			t.Fatalf("%s: never happened (tos %d, config error %v)", what, tosOf(w.svc.PolicyInForce()), w.svc.ConfigError())
		}
	}
}

func TestConfigEditsReload(t *testing.T) {
	w := startWatcher(t)
	main := filepath.Join(w.etc, "rdmad.toml")

	// In-place edit.
	writeFile(t, main, roceTOS("20"))
	w.until(t, "in-place edit", func() bool { return tosOf(w.svc.PolicyInForce()) == 20 })

	// Bad edit: the previous policy stays in force, the error names file:line.
	writeFile(t, main, roceTOS("300"))
	w.until(t, "bad edit reported", func() bool { return w.svc.ConfigError() != nil })
	if got := tosOf(w.svc.PolicyInForce()); got != 20 {
		t.Errorf("bad edit replaced the policy: tos %d", got)
	}
	if msg := w.svc.ConfigError().Error(); !strings.Contains(msg, main+":6") {
		t.Errorf("config error %q does not name %s:6", msg, main)
	}

	// Editor-style rename-replace fixes it.
	tmp := filepath.Join(w.etc, ".rdmad.toml.swp")
	writeFile(t, tmp, roceTOS("30"))
	if err := os.Rename(tmp, main); err != nil {
		t.Fatal(err)
	}
	w.until(t, "rename-replace", func() bool { return w.svc.ConfigError() == nil && tosOf(w.svc.PolicyInForce()) == 30 })

	// rdmad.d created after start, with a drop-in.
	writeFile(t, filepath.Join(w.etc, "rdmad.d", "50-site.toml"), "[[roce]]\ndevice = \"mlx5_0\"\ntos = 40\n")
	w.until(t, "drop-in in new rdmad.d", func() bool { return tosOf(w.svc.PolicyInForce()) == 40 })

	// Removing the drop-in falls back to the main file.
	if err := os.Remove(filepath.Join(w.etc, "rdmad.d", "50-site.toml")); err != nil {
		t.Fatal(err)
	}
	w.until(t, "drop-in removed", func() bool { return tosOf(w.svc.PolicyInForce()) == 30 })
}

func TestModulesDirChangeRescans(t *testing.T) {
	w := startWatcher(t)
	// The modules directory does not exist at start: its creation and a
	// list in it are both seen.
	writeFile(t, filepath.Join(w.etc, "modules", "rdma.conf"), "ib_uverbs\n")
	for {
		select {
		case r := <-w.req:
			if r != "*" {
				t.Fatalf("request %q", r)
			}
			return
		case <-w.reloads:
			// Creating a watched directory also reloads; keep waiting for
			// the rescan request.
		case <-w.ctx.Done():
			t.Fatal("no rescan after a modules list changed")
		}
	}
}

func TestClassify(t *testing.T) {
	w := &ConfigWatcher{MainFile: "/etc/rdma/rdmad.toml", DropInDir: "/etc/rdma/rdmad.d", ModulesDir: "/etc/rdma/modules"}
	cases := map[string]watchKind{
		"/etc/rdma/rdmad.toml":                      kindConfig,
		"/etc/rdma/rdmad.d":                         kindConfig,
		"/etc/rdma/rdmad.d/50-x.toml":               kindConfig,
		"/etc/rdma/rdmad.d/.zz-rdmad.toml.tmp-1234": kindNone,
		"/etc/rdma/rdmad.d/50-x.toml~":              kindNone,
		"/etc/rdma/rdmad.d/.50-x.toml.swp":          kindNone,
		"/etc/rdma/.rdmad.toml.swp":                 kindNone,
		"/etc/rdma/other.toml":                      kindNone,
		"/etc/rdma/modules/roce.conf":               kindModules,
		"/etc/rdma/modules":                         kindModules,
		"/etc/rdma/modules/README":                  kindNone,
	}
	for name, want := range cases {
		if got := w.classify(fsnotify.Event{Name: name, Op: fsnotify.Write}); got != want {
			t.Errorf("%s: %v, want %v", name, got, want)
		}
	}
	if got := w.classify(fsnotify.Event{Name: "/etc/rdma/rdmad.toml", Op: fsnotify.Chmod}); got != kindNone {
		t.Errorf("chmod counted: %v", got)
	}
}

// A watcher restarted after a failure cannot know what changed while it was
// down: it reloads at once.
func TestConfigWatcherRerunReloads(t *testing.T) {
	dir := t.TempDir()
	var reloads atomic.Int32
	reloaded := make(chan struct{}, 4)
	cw := &ConfigWatcher{
		MainFile: filepath.Join(dir, "rdmad.toml"), DropInDir: filepath.Join(dir, "rdmad.d"),
		Debounce: time.Millisecond, Req: make(chanRequester, 8), Log: slog.New(slog.DiscardHandler),
		Reload: func() error { reloads.Add(1); reloaded <- struct{}{}; return nil },
	}
	first, stop := context.WithCancel(context.Background())
	stop()
	cw.Run(first) // returns at once: cancelled
	if reloads.Load() != 0 {
		t.Fatalf("first run reloaded %d times without any change", reloads.Load())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go cw.Run(ctx)
	select {
	case <-reloaded:
	case <-ctx.Done():
		t.Fatal("rerun did not reload")
	}
}
