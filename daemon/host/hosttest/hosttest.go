// Package hosttest gives tests a private copy of a fixture host from
// test/hosts and a kernel-like AttrIO that refuses values the way configfs
// does, which plain fixture files cannot.
package hosttest

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

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

	mu          sync.Mutex
	refuse      map[string]syscall.Errno // "<path suffix>=<value>" -> errno; "" value: any
	failReads   map[string]syscall.Errno // path suffix -> errno
	beforeWrite func(rel, value string)
	beforeRead  func(rel string)
	ignore      map[string]bool // "<path suffix>=<value>": accepted but not kept
	Writes      []string        // "<path relative to root>=<value>", in order
	Mkdirs      []string
	DefMode     string // default_roce_mode a new configfs port starts with
}

// NewKernel returns a Kernel over root.
func NewKernel(root string) *Kernel {
	return &Kernel{Root: root, refuse: map[string]syscall.Errno{}, ignore: map[string]bool{}, DefMode: "RoCE v2"}
}

// Host returns a host.Host that uses k.
func (k *Kernel) Host() *host.Host { return host.NewWithIO(k.Root, k) }

// Refuse makes writes of value to paths ending in suffix fail with errno,
// e.g. Refuse("rxe0/ports/1/default_roce_mode", "IB/RoCE v1", syscall.EIO);
// value "" refuses every value.
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

// ReadAttr implements host.AttrIO.
func (k *Kernel) ReadAttr(name string) ([]byte, error) {
	rel := k.rel(name)
	k.mu.Lock()
	before := k.beforeRead
	k.mu.Unlock()
	if before != nil {
		before(rel)
	}
	k.mu.Lock()
	var errno syscall.Errno
	for suffix, e := range k.failReads {
		if strings.HasSuffix(rel, suffix) {
			errno = e
		}
	}
	k.mu.Unlock()
	if errno != 0 {
		return nil, &os.PathError{Op: "read", Path: name, Err: errno}
	}
	return host.ReadAttr(name)
}

// FailReads makes reads of paths ending in suffix fail with errno (0
// removes the rule).
func (k *Kernel) FailReads(suffix string, errno syscall.Errno) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.failReads == nil {
		k.failReads = map[string]syscall.Errno{}
	}
	if errno == 0 {
		delete(k.failReads, suffix)
		return
	}
	k.failReads[suffix] = errno
}

// BeforeRead runs fn before every attribute read with the path relative
// to the root: a test holds a read as a driver that does not answer does.
func (k *Kernel) BeforeRead(fn func(rel string)) {
	k.mu.Lock()
	k.beforeRead = fn
	k.mu.Unlock()
}

// BeforeWrite runs fn before every attribute write with the path relative
// to the root and the value: a test makes the device vanish between read
// and write, or counts.
func (k *Kernel) BeforeWrite(fn func(rel, value string)) {
	k.mu.Lock()
	k.beforeWrite = fn
	k.mu.Unlock()
}

// WriteAttr implements host.AttrIO.
func (k *Kernel) WriteAttr(name string, data []byte) error {
	rel := k.rel(name)
	val := strings.TrimRight(string(data), "\n")
	k.mu.Lock()
	before := k.beforeWrite
	k.mu.Unlock()
	if before != nil {
		before(rel, val)
	}
	k.mu.Lock()
	k.Writes = append(k.Writes, rel+"="+val)
	var errno syscall.Errno
	ignored := false
	for key, e := range k.refuse {
		suffix, v, _ := strings.Cut(key, "=")
		if strings.HasSuffix(rel, suffix) && (v == val || v == "") {
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
	if strings.Contains(rel, "/tc/") && strings.HasSuffix(rel, "/traffic_class") {
		return writeTrafficClass(name, val)
	}
	return host.WriteAttr(name, data)
}

// writeTrafficClass stores a global traffic class as OFED's mlx5_ib does
// (traffic_class_store): a number up to 255, -1 for none, anything else
// EINVAL; it then shows "Global tclass=N" or nothing.
func writeTrafficClass(name, val string) error {
	n, err := strconv.ParseInt(strings.TrimSpace(val), 0, 32)
	if err != nil || n > 0xff {
		return &os.PathError{Op: "write", Path: name, Err: syscall.EINVAL}
	}
	shown := ""
	if n >= 0 {
		shown = fmt.Sprintf("Global tclass=%d\n", n)
	}
	return host.WriteAttr(name, []byte(shown))
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

// Touch sets the times of rel under root to when, as an image built or a
// file changed then.
func Touch(t testing.TB, root, rel string, when time.Time) {
	t.Helper()
	if err := os.Chtimes(filepath.Join(root, rel), when, when); err != nil {
		t.Fatal(err)
	}
}

// Remove removes rel under root and everything below it.
func Remove(t testing.TB, root, rel string) {
	t.Helper()
	if err := os.RemoveAll(filepath.Join(root, rel)); err != nil {
		t.Fatal(err)
	}
}

// RenameDevice renames a fixture's RDMA device as `rdma dev set OLD name
// NEW` does: the class entry and the device directory change name, and
// configfs rdma_cm forgets the old one.
func RenameDevice(t testing.TB, root, old, name string) {
	t.Helper()
	class := filepath.Join(root, host.ClassInfiniband)
	target, err := os.Readlink(filepath.Join(class, old))
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(class, target)
	if err := os.Rename(dir, filepath.Join(filepath.Dir(dir), name)); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(class, old)); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(filepath.Dir(target), name), filepath.Join(class, name)); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(root, host.ConfigfsRdmaCM, old)); err != nil {
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

// Modprobe stands in for modprobe in unit tests (the real modules.Modprobe
// is tested against a script in PATH, and for real in the VM test). It
// records every call and makes the modules appear in the root's
// proc/modules, as a load would. Block, when set, holds every call until
// it is closed or the context ends; Fail makes the named modules fail.
type Modprobe struct {
	Root   string // "" records only
	Block  chan struct{}
	OnLoad func(module string) // called for each module loaded (the kernel's side effects)

	mu    sync.Mutex
	calls [][]string
	fail  map[string]error
}

// Load implements modules.Loader.
func (m *Modprobe) Load(ctx context.Context, names []string) error {
	m.mu.Lock()
	m.calls = append(m.calls, append([]string(nil), names...))
	block := m.Block
	var errs []error
	for _, n := range names {
		if err := m.fail[n]; err != nil {
			errs = append(errs, err)
		}
	}
	m.mu.Unlock()
	if block != nil {
		select {
		case <-block:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if m.Root == "" {
		for _, n := range names {
			if m.OnLoad != nil {
				m.OnLoad(n)
			}
		}
		return nil
	}
	f, err := os.OpenFile(filepath.Join(m.Root, host.ProcModules), os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, n := range names {
		if _, err := fmt.Fprintf(f, "%s 16384 0 - Live 0x0000000000000000\n", host.NormalizeModule(n)); err != nil {
			return err
		}
		if m.OnLoad != nil {
			m.OnLoad(n)
		}
	}
	return nil
}

// Fail makes every load that includes name fail with err (nil: succeed).
func (m *Modprobe) Fail(name string, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail == nil {
		m.fail = map[string]error{}
	}
	m.fail[name] = err
}

// Calls returns the calls made so far.
func (m *Modprobe) Calls() [][]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([][]string, len(m.calls))
	for i, c := range m.calls {
		out[i] = append([]string(nil), c...)
	}
	return out
}

// ModprobeScript writes an executable modprobe for the real modules.Modprobe
// and for rdmad run as a binary: it appends its arguments to the returned
// calls file, fails like modprobe for a module whose name starts with
// "nosuch", and appends the modules to root's proc/modules ("" skips that).
// env is os.Environ with the script's directory first in PATH.
func ModprobeScript(t testing.TB, root string) (env []string, calls string) {
	t.Helper()
	calls = filepath.Join(t.TempDir(), "calls")
	script := "echo \"$@\" >> " + calls + "\n" +
		"case \" $* \" in *\" nosuch\"*) echo \"modprobe: FATAL: Module nosuch not found\" >&2; exit 1;; esac\n" +
		"[ \"$1\" = -a ] && shift\n" +
		"[ \"$1\" = -- ] && shift\n"
	if root != "" {
		script += "for m in \"$@\"; do echo \"$m 16384 0 - Live 0x0\" >> " + filepath.Join(root, host.ProcModules) + "; done\n"
	}
	return CommandInPath(t, "modprobe", script), calls
}

// CommandInPath writes a /bin/sh script named name (body without the #!
// line) into a new directory and returns os.Environ with that directory
// first in PATH: the stand-in a test hands to a real binary.
func CommandInPath(t testing.TB, name, body string) (env []string) {
	t.Helper()
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
}

// UsePATH sets this test process's PATH to env's (from CommandInPath or
// ModprobeScript), for code under test that runs the command in process.
func UsePATH(t testing.TB, env []string) {
	t.Helper()
	for _, kv := range env {
		if path, ok := strings.CutPrefix(kv, "PATH="); ok {
			t.Setenv("PATH", path)
		}
	}
}
