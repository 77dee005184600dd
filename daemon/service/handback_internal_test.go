package service

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdmad/rdmad/daemon/host/hosttest"
)

// A pass that read every device (full, or the verify read-back) hands its
// garbage back to the system; a pass over one device, or a recheck, does
// not (a correction must stay cheap).
func TestWholeHostPassesHandGarbageBack(t *testing.T) {
	var handed atomic.Int32
	count := func() { handed.Add(1) }
	handBackHook.Store(&count)
	defer handBackHook.Store(nil)
	root := hosttest.Copy(t, "mlx5")
	s, err := New(Options{Host: hosttest.NewKernel(root).Host(), Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	wait := func(want int32) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); handed.Load() != want; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("handed back %d times, want %d", handed.Load(), want)
			}
		}
	}
	s.runWork(ctx, Work{Full: true, Forced: true})
	wait(1)
	s.runWork(ctx, Work{Devices: map[string][]int{"mlx5_0": nil}})
	s.runWork(ctx, Work{Recheck: map[string]bool{"mlx5_0": true}})
	time.Sleep(50 * time.Millisecond)
	wait(1)
	s.runWork(ctx, Work{Recheck: map[string]bool{"mlx5_0": true, "mlx5_1": true}, Verify: true})
	wait(2)
}
