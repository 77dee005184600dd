// Package events is rdmad's live view of the host: kernel uevents,
// rtnetlink link changes and configuration file changes. Sources never carry
// state into the reconciler; each only says what to look at again, and the
// service's queue coalesces bursts into a handful of passes. Any sign of lost
// events (socket overflow, a failed subscription) is answered with a full
// rescan, which is always correct because a full pass lists and re-reads every
// device (a scoped pass reads only the devices an event named).
package events

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"
)

// backoff waits one second (or until ctx ends) before a source retries a
// failed socket or subscription, so a persistent failure does not spin.
func backoff(ctx context.Context) bool {
	t := time.NewTimer(time.Second)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// orDefaults fills in a source's optional logger and retry wait.
func orDefaults(log *slog.Logger, retry func(context.Context) bool) (*slog.Logger, func(context.Context) bool) {
	if log == nil {
		log = slog.Default()
	}
	if retry == nil {
		retry = backoff
	}
	return log, retry
}

// Source is one event source; Run blocks until ctx ends.
type Source interface {
	Run(ctx context.Context) error
}

// restartWait is how RunAll waits before restarting a source; tests shorten it.
var restartWait = backoff

// RunAll runs the sources until ctx ends and returns once all have stopped.
// A source that returns early is logged and restarted after a back-off; the
// others go on meanwhile, because the daemon stays useful (D-Bus, reload)
// without any one of them. A restarted source starts with a full look (the
// config watcher reloads, the netlink sources rescan).
func RunAll(ctx context.Context, log *slog.Logger, sources map[string]Source) error {
	if log == nil {
		log = slog.Default()
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	// Only the last error of each source is kept: a source that fails every
	// few seconds for weeks must not grow the daemon's memory.
	lastErr := make(map[string]error, len(sources))
	for name, src := range sources {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				err := src.Run(ctx)
				if ctx.Err() != nil {
					return
				}
				log.Error("event source stopped; restarting it", "source", name, "err", err)
				if err != nil {
					mu.Lock()
					lastErr[name] = fmt.Errorf("%s: %w", name, err)
					mu.Unlock()
				}
				if !restartWait(ctx) {
					return
				}
			}
		}()
	}
	wg.Wait()
	errs := make([]error, 0, len(lastErr))
	for _, name := range slices.Sorted(maps.Keys(lastErr)) {
		errs = append(errs, lastErr[name])
	}
	return errors.Join(errs...)
}

// ErrForeignSender is returned (wrapped, as a *ForeignSenderError) for a
// netlink message that did not come from the kernel: any root process can
// multicast to the uevent and rtnetlink groups, and rdmad follows the
// kernel only (as udev does). Such a message is dropped; it never means
// that events were lost.
var ErrForeignSender = errors.New("netlink message not from the kernel")

// ForeignSenderError names the port id a dropped message came from.
type ForeignSenderError struct{ Pid uint32 }

func (e *ForeignSenderError) Error() string {
	return fmt.Sprintf("events: %v (sender port id %d, the kernel's is 0): dropped", ErrForeignSender, e.Pid)
}

func (e *ForeignSenderError) Is(target error) bool { return target == ErrForeignSender }

// dropLog logs dropped foreign messages at debug level at most once per
// interval, with how many were dropped since: a flood of them must not
// flood the journal.
type dropLog struct {
	mu       sync.Mutex
	last     time.Time
	dropped  int
	interval time.Duration // 0: 10 s
}

func (d *dropLog) note(log *slog.Logger, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.dropped++
	interval := d.interval
	if interval == 0 {
		interval = 10 * time.Second
	}
	if now := time.Now(); now.Sub(d.last) >= interval {
		log.Debug("dropped netlink messages not sent by the kernel", "dropped", d.dropped, "last", err)
		d.last, d.dropped = now, 0
	}
}
