package events

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"
)

// flakySource fails its first runs, then blocks until ctx ends.
type flakySource struct {
	fails int32
	runs  atomic.Int32
	up    chan struct{}
}

func (f *flakySource) Run(ctx context.Context) error {
	if n := f.runs.Add(1); n <= f.fails {
		return fmt.Errorf("inotify: too many instances (run %d)", n)
	}
	close(f.up)
	<-ctx.Done()
	return nil
}

func TestRunAllRestartsAStoppedSource(t *testing.T) {
	restartWait = func(ctx context.Context) bool { return ctx.Err() == nil }
	defer func() { restartWait = backoff }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	src := &flakySource{fails: 2, up: make(chan struct{})}
	done := make(chan error, 1)
	go func() { done <- RunAll(ctx, slog.New(slog.DiscardHandler), map[string]Source{"config": src}) }()
	select {
	case <-src.up:
	case <-ctx.Done():
		t.Fatalf("source not restarted: %d runs", src.runs.Load())
	}
	cancel()
	err := <-done
	if src.runs.Load() != 3 {
		t.Errorf("%d runs, want 3 (two failures, then up)", src.runs.Load())
	}
	// Only the last failure of each source is kept, so a source failing for
	// weeks does not grow memory; it names its source.
	if err == nil || err.Error() != "config: inotify: too many instances (run 2)" {
		t.Errorf("RunAll err = %v; want only the last failure, named by source", err)
	}
}

// A source that fails many times leaves one error, not one per restart.
func TestRunAllKeepsOnlyTheLastErrorPerSource(t *testing.T) {
	restartWait = func(ctx context.Context) bool { return ctx.Err() == nil }
	defer func() { restartWait = backoff }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a := &flakySource{fails: 500, up: make(chan struct{})}
	b := &flakySource{fails: 1, up: make(chan struct{})}
	done := make(chan error, 1)
	go func() {
		done <- RunAll(ctx, slog.New(slog.DiscardHandler), map[string]Source{"uevent": a, "config": b})
	}()
	for _, s := range []*flakySource{a, b} {
		select {
		case <-s.up:
		case <-ctx.Done():
			t.Fatal("sources not restarted")
		}
	}
	cancel()
	err := <-done
	want := "config: inotify: too many instances (run 1)\nuevent: inotify: too many instances (run 500)"
	if err == nil || err.Error() != want {
		t.Errorf("RunAll err = %q; want %q", err, want)
	}
}
