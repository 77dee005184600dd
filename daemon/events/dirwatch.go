package events

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"

	"github.com/fsnotify/fsnotify"
)

// DirWatcher watches the directories that hold the settings rdmad keeps
// (reconcile.Record.Watch: a configfs rdma_cm port directory, the
// directories of the files rdmad writes) and says which one changed. It
// watches directories, not files: configfs keeps no inode for an
// attribute, so a watch on default_roce_tos itself sees nothing when
// another process writes it, while a watch on its port directory sees
// IN_MODIFY and IN_CLOSE_WRITE naming the file; and a file replaced by a
// rename is only seen from its directory. An event only says "read this
// again": the read decides.
type DirWatcher struct {
	// Changed is told the directory (as Set gave it) where something
	// changed.
	Changed func(dir string)
	Log     *slog.Logger

	mu      sync.Mutex
	want    []string        // the directories to watch, absolute
	watched map[string]bool // those watched now
	fw      *fsnotify.Watcher
	wake    chan struct{}
}

// Set makes dirs the directories watched. While Run runs, they are
// watched when Set returns, and those watched anew are reported to Changed
// before (so a caller that waits for the work Changed asks for has its
// settings read after the watch existed); before Run, Run watches them.
// One that does not exist yet is watched once it does: Set is called again
// after every pass, and the watcher tries the missing ones then.
func (w *DirWatcher) Set(dirs []string) {
	dirs = slices.Clone(dirs)
	slices.Sort(dirs)
	dirs = slices.Compact(dirs)
	w.mu.Lock()
	w.want = dirs
	running := w.fw != nil
	w.mu.Unlock()
	if running {
		w.sync(w.logger())
		return
	}
	w.kick()
}

func (w *DirWatcher) logger() *slog.Logger {
	if w.Log == nil {
		return slog.Default()
	}
	return w.Log
}

func (w *DirWatcher) kick() {
	w.mu.Lock()
	if w.wake == nil {
		w.wake = make(chan struct{}, 1)
	}
	wake := w.wake
	w.mu.Unlock()
	select {
	case wake <- struct{}{}:
	default:
	}
}

// Watched lists the directories watched now (tests, logs).
func (w *DirWatcher) Watched() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]string, 0, len(w.watched))
	for d := range w.watched {
		out = append(out, d)
	}
	slices.Sort(out)
	return out
}

// Run watches until ctx ends.
func (w *DirWatcher) Run(ctx context.Context) error {
	log := w.logger()
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("directory watcher: %w", err)
	}
	defer fw.Close()
	w.mu.Lock()
	w.fw, w.watched = fw, map[string]bool{}
	if w.wake == nil {
		w.wake = make(chan struct{}, 1)
	}
	wake := w.wake
	w.mu.Unlock()
	w.sync(log)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
			w.sync(log)
		case ev, ok := <-fw.Events:
			if !ok {
				return errors.New("directory watcher closed")
			}
			w.event(ev)
		case err, ok := <-fw.Errors:
			if !ok {
				return errors.New("directory watcher closed")
			}
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				// Events were lost: every watched directory may have
				// changed.
				for _, d := range w.Watched() {
					w.Changed(d)
				}
				continue
			}
			log.Warn("directory watcher", "err", err)
		}
	}
}

// event reports the directory an event is about: the watched directory of
// the file named, or the watched directory itself (removed: its device
// went away, or someone removed it; the next Set watches it again once it
// is back).
func (w *DirWatcher) event(ev fsnotify.Event) {
	dir := filepath.Dir(ev.Name)
	w.mu.Lock()
	switch {
	case w.watched[ev.Name] && (ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename)):
		delete(w.watched, ev.Name)
		dir = ev.Name
	case w.watched[ev.Name]:
		dir = ev.Name
	case !w.watched[dir]:
		w.mu.Unlock()
		return
	}
	w.mu.Unlock()
	if ev.Op == fsnotify.Chmod {
		return
	}
	w.Changed(dir)
}

// sync adds the wanted directories not watched yet and removes the others.
// A directory it starts watching is reported as changed: the pass that
// named it read its settings before the watch existed, and a write in
// between (another process, right after rdmad started or the device came)
// would otherwise wait for the verify read-back.
func (w *DirWatcher) sync(log *slog.Logger) {
	var added []string
	defer func() {
		for _, d := range added {
			w.Changed(d)
		}
	}()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fw == nil {
		return
	}
	for d := range w.watched {
		if _, found := slices.BinarySearch(w.want, d); !found {
			_ = w.fw.Remove(d)
			delete(w.watched, d)
		}
	}
	for _, d := range w.want {
		if w.watched[d] {
			continue
		}
		if err := w.fw.Add(d); err == nil {
			w.watched[d] = true
			added = append(added, d)
		} else {
			log.Debug("not watched yet", "dir", d, "err", err)
		}
	}
}
