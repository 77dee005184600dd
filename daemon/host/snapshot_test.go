package host_test

import (
	"errors"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
)

// A missing file is a snapshot of nothing; a file that cannot be read is an
// error that names its path once, with the cause (not "read X: open X").
func TestSnapshot(t *testing.T) {
	root := t.TempDir()
	h := host.New(root)
	hosttest.Write(t, root, "etc/security/limits.d", "not a directory\n")
	hosttest.Write(t, root, "etc/kept.conf", "kept\n")

	if snap, err := h.Snapshot("etc/missing.conf"); err != nil || snap.Exists {
		t.Errorf("missing file: %+v, %v; want a snapshot that does not exist", snap, err)
	}
	if snap, err := h.Snapshot("etc/kept.conf"); err != nil || !snap.Exists || string(snap.Data) != "kept\n" {
		t.Errorf("kept.conf: %+v, %v", snap, err)
	}

	_, err := h.Snapshot("etc/security/limits.d/90-rdmad-memlock.conf")
	if !errors.Is(err, syscall.ENOTDIR) {
		t.Fatalf("under a file: %v, want ENOTDIR", err)
	}
	path := filepath.Join(root, "etc/security/limits.d/90-rdmad-memlock.conf")
	if n := strings.Count(err.Error(), path); n != 1 {
		t.Errorf("the error names %s %d times: %v", path, n, err)
	}
}
