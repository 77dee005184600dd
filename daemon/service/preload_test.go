package service_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rdmad/rdmad/daemon/compose"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/daemon/service"
)

// With [[roce]] rules, the daemon loads rdma_cm as it starts, in the
// background: the first pass finishes (READY follows it) while modprobe is
// still running, and a device arriving later finds configfs rdma_cm there
// and gets its TOS with no second load.
func TestPreloadRdmaCMAtStartWithoutDelayingTheFirstPass(t *testing.T) {
	root := hosttest.Copy(t, "rxe")
	k := hosttest.NewKernel(root)
	h := k.Host()
	// Nothing RDMA loaded yet, and no device: it arrives later.
	parked := filepath.Join(t.TempDir(), "rxe0")
	must(t, os.Rename(h.Path(host.ClassInfiniband, "rxe0"), parked))
	must(t, os.RemoveAll(h.Path(host.ConfigfsRdmaCM)))
	must(t, os.WriteFile(h.Path(host.ProcModules), []byte("configfs 16384 0 - Live 0x0\n"), 0o644))
	must(t, os.MkdirAll(h.Path("etc/rdma"), 0o755))
	must(t, os.WriteFile(h.Path("etc/rdma/rdmad.toml"), []byte("[[roce]]\ndevice = \"rxe*\"\ntos = 106\n"), 0o644))

	block := make(chan struct{})
	mp := &hosttest.Modprobe{Root: root, Block: block, OnLoad: func(m string) {
		if m == "rdma_cm" {
			_ = os.MkdirAll(h.Path(host.ConfigfsRdmaCM), 0o755)
		}
	}}
	svc, err := service.New(service.Options{Host: h, Parts: compose.Parts(compose.Kernel{Modules: mp}), Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	defer func() { cancel(); <-ran }()
	go func() { _ = svc.Run(ctx); close(ran) }()
	svc.Start()
	idle, stop := context.WithTimeout(ctx, 10*time.Second)
	defer stop()
	if err := svc.Idle(idle); err != nil {
		t.Fatalf("the first pass waited for the blocked preload: %v", err)
	}
	waitFor(t, func() bool { return len(mp.Calls()) == 1 }, "rdma_cm preload to start")
	if got := mp.Calls(); len(got) != 1 || len(got[0]) != 1 || got[0][0] != "rdma_cm" {
		t.Fatalf("modprobe calls %v, want one load of rdma_cm", got)
	}
	close(block)
	waitFor(t, func() bool { return h.Exists(host.ConfigfsRdmaCM) }, "configfs rdma_cm")

	must(t, os.Rename(parked, h.Path(host.ClassInfiniband, "rxe0")))
	svc.RequestDevice("rxe0")
	if err := svc.Idle(idle); err != nil {
		t.Fatal(err)
	}
	if got := hosttest.Read(t, root, host.ConfigfsPortPath("rxe0", 1, "default_roce_tos")); got != "106" {
		t.Errorf("rxe0/1 tos = %q, want 106", got)
	}
	for _, c := range mp.Calls()[1:] {
		for _, m := range c {
			if m == "rdma_cm" {
				t.Errorf("rdma_cm loaded again: %v", mp.Calls())
			}
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
