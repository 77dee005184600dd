package events

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The watcher reports the watched directory when a file in it is written
// (as another process writes default_roce_tos in a configfs port
// directory), not the directories it does not watch; a directory that
// goes away is watched again once it is back and Set is called.
func TestDirWatcher(t *testing.T) {
	root := t.TempDir()
	port, files := filepath.Join(root, "ports", "1"), filepath.Join(root, "limits.d")
	for _, d := range []string{port, files} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	changed := make(chan string, 16)
	w := &DirWatcher{Changed: func(d string) { changed <- d }}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx)
	missing := filepath.Join(root, "later")
	w.Set([]string{port, files, missing})
	waitWatched(t, w, []string{files, port})
	drainDirs(changed)

	if err := os.WriteFile(filepath.Join(port, "default_roce_tos"), []byte("0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := nextDir(t, changed); got != port {
		t.Errorf("a write in %s reported %s", port, got)
	}
	drainDirs(changed)
	// A file replaced by a rename (an editor, rdmad's own writes).
	tmp := filepath.Join(files, ".x.tmp")
	os.WriteFile(tmp, []byte("x"), 0o644)
	os.Rename(tmp, filepath.Join(files, "90-rdmad-memlock.conf"))
	if got := nextDir(t, changed); got != files {
		t.Errorf("a rename in %s reported %s", files, got)
	}
	drainDirs(changed)
	// The port directory goes (the device was removed) and comes back.
	if err := os.RemoveAll(filepath.Join(root, "ports")); err != nil {
		t.Fatal(err)
	}
	if got := nextDir(t, changed); got != port {
		t.Errorf("the removal of %s reported %s", port, got)
	}
	waitWatched(t, w, []string{files})
	os.MkdirAll(port, 0o755)
	os.MkdirAll(missing, 0o755)
	w.Set([]string{port, files, missing})
	waitWatched(t, w, []string{files, missing, port})
	drainDirs(changed)
	os.WriteFile(filepath.Join(port, "default_roce_mode"), []byte("RoCE v2\n"), 0o644)
	if got := nextDir(t, changed); got != port {
		t.Errorf("after the port came back: %s", got)
	}
	// What Set no longer names is not watched.
	w.Set([]string{files})
	waitWatched(t, w, []string{files})
}

// A directory the watcher starts watching is reported once, with no
// event: the pass that named it read it before the watch existed, and a
// write in between would be missed until the verify read-back.
func TestDirWatcherReportsNewWatches(t *testing.T) {
	root := t.TempDir()
	port := filepath.Join(root, "ports", "1")
	if err := os.MkdirAll(port, 0o755); err != nil {
		t.Fatal(err)
	}
	changed := make(chan string, 16)
	w := &DirWatcher{Changed: func(d string) { changed <- d }}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx)
	w.Set([]string{port})
	if got := nextDir(t, changed); got != port {
		t.Errorf("a new watch reported %s, want %s", got, port)
	}
	// Watched already: Set again reports nothing.
	w.Set([]string{port})
	time.Sleep(100 * time.Millisecond)
	select {
	case d := <-changed:
		t.Errorf("a directory watched already was reported again: %s", d)
	default:
	}
}

func waitWatched(t *testing.T, w *DirWatcher, want []string) {
	t.Helper()
	slices.Sort(want)
	deadline := time.Now().Add(5 * time.Second)
	for !slices.Equal(w.Watched(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("watched %v, want %v", w.Watched(), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func nextDir(t *testing.T, ch chan string) string {
	t.Helper()
	select {
	case d := <-ch:
		return d
	case <-time.After(5 * time.Second):
		t.Fatal("no change reported")
	}
	return ""
}

func drainDirs(ch chan string) {
	time.Sleep(50 * time.Millisecond)
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

// While the watcher runs, Set returns with the directories watched and
// the new ones reported: the daemon waits for the reads they ask for
// before it takes its name (service.Settle).
func TestDirWatcherSetWatchesBeforeItReturns(t *testing.T) {
	root := t.TempDir()
	ports := []string{filepath.Join(root, "1"), filepath.Join(root, "2")}
	for _, p := range ports {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	var reported []string
	w := &DirWatcher{Changed: func(d string) { mu.Lock(); reported = append(reported, d); mu.Unlock() }}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx)
	waitRunning(t, w)
	w.Set(ports)
	mu.Lock()
	got := slices.Clone(reported)
	mu.Unlock()
	if !slices.Equal(w.Watched(), ports) || !slices.Equal(got, ports) {
		t.Errorf("when Set returned: watched %v, reported %v; want %v both", w.Watched(), got, ports)
	}
}

// waitRunning waits until w's Run has its watcher.
func waitRunning(t *testing.T, w *DirWatcher) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		w.mu.Lock()
		running := w.fw != nil
		w.mu.Unlock()
		if running {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the watcher did not start")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// When inotify's queue overflows, events were lost in any watched
// directory: every one is reported, the quiet ones too. The overflow is
// the kernel's own: the watcher is held inside Changed while more events
// than fs.inotify.max_queued_events (plus what fsnotify has read ahead)
// are made in one directory.
func TestDirWatcherOverflowReportsEveryDirectory(t *testing.T) {
	b, err := os.ReadFile("/proc/sys/fs/inotify/max_queued_events")
	if err != nil {
		t.Skipf("no inotify queue limit to overflow: %v", err)
	}
	limit, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || limit <= 0 || limit > 1<<17 {
		t.Skipf("fs.inotify.max_queued_events = %q: too many files to overflow it in a test", b)
	}
	root := t.TempDir()
	busy, quiet := filepath.Join(root, "busy"), filepath.Join(root, "quiet")
	for _, d := range []string{busy, quiet} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var (
		mu      sync.Mutex
		hold    bool
		held    = make(chan struct{})
		release = make(chan struct{})
		seen    = map[string]bool{}
	)
	w := &DirWatcher{Changed: func(d string) {
		mu.Lock()
		seen[d] = true
		wait := hold
		hold = false
		mu.Unlock()
		if wait {
			close(held)
			<-release
		}
	}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx)
	waitRunning(t, w)
	w.Set([]string{busy, quiet})
	mu.Lock()
	hold, seen = true, map[string]bool{}
	mu.Unlock()
	if err := os.WriteFile(filepath.Join(busy, "first"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case <-held:
	case <-time.After(5 * time.Second):
		t.Fatal("the first event was not reported")
	}
	// fsnotify reads up to 4,096 events ahead of the one it waits to hand
	// over; each created file is at least one event.
	for i := range limit + 8192 {
		f, err := os.Create(filepath.Join(busy, strconv.Itoa(i)))
		if err != nil {
			close(release)
			t.Fatal(err)
		}
		f.Close()
	}
	close(release)
	deadline := time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		done := seen[quiet]
		mu.Unlock()
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("an overflow of the inotify queue did not report %s, where nothing happened but where events may have been lost", quiet)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
