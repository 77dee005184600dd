package host

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The configuration reader judges each file and the drop-in directory on
// the descriptor it reads, as sshd's StrictModes: root's, not writable by
// others, group-writable only by root's group; under --root DIR the
// running user's and not writable by others, group bits not judged.
func TestFilesRefuseWhatOthersCanChange(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give files to other users")
	}
	dir := filepath.Join(t.TempDir(), "rdmad.d")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(dir, "50-x.toml")
	if err := os.WriteFile(f, []byte("[netns]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	set := func(name string, mode os.FileMode, uid, gid int) {
		t.Helper()
		if err := os.Chown(name, uid, gid); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(name, mode); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		what      string
		mode      os.FileMode
		uid, gid  int
		root, usr string // "" accepted, else a part of the reason
	}{
		{"root 0644", 0o644, 0, 0, "", ""},
		{"root, group root writable", 0o664, 0, 0, "", ""},
		{"root, group 100 writable", 0o664, 0, 100, "writable by group 100", ""},
		{"writable by others", 0o666, 0, 0, "writable by others", "writable by others"},
		{"owned by uid 65534", 0o644, 65534, 0, "owned by uid 65534", "owned by uid 65534"},
	} {
		set(f, c.mode, c.uid, c.gid)
		for _, tc := range []struct {
			trust Trust
			want  string
		}{{TrustRoot, c.root}, {TrustUser, c.usr}} {
			_, err := Files{Trust: tc.trust}.ReadFile(f)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("%s, trust %d: refused: %v", c.what, tc.trust, err)
			case tc.want != "" && (!errors.Is(err, ErrUntrusted) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), f)):
				t.Errorf("%s, trust %d: %v, want a refusal naming %s and %q", c.what, tc.trust, err, f, tc.want)
			}
		}
		if _, err := (Files{}).ReadFile(f); err != nil {
			t.Errorf("%s: the parser's reader judged it: %v", c.what, err)
		}
	}
	set(f, 0o644, 0, 0)
	set(dir, 0o1777, 0, 0) // a sticky, world-writable rdmad.d: anyone can add a drop-in
	if _, err := (Files{Trust: TrustRoot}).ReadDir(dir); !errors.Is(err, ErrUntrusted) || !strings.Contains(err.Error(), "writable by others") {
		t.Errorf("rdmad.d 1777: %v", err)
	}
	set(dir, 0o755, 65534, 0)
	if _, err := (Files{Trust: TrustRoot}).ReadDir(dir); !errors.Is(err, ErrUntrusted) {
		t.Errorf("rdmad.d owned by uid 65534: %v", err)
	}
}

// A modules list is read through its judged directory without following
// a symlink: what is checked is what is read.
func TestReadTrustedFileNeverFollowsSymlinks(t *testing.T) {
	root := t.TempDir()
	h := New(root)
	mods := filepath.Join(root, "etc/rdma/modules")
	if err := os.MkdirAll(mods, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mods, "rdma.conf"), []byte("ib_core\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := h.ReadTrustedFile("etc/rdma/modules/rdma.conf"); err != nil || string(b) != "ib_core\n" {
		t.Fatalf("plain list: %q %v", b, err)
	}
	other := filepath.Join(root, "elsewhere.conf")
	if err := os.WriteFile(other, []byte("evil\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(other, filepath.Join(mods, "roce.conf")); err != nil {
		t.Fatal(err)
	}
	if _, err := h.ReadTrustedFile("etc/rdma/modules/roce.conf"); !errors.Is(err, ErrUntrusted) || !strings.Contains(err.Error(), "symlink") {
		t.Errorf("symlinked list: %v", err)
	}
	if err := os.Rename(mods, mods+".real"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(mods+".real", mods); err != nil {
		t.Fatal(err)
	}
	if _, err := h.ReadTrustedFile("etc/rdma/modules/rdma.conf"); !errors.Is(err, ErrUntrusted) || !strings.Contains(err.Error(), "symlink") {
		t.Errorf("symlinked directory: %v", err)
	}
}
