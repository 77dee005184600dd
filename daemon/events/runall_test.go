package events

import (
	"context"
	"errors"
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
		return errors.New("inotify: too many instances")
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
	if err := <-done; err == nil || src.runs.Load() != 3 {
		t.Errorf("RunAll err = %v after %d runs; want the two failures reported and 3 runs", err, src.runs.Load())
	}
}
