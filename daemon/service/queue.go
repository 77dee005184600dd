package service

import (
	"context"
	"sort"
	"sync"
)

// Key says what to look at again: everything, or one device.
type Key string

// KeyAll asks for a full pass.
const KeyAll Key = "*"

// DeviceKey asks for a pass over one device.
func DeviceKey(name string) Key { return Key("device:" + name) }

// Queue coalesces requests: while a pass runs, any number of requests for
// the same keys collapse into one pending set, so a burst of 500 uevents for
// one device costs at most two passes. It is level-triggered: a request only
// says what to re-read, never what the state is.
type Queue struct {
	run func(ctx context.Context, all bool, devices []string)

	mu      sync.Mutex
	pending map[Key]bool
	busy    bool
	wake    chan struct{}
	idle    *sync.Cond
}

// NewQueue returns a queue that hands coalesced work to run.
func NewQueue(run func(ctx context.Context, all bool, devices []string)) *Queue {
	q := &Queue{run: run, pending: map[Key]bool{}, wake: make(chan struct{}, 1)}
	q.idle = sync.NewCond(&q.mu)
	return q
}

// Add requests work for k. It never blocks.
func (q *Queue) Add(k Key) {
	q.mu.Lock()
	q.pending[k] = true
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// Run takes pending work until ctx ends.
func (q *Queue) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			q.mu.Lock()
			q.busy = false
			q.idle.Broadcast()
			q.mu.Unlock()
			return
		case <-q.wake:
		}
		for {
			all, devices, ok := q.take()
			if !ok {
				break
			}
			q.run(ctx, all, devices)
		}
	}
}

// take removes everything pending; a full pass subsumes device passes.
func (q *Queue) take() (all bool, devices []string, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.pending) == 0 {
		q.busy = false
		q.idle.Broadcast()
		return false, nil, false
	}
	q.busy = true
	for k := range q.pending {
		if k == KeyAll {
			all = true
		} else {
			devices = append(devices, string(k[len("device:"):]))
		}
	}
	q.pending = map[Key]bool{}
	if all {
		devices = nil
	}
	sort.Strings(devices)
	return all, devices, true
}

// Idle blocks until nothing is pending or running, or ctx ends.
func (q *Queue) Idle(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() {
		q.mu.Lock()
		q.idle.Broadcast()
		q.mu.Unlock()
	})
	defer stop()
	q.mu.Lock()
	defer q.mu.Unlock()
	for (q.busy || len(q.pending) > 0) && ctx.Err() == nil {
		q.idle.Wait()
	}
	return ctx.Err()
}
