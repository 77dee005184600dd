package service

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host"
)

func samplePersisted() config.Persisted {
	tos := 106
	var p config.Persisted
	p.Netns = config.NetnsExclusive
	p.SetRoCE(config.Selector{Device: config.Exact("mlx5_0")}, 1, config.RoCEv2, &tos)
	p.AddLink(config.Link{Name: "rxe0", Type: config.LinkRXE, Netdev: "eth1"})
	return p
}

func inode(t *testing.T, name string) uint64 {
	t.Helper()
	st, err := os.Stat(name)
	if err != nil {
		t.Fatal(err)
	}
	return st.Sys().(*syscall.Stat_t).Ino
}

// rdmad's drop-in is written atomically (rename over), only when it
// changes, world-readable, and removed when nothing is left to persist.
func TestWritePersistedSkipsUnchangedAndReplacesAtomically(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "rdmad.d") // created on first write
	name := config.PersistedPath(dir)
	if err := writePersisted(name, config.Persisted{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(name); !os.IsNotExist(err) {
		t.Fatalf("an empty Persisted created %s (err %v)", name, err)
	}
	p := samplePersisted()
	if err := writePersisted(name, p); err != nil {
		t.Fatal(err)
	}
	first := inode(t, name)
	if err := writePersisted(name, samplePersisted()); err != nil {
		t.Fatal(err)
	}
	if inode(t, name) != first {
		t.Errorf("unchanged content was rewritten")
	}
	zero := 0
	p.SetRoCE(config.Selector{Device: config.Exact("mlx5_0")}, 1, "", &zero)
	if err := writePersisted(name, p); err != nil {
		t.Fatal(err)
	}
	if inode(t, name) == first {
		t.Errorf("changed content was written in place, not renamed over")
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("temporary files left behind: %v", ents)
	}
	if st, _ := os.Stat(name); st.Mode().Perm() != 0o644 {
		t.Errorf("mode = %v, want 0644", st.Mode().Perm())
	}
	if err := writePersisted(name, config.Persisted{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(name); !os.IsNotExist(err) {
		t.Errorf("empty Persisted left %s (%v)", name, err)
	}
}

func TestWritePersistedRefusesInvalidSettings(t *testing.T) {
	name := config.PersistedPath(t.TempDir())
	bad := config.Persisted{Links: []config.Link{{Name: "rxe0", Type: "roce", Netdev: "eth0"}}}
	var ce *ConfigError
	if err := writePersisted(name, bad); !errors.As(err, &ce) {
		t.Errorf("writePersisted(invalid) = %v, want a ConfigError", err)
	}
	if _, err := os.Stat(name); !os.IsNotExist(err) {
		t.Errorf("an invalid Persisted was written")
	}
}

// rdmad never rewrites, nor removes, a file it does not own, even one with
// its drop-in's name.
func TestWritePersistedRefusesForeignFile(t *testing.T) {
	for _, content := range []string{"# mine\n[[roce]]\ndevice = \"mlx5_0\"\ntos = 3\n", ""} {
		name := config.PersistedPath(t.TempDir())
		if err := os.WriteFile(name, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		err := writePersisted(name, samplePersisted())
		if err == nil || !strings.Contains(err.Error(), name) || !errors.Is(err, host.ErrNotManaged) {
			t.Errorf("writePersisted over a foreign file = %v, want an error naming %s", err, name)
		}
		if err := writePersisted(name, config.Persisted{}); err != nil {
			t.Errorf("emptying over a foreign file = %v, want it left alone quietly", err)
		}
		if b, err := os.ReadFile(name); err != nil || string(b) != content {
			t.Errorf("foreign file changed: %q, %v", b, err)
		}
	}
}
