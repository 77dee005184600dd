package service_test

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdmad/rdmad/daemon/compose"
	"github.com/rdmad/rdmad/daemon/events"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/daemon/service"
)

// When Settle returns, the directories the first pass's records name are
// watched and the read the new watches ask for is done: the daemon hands
// its garbage back and takes its name only then.
func TestSettleWatchesAndRereadsBeforeItReturns(t *testing.T) {
	root := hosttest.Copy(t, "mlx5")
	hosttest.Write(t, root, mainFile, "[modules]\nenable = false\n[[roce]]\ndevice = \"mlx5_*\"\ntos = 106\n")
	h := hosttest.NewKernel(root).Host()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	svc, err := service.New(service.Options{Host: h, Parts: compose.Parts(compose.Kernel{Modules: &hosttest.Modprobe{}}), Log: log})
	if err != nil {
		t.Fatal(err)
	}
	var passes atomic.Int32
	svc.OnPassDone(func() { passes.Add(1) })
	dirs := &events.DirWatcher{Changed: svc.DirChanged, Log: log}
	svc.WatchDirs(dirs)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	runErr := make(chan error, 1)
	go func() { defer wg.Done(); runErr <- dirs.Run(ctx) }()
	defer func() { cancel(); wg.Wait() }()
	// The watcher runs before the first pass, as in the daemon: it
	// watches a directory set before it ran.
	probe := t.TempDir()
	dirs.Set([]string{probe})
	for deadline := time.Now().Add(5 * time.Second); !slices.Contains(dirs.Watched(), probe); time.Sleep(5 * time.Millisecond) {
		select {
		case err := <-runErr:
			t.Fatalf("the directory watcher ended: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the directory watcher did not start within 5 s")
		}
	}
	// The service's Run sets the watched directories to those its
	// records name (none yet), so it starts once the probe is seen.
	go func() { defer wg.Done(); _ = svc.Run(ctx) }()
	svc.Start()
	sctx, scancel := context.WithTimeout(ctx, 20*time.Second)
	defer scancel()
	if err := svc.Settle(sctx); err != nil {
		t.Fatal(err)
	}
	port := h.Path(host.ConfigfsPortPath("mlx5_0", 1))
	if w := dirs.Watched(); !slices.Contains(w, port) {
		t.Errorf("settled, but %s is not watched: %v", port, w)
	}
	if n := passes.Load(); n < 2 {
		t.Errorf("settled after %d passes, want the first and the read of the new watches", n)
	}
}
