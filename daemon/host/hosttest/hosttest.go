// Package hosttest gives tests a private copy of a fixture host from
// test/hosts and a kernel-like AttrIO that refuses values the way configfs
// does, which plain fixture files cannot.
package hosttest

import (
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/rdmad/rdmad/daemon/host"
)

// RepoRoot is the repository's top directory.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", ".."))
}

// FixtureDir is the checked-in tree of a fixture host ("mlx5", "demo"...).
func FixtureDir(name string) string {
	return filepath.Join(RepoRoot(), "test", "hosts", name)
}

// Copy copies fixture host name into a new temporary directory and returns
// its root. Symlinks are copied as links so sysfs layouts stay intact.
func Copy(t testing.TB, name string) string {
	t.Helper()
	dst := t.TempDir()
	if err := CopyTree(FixtureDir(name), dst); err != nil {
		t.Fatalf("copy fixture %s: %v", name, err)
	}
	return dst
}

// CopyTree copies src into dst (which may exist), keeping symlinks.
func CopyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		out := filepath.Join(dst, rel)
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(target, out)
		case d.IsDir():
			return os.MkdirAll(out, 0o755)
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return os.WriteFile(out, b, 0o644)
		}
	})
}

// Kernel is an AttrIO over a fixture tree that behaves like configfs where
// it matters to rdmad: writes of refused values fail with an errno, mkdir of
// rdma_cm/<dev> creates the port attributes (or ENODEV for an unknown
// device), and every write is counted.
type Kernel struct {
	Root string

	mu      sync.Mutex
	refuse  map[string]syscall.Errno // "<path suffix>=<value>" -> errno
	ignore  map[string]bool          // "<path suffix>=<value>": accepted but not kept
	Writes  []string                 // "<path relative to root>=<value>", in order
	Mkdirs  []string
	DefMode string // default_roce_mode a new configfs port starts with
}

// NewKernel returns a Kernel over root.
func NewKernel(root string) *Kernel {
	return &Kernel{Root: root, refuse: map[string]syscall.Errno{}, ignore: map[string]bool{}, DefMode: "RoCE v2"}
}

// Host returns a host.Host that uses k.
func (k *Kernel) Host() *host.Host { return host.NewWithIO(k.Root, k) }

// Refuse makes writes of value to paths ending in suffix fail with errno,
// e.g. Refuse("rxe0/ports/1/default_roce_mode", "IB/RoCE v1", syscall.EIO).
func (k *Kernel) Refuse(suffix, value string, errno syscall.Errno) {
	k.mu.Lock()
	k.refuse[suffix+"="+value] = errno
	k.mu.Unlock()
}

// Ignore makes writes of value to suffix succeed without changing the file.
func (k *Kernel) Ignore(suffix, value string) {
	k.mu.Lock()
	k.ignore[suffix+"="+value] = true
	k.mu.Unlock()
}

// WriteCount is how many attribute writes happened.
func (k *Kernel) WriteCount() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.Writes)
}

func (k *Kernel) rel(name string) string {
	r, err := filepath.Rel(k.Root, name)
	if err != nil {
		return name
	}
	return filepath.ToSlash(r)
}

// ReadFile implements host.AttrIO.
func (k *Kernel) ReadFile(name string) ([]byte, error) { return os.ReadFile(name) }

// WriteFile implements host.AttrIO.
func (k *Kernel) WriteFile(name string, data []byte) error {
	rel := k.rel(name)
	val := strings.TrimRight(string(data), "\n")
	k.mu.Lock()
	k.Writes = append(k.Writes, rel+"="+val)
	var errno syscall.Errno
	ignored := false
	for key, e := range k.refuse {
		suffix, v, _ := strings.Cut(key, "=")
		if strings.HasSuffix(rel, suffix) && v == val {
			errno = e
		}
	}
	for key := range k.ignore {
		suffix, v, _ := strings.Cut(key, "=")
		if strings.HasSuffix(rel, suffix) && v == val {
			ignored = true
		}
	}
	k.mu.Unlock()
	if errno != 0 {
		return &os.PathError{Op: "write", Path: name, Err: errno}
	}
	if ignored {
		return nil
	}
	return host.OSAttrIO{}.WriteFile(name, data)
}

// Mkdir implements host.AttrIO: configfs rdma_cm/<dev> gets its ports.
func (k *Kernel) Mkdir(name string) error {
	rel := k.rel(name)
	k.mu.Lock()
	k.Mkdirs = append(k.Mkdirs, rel)
	k.mu.Unlock()
	dev, ok := strings.CutPrefix(rel, host.ConfigfsRdmaCM+"/")
	if !ok || strings.Contains(dev, "/") {
		return os.Mkdir(name, 0o755)
	}
	ports, err := os.ReadDir(filepath.Join(k.Root, host.ClassInfiniband, dev, "ports"))
	if err != nil {
		return &os.PathError{Op: "mkdir", Path: name, Err: syscall.ENODEV}
	}
	if err := os.Mkdir(name, 0o755); err != nil {
		return err
	}
	for _, p := range ports {
		dir := filepath.Join(name, "ports", p.Name())
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, "default_roce_mode"), []byte(k.DefMode+"\n"), 0o644); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, "default_roce_tos"), []byte("0\n"), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// Write puts content at rel under root, creating parents; for building
// test scenarios.
func Write(t testing.TB, root, rel, content string) {
	t.Helper()
	p := filepath.Join(root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// Read returns the trimmed content of rel under root.
func Read(t testing.TB, root, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}
