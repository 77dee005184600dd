package host_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/rdmad/rdmad/daemon/host"
)

func TestLockInstanceIsExclusive(t *testing.T) {
	h := host.New(t.TempDir())
	first, err := h.LockInstance()
	if err != nil {
		t.Fatal(err)
	}
	_, err = h.LockInstance()
	if !errors.Is(err, host.ErrLocked) {
		t.Fatalf("second lock: %v, want ErrLocked", err)
	}
	if want := fmt.Sprintf("pid %d", os.Getpid()); !strings.Contains(err.Error(), want) {
		t.Errorf("second lock error %q does not name the holder (%s)", err, want)
	}
	if err := first.Release(); err != nil {
		t.Fatal(err)
	}
	again, err := h.LockInstance()
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	again.Release()
}

func TestLockInstanceRefusesAFIFO(t *testing.T) {
	root := t.TempDir()
	name := filepath.Join(root, host.LockFile)
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(name, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := host.New(root).LockInstance(); !errors.Is(err, host.ErrNotRegular) {
		t.Fatalf("lock on a FIFO: %v, want ErrNotRegular", err)
	}
}

func TestRemoveStaleTempsRemovesOnlyThatFilesTemps(t *testing.T) {
	dir := t.TempDir()
	name := filepath.Join(dir, "rdmad-persisted.toml")
	for _, f := range []string{
		"rdmad-persisted.toml",               // the file itself
		".rdmad-persisted.toml.tmp-123456",   // stale temps
		".rdmad-persisted.toml.tmp-abc",      //
		".rdmad-persisted.toml.tmp-",         // not a CreateTemp name
		".other.toml.tmp-123",                // another file's temp
		"rdmad-persisted.toml.tmp-1",         // not hidden: not ours
		".rdmad-persisted.toml.swp",          // an editor's
		".rdmad-persisted.toml.tmp-9/inside", // a directory with that name
	} {
		p := filepath.Join(dir, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(dir, ".rdmad-persisted.toml.tmp-link")); err != nil {
		t.Fatal(err)
	}
	removed, err := host.RemoveStaleTemps(name)
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(removed)
	want := []string{filepath.Join(dir, ".rdmad-persisted.toml.tmp-123456"), filepath.Join(dir, ".rdmad-persisted.toml.tmp-abc")}
	if strings.Join(removed, " ") != strings.Join(want, " ") {
		t.Errorf("removed %v, want %v", removed, want)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 7 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("left %v", names)
	}
	if r, err := host.RemoveStaleTemps(filepath.Join(dir, "missing-dir", "x")); err != nil || r != nil {
		t.Errorf("missing directory: %v %v", r, err)
	}
}

// crashChildEnv makes the test binary, run again as a child, kill itself
// inside WriteFileAtomic between the temp write and the rename.
const crashChildEnv = "RDMAD_TEST_CRASH_BEFORE_RENAME"

func TestMain(m *testing.M) {
	if name := os.Getenv(crashChildEnv); name != "" {
		host.SetBeforeRename(func(string) { _ = syscall.Kill(os.Getpid(), syscall.SIGKILL) })
		_ = host.WriteFileAtomic(name, []byte("new content\n"), 0o644)
		os.Exit(3) // not reached: the seam kills the process
	}
	os.Exit(m.Run())
}

// A crash (SIGKILL) between writing the temp file and renaming it leaves
// the old file whole, and only a temp file, which the next start removes.
func TestCrashBetweenTempWriteAndRenameKeepsTheOldFile(t *testing.T) {
	dir := t.TempDir()
	name := filepath.Join(dir, "rdmad-persisted.toml")
	if err := host.WriteFileAtomic(name, []byte("old content\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+name)
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ProcessState.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child did not die by SIGKILL: %v", err)
	}
	if b, _ := os.ReadFile(name); string(b) != "old content\n" {
		t.Errorf("after the crash the file holds %q", b)
	}
	temps, _ := filepath.Glob(filepath.Join(dir, ".rdmad-persisted.toml.tmp-*"))
	if len(temps) != 1 {
		t.Fatalf("temp files after the crash: %v", temps)
	}
	if b, _ := os.ReadFile(temps[0]); string(b) != "new content\n" {
		t.Errorf("temp holds %q", b)
	}
	removed, err := host.RemoveStaleTemps(name)
	if err != nil || len(removed) != 1 {
		t.Fatalf("RemoveStaleTemps: %v %v", removed, err)
	}
	if _, err := os.Stat(temps[0]); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale temp still there: %v", err)
	}
}

// smallFS mounts a tmpfs of size bytes on a new directory (root only; the
// test is skipped where mounting is not allowed).
func smallFS(t *testing.T, size int) string {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0755", size)); err != nil {
		t.Skipf("cannot mount a tmpfs here (%v): needs root", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	return dir
}

// Disk full and read-only file systems: the write fails with the kernel's
// error, the old file stays whole and no temp file is left behind.
func TestWriteFileAtomicOnFullOrReadOnlyFS(t *testing.T) {
	dir := smallFS(t, 64<<10)
	name := filepath.Join(dir, "rdmad-persisted.toml")
	old := []byte("old content\n")
	if err := host.WriteFileAtomic(name, old, 0o644); err != nil {
		t.Fatal(err)
	}
	check := func(what string, want syscall.Errno, err error) {
		t.Helper()
		if !errors.Is(err, want) {
			t.Errorf("%s: err %v, want %v", what, err, want)
		}
		if b, _ := os.ReadFile(name); string(b) != string(old) {
			t.Errorf("%s: file now holds %d bytes %.20q", what, len(b), b)
		}
		if temps, _ := filepath.Glob(filepath.Join(dir, ".rdmad-persisted.toml.tmp-*")); len(temps) != 0 {
			t.Errorf("%s: temp files left: %v", what, temps)
		}
	}
	check("too large for the file system", syscall.ENOSPC, host.WriteFileAtomic(name, make([]byte, 128<<10), 0o644))

	fill, err := os.Create(filepath.Join(dir, "fill"))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = fill.Write(make([]byte, 64<<10)) // fills what is left
	fill.Close()
	check("full file system", syscall.ENOSPC, host.WriteFileAtomic(name, []byte("a little\n"), 0o644))
	os.Remove(filepath.Join(dir, "fill"))

	if err := syscall.Mount("", dir, "", syscall.MS_REMOUNT|syscall.MS_RDONLY, ""); err != nil {
		t.Fatalf("remount read-only: %v", err)
	}
	check("read-only file system", syscall.EROFS, host.WriteFileAtomic(name, []byte("new\n"), 0o644))
}
