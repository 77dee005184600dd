package events

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
)

// DefaultDebounce gathers the several events of one save (editors write a
// temp file, rename it, chmod it) into one reload.
const DefaultDebounce = 200 * time.Millisecond

// ConfigWatcher reloads the configuration when the main file or a drop-in
// changes, and asks for a full pass when a modules list changes. It watches
// directories, not files, so rename-replace saves (vim, sed -i, rdmad's own
// atomic writes) and directories created later are seen.
type ConfigWatcher struct {
	MainFile   string // absolute path of rdmad.toml
	DropInDir  string // absolute path of rdmad.d
	ModulesDir string // absolute path of the modules lists ("" to not watch)
	Debounce   time.Duration
	Reload     func() error // service.Reload: keeps the last good policy on error
	Req        Requester
	Log        *slog.Logger
	OnReady    func() // called once the initial watches are in place (tests, logs)

	runs int // a rerun after a failure reloads at once: edits may have been missed
}

type watchKind int

const (
	kindNone watchKind = iota
	kindConfig
	kindModules
)

// Run watches until ctx ends.
func (w *ConfigWatcher) Run(ctx context.Context) error {
	log := w.Log
	if log == nil {
		log = slog.Default()
	}
	debounce := w.Debounce
	if debounce <= 0 {
		debounce = DefaultDebounce
	}
	rerun := w.runs > 0
	w.runs++
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("config watcher: %w", err)
	}
	defer fw.Close()

	watched := map[string]bool{}
	w.ensureWatches(fw, watched, true, log)
	if w.OnReady != nil {
		w.OnReady()
	}

	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	var reload, rescan bool
	arm := func() {
		timer.Stop()
		timer.Reset(debounce)
	}
	if rerun {
		reload, rescan = true, true
		arm()
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-fw.Events:
			if !ok {
				return errors.New("config watcher closed")
			}
			// A directory we wait for may have appeared (rdmad.d created
			// after start), or a watched one removed: re-evaluate.
			if ev.Has(fsnotify.Create) || ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename) {
				if w.ensureWatches(fw, watched, false, log) {
					reload, rescan = true, true
					arm()
				}
			}
			switch w.classify(ev) {
			case kindConfig:
				reload = true
				arm()
			case kindModules:
				rescan = true
				arm()
			}
		case err, ok := <-fw.Errors:
			if !ok {
				return errors.New("config watcher closed")
			}
			// Overflow (IN_Q_OVERFLOW) or any watcher error: changes may
			// have been missed; reload and rescan to be sure.
			log.Warn("config watcher error; reloading to be sure", "err", err)
			reload, rescan = true, true
			arm()
		case <-timer.C:
			if reload {
				_ = w.Reload() // logged and published by the service; a success queues a full pass
			}
			if rescan {
				// Also after a failed reload: the modules lists apply
				// under the policy in force. Coalesces with the reload's pass.
				w.Req.RequestAll()
			}
			reload, rescan = false, false
		}
	}
}

// classify says what a file event means.
func (w *ConfigWatcher) classify(ev fsnotify.Event) watchKind {
	if ev.Op == fsnotify.Chmod {
		return kindNone
	}
	name := filepath.Clean(ev.Name)
	dir, base := filepath.Dir(name), filepath.Base(name)
	switch {
	case name == filepath.Clean(w.MainFile):
		return kindConfig
	case name == filepath.Clean(w.DropInDir):
		return kindConfig // the whole drop-in directory came or went
	case dir == filepath.Clean(w.DropInDir) && isVisibleWithExt(base, ".toml"):
		return kindConfig
	case w.ModulesDir != "" && name == filepath.Clean(w.ModulesDir):
		return kindModules
	case w.ModulesDir != "" && dir == filepath.Clean(w.ModulesDir) && isVisibleWithExt(base, ".conf"):
		return kindModules
	}
	return kindNone
}

// isVisibleWithExt rejects hidden files (editor swap files, rdmad's own
// atomic-write temp files) and other extensions (backups like "x.toml~").
func isVisibleWithExt(base, ext string) bool {
	return !strings.HasPrefix(base, ".") && strings.HasSuffix(base, ext) && len(base) > len(ext)
}

// ensureWatches watches each wanted directory, or its nearest existing
// ancestor while it does not exist. After the initial call it reports
// whether a wanted directory became watched (it may already hold files).
func (w *ConfigWatcher) ensureWatches(fw *fsnotify.Watcher, watched map[string]bool, initial bool, log *slog.Logger) bool {
	wanted := []string{filepath.Dir(w.MainFile), w.DropInDir}
	if w.ModulesDir != "" {
		wanted = append(wanted, w.ModulesDir)
	}
	appeared := false
	keep := map[string]bool{}
	for _, d := range wanted {
		d = filepath.Clean(d)
		target := d
		for {
			if st, err := os.Stat(target); err == nil && st.IsDir() {
				break
			}
			parent := filepath.Dir(target)
			if parent == target {
				break
			}
			target = parent
		}
		keep[target] = true
		if watched[target] {
			continue
		}
		if err := fw.Add(target); err != nil {
			log.Warn("cannot watch configuration directory", "dir", target, "err", err)
			continue
		}
		watched[target] = true
		if target == d && !initial {
			appeared = true
		}
		log.Debug("watching", "dir", target, "for", d)
	}
	for d := range watched {
		if !keep[d] {
			_ = fw.Remove(d) // may already be gone with the directory
			delete(watched, d)
		}
	}
	return appeared
}
