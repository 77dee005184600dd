package host

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The one write path refuses a parent directory that is a symlink (swapped
// in after a first write, or from the start) and one owned by another
// user, and never follows a symlink in place of the file; a managed file
// without the header is refused at every replace.
func TestWriteFileRefusesUnsafeDirectories(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "d")
	name := filepath.Join(dir, "f.conf")
	const header = "# rdmad test header\n"
	if _, err := WriteFile(name, []byte(header+"1\n"), 0o644, WriteOptions{Header: header}); err != nil {
		t.Fatal(err)
	}

	// The directory swapped for a symlink.
	target := filepath.Join(base, "target")
	if err := os.Mkdir(target, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(dir, dir+".real"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, dir); err != nil {
		t.Fatal(err)
	}
	for what, err := range map[string]error{
		"write": func() error {
			_, err := WriteFile(name, []byte(header+"2\n"), 0o644, WriteOptions{Header: header})
			return err
		}(),
		"atomic": WriteFileAtomic(name, []byte("x"), 0o644),
		"remove": func() error { _, err := RemoveManaged(name, ""); return err }(),
	} {
		if !errors.Is(err, ErrUnsafeDir) || !strings.Contains(err.Error(), "symlink") {
			t.Errorf("%s through a symlinked directory: %v", what, err)
		}
	}
	if ents, _ := os.ReadDir(target); len(ents) != 0 {
		t.Errorf("written through the symlink: %v", ents)
	}
	os.Remove(dir)
	if err := os.Rename(dir+".real", dir); err != nil {
		t.Fatal(err)
	}

	// A symlink, or a foreign file, in place of the file: left alone.
	victim := filepath.Join(target, "victim")
	if err := os.WriteFile(victim, []byte(header+"victim\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Remove(name)
	if err := os.Symlink(victim, name); err != nil {
		t.Fatal(err)
	}
	if _, err := WriteFile(name, []byte(header+"3\n"), 0o644, WriteOptions{Header: header}); !errors.Is(err, ErrNotManaged) {
		t.Errorf("replacing a symlink: %v, want ErrNotManaged", err)
	}
	if b, _ := os.ReadFile(victim); string(b) != header+"victim\n" {
		t.Errorf("the symlink's target changed: %q", b)
	}
	os.Remove(name)
	if err := os.WriteFile(name, []byte("admin's\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := WriteFile(name, []byte(header+"4\n"), 0o644, WriteOptions{Header: header}); !errors.Is(err, ErrNotManaged) {
		t.Errorf("replacing a foreign file: %v, want ErrNotManaged", err)
	}

	// A directory owned by another user; with ParentOwner, one owned by
	// its parent's owner (an exporter's directory in its home).
	if os.Geteuid() != 0 {
		t.Skip("chown needs root")
	}
	home := filepath.Join(base, "home")
	other := filepath.Join(home, "textfile")
	if err := os.MkdirAll(other, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(other, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(other, "rdmad.prom")
	if _, err := WriteFile(f, []byte(header), 0o644, WriteOptions{Header: header}); !errors.Is(err, ErrUnsafeDir) || !strings.Contains(err.Error(), "uid 65534") {
		t.Errorf("directory of uid 65534: %v", err)
	}
	if _, err := WriteFile(f, []byte(header), 0o644, WriteOptions{Header: header, ParentOwner: true}); !errors.Is(err, ErrUnsafeDir) {
		t.Errorf("ParentOwner with a root-owned parent: %v", err)
	}
	if err := os.Chown(home, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if _, err := WriteFile(f, []byte(header), 0o644, WriteOptions{Header: header, ParentOwner: true}); err != nil {
		t.Errorf("ParentOwner with the parent's owner: %v", err)
	}
}

// The instance lock is taken through the same checked directory: a
// symlink in place of run/rdmad is refused, not followed.
func TestLockInstanceRefusesASymlinkedDirectory(t *testing.T) {
	root := t.TempDir()
	elsewhere := filepath.Join(root, "elsewhere")
	if err := os.MkdirAll(elsewhere, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "run"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, filepath.Join(root, filepath.Dir(LockFile))); err != nil {
		t.Fatal(err)
	}
	l, err := New(root).LockInstance()
	if !errors.Is(err, ErrUnsafeDir) {
		l.Release()
		t.Fatalf("lock through a symlinked directory: %v", err)
	}
	if ents, _ := os.ReadDir(elsewhere); len(ents) != 0 {
		t.Errorf("lock file created through the symlink: %v", ents)
	}
}
