// Package host is rdmad's one path to the kernel's files. Every path is
// relative to a root directory ("/" in production, a fixture tree in tests),
// in the manner of prometheus/procfs, so the same code reads a real host and
// the trees checked into test/.
package host

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Well-known paths relative to the root.
const (
	ClassInfiniband = "sys/class/infiniband"
	ConfigfsRdmaCM  = "sys/kernel/config/rdma_cm"
	ProcModules     = "proc/modules"
	SysModule       = "sys/module"
	ClassNet        = "sys/class/net"
)

// Host is a view of one machine rooted at Root.
type Host struct {
	Root string

	prefix string // Root, cleaned, with a trailing slash (Path)
	io     AttrIO
	kmod   moduleIndexCache
}

// AttrIO reads and writes kernel attribute files and makes configfs
// directories. The real one is the file system through the bounded
// primitives of fileio.go; tests substitute one that answers as the kernel
// does (EINVAL, EIO, populating a configfs directory on mkdir) where a plain
// fixture file cannot.
type AttrIO interface {
	ReadAttr(name string) ([]byte, error)
	WriteAttr(name string, data []byte) error
	Mkdir(name string) error
}

// OSAttrIO is the real AttrIO.
type OSAttrIO struct{}

func (OSAttrIO) ReadAttr(name string) ([]byte, error)     { return ReadAttr(name) }
func (OSAttrIO) WriteAttr(name string, data []byte) error { return WriteAttr(name, data) }
func (OSAttrIO) Mkdir(name string) error                  { return os.Mkdir(name, 0o755) }

// New returns a Host rooted at root ("/" for the running system).
func New(root string) *Host { return NewWithIO(root, OSAttrIO{}) }

// NewWithIO returns a Host whose attribute access goes through io.
func NewWithIO(root string, io AttrIO) *Host {
	if root == "" {
		root = "/"
	}
	h := &Host{Root: root, io: io}
	switch clean := filepath.Clean(root); clean {
	case "/":
		h.prefix = "/"
	case ".":
		// Join drops a "." root: Path takes the long way.
	default:
		h.prefix = clean + "/"
	}
	return h
}

// Path joins rel (slash-separated, relative) onto the root. A clean rel
// (as rdmad's own paths are) is appended as it is: a pass builds several
// paths per port, and cleaning each costs more than the read it names.
func (h *Host) Path(rel ...string) string {
	if len(rel) == 1 && h.prefix != "" && cleanRel(rel[0]) {
		return h.prefix + rel[0]
	}
	return filepath.Join(append([]string{h.Root}, rel...)...)
}

// cleanRel reports whether s is a relative path path.Clean leaves as it
// is: not empty, no leading or trailing slash, no empty, "." or ".."
// element.
func cleanRel(s string) bool {
	if s == "" || s[0] == '/' || s[len(s)-1] == '/' {
		return false
	}
	start := 0
	for i := 0; i <= len(s); i++ {
		if i < len(s) && s[i] != '/' {
			continue
		}
		if e := s[start:i]; e == "" || e == "." || e == ".." {
			return false
		}
		start = i + 1
	}
	return true
}

// ReadString reads a sysfs-style attribute under the root and trims the
// trailing newline.
func (h *Host) ReadString(rel string) (string, error) {
	if _, real := h.io.(OSAttrIO); real {
		return h.readAttrStringRel(rel)
	}
	b, err := h.io.ReadAttr(h.Path(rel))
	if err != nil {
		return "", err
	}
	return string(bytes.TrimRight(b, "\n")), nil
}

// WriteString writes an attribute in place, as echo does.
func (h *Host) WriteString(rel, value string) error {
	if _, real := h.io.(OSAttrIO); real {
		return h.writeAttrRel(rel, []byte(value))
	}
	return h.io.WriteAttr(h.Path(rel), []byte(value))
}

// ReadFile reads a configuration or list file under the root
// (MaxConfigSize, regular files only).
func (h *Host) ReadFile(rel string) ([]byte, error) {
	return ReadConfigFile(h.Path(rel))
}

// Exists reports whether rel exists under the root.
func (h *Host) Exists(rel string) bool {
	_, err := os.Stat(h.Path(rel))
	return err == nil
}

// Mkdir creates rel (one level, like mkdir(1) on configfs).
func (h *Host) Mkdir(rel string) error {
	return h.io.Mkdir(h.Path(rel))
}

// ReadDirNames lists the entry names of rel, sorted.
func (h *Host) ReadDirNames(rel string) ([]string, error) {
	return ReadDirNames(h.Path(rel))
}

// WriteFileAtomic replaces rel with data: a temp file in the same directory,
// fsync, rename, fsync of the directory. Missing parent directories are
// created. Readers never see a half-written file.
func (h *Host) WriteFileAtomic(rel string, data []byte, perm fs.FileMode) error {
	return WriteFileAtomic(h.Path(rel), data, perm)
}

// WriteFileAtomic is the path-based form of Host.WriteFileAtomic: WriteFile
// (safewrite.go) with no header and no comparison.
func WriteFileAtomic(name string, data []byte, perm fs.FileMode) error {
	_, err := WriteFile(name, data, perm, WriteOptions{})
	return err
}

// MkdirAllPublic is os.MkdirAll(dir, 0755) whatever the umask: rdmad runs
// with UMask=0077, under which a directory it creates for a file others
// read (/etc/security/limits.d, /etc/modprobe.d, /etc/systemd/system.conf.d)
// would end 0700. Only directories it creates are chmod-ed; existing ones
// keep the mode the administrator gave them.
func MkdirAllPublic(dir string) error {
	if st, err := os.Stat(dir); err == nil {
		if !st.IsDir() {
			return &fs.PathError{Op: "mkdir", Path: dir, Err: unix.ENOTDIR}
		}
		return nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if parent := filepath.Dir(dir); parent != dir {
		if err := MkdirAllPublic(parent); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil // created meanwhile (by another writer): theirs
		}
		return err
	}
	return os.Chmod(dir, 0o755)
}

// beforeRename is a test seam: a test kills the process here to prove
// that a crash between the temp write and the rename leaves the old file
// whole and only a temp file behind (RemoveStaleTemps).
var beforeRename func(tmp string)

// LoadedModules returns the names of the modules the kernel has, loaded
// (proc/modules) or built in (sys/module), with '-' folded to '_' as the
// kernel does.
func (h *Host) LoadedModules() (map[string]bool, error) {
	loaded := map[string]bool{}
	b, err := h.ReadFile(ProcModules)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("read %s: %w", ProcModules, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			loaded[NormalizeModule(f[0])] = true
		}
	}
	names, err := h.ReadDirNames(SysModule)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("read %s: %w", SysModule, err)
	}
	for _, n := range names {
		loaded[NormalizeModule(n)] = true
	}
	return loaded, nil
}

// NormalizeModule folds '-' into '_' as the kernel does for module names.
func NormalizeModule(name string) string {
	return strings.ReplaceAll(name, "-", "_")
}

// NetdevExists reports whether a network interface of that name exists.
func (h *Host) NetdevExists(name string) bool {
	return name != "" && !strings.Contains(name, "/") && h.Exists(filepath.Join(ClassNet, name))
}
