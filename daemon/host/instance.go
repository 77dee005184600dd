package host

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// LockFile is the lock that makes rdmad one per host, relative to the
// root: /run/rdmad is the unit's RuntimeDirectory.
const LockFile = "run/rdmad/rdmad.lock"

// ErrLocked is returned (wrapped) by LockInstance when another rdmad holds
// the lock.
var ErrLocked = errors.New("another rdmad is running on this host")

// InstanceLock is held for the life of the process: the kernel drops it
// when the process ends, however it ends, so a crash never leaves a stale
// lock behind.
type InstanceLock struct {
	f *os.File
}

// LockInstance takes the host-wide rdmad lock (LockFile under the root),
// without waiting: a second rdmad started by mistake must stop before it
// touches the host, not reconcile beside the first. The lock file holds
// the owner's pid, for the message the second one prints.
func (h *Host) LockInstance() (*InstanceLock, error) {
	name := h.Path(LockFile)
	// Through the checked directory, as every file rdmad writes
	// (safewrite.go).
	dfd, err := openWriteDir(filepath.Dir(name), false)
	if err != nil {
		return nil, fmt.Errorf("instance lock: %w", err)
	}
	fd, err := unix.Openat(dfd, filepath.Base(name), unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0o644)
	unix.Close(dfd)
	if err != nil {
		return nil, fmt.Errorf("instance lock: %w", &fs.PathError{Op: "open", Path: name, Err: err})
	}
	f := os.NewFile(uintptr(fd), name)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		f.Close()
		return nil, fmt.Errorf("instance lock %s: %w", name, ErrNotRegular)
	}
	if err := flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			owner := "unknown pid"
			if b, rerr := ReadAttr(name); rerr == nil {
				if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); perr == nil {
					owner = "pid " + strconv.Itoa(pid)
				}
			}
			return nil, fmt.Errorf("%w (%s holds %s)", ErrLocked, owner, name)
		}
		return nil, fmt.Errorf("instance lock %s: %w", name, err)
	}
	// Only the holder writes: whoever reads the pid sees the holder's.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &InstanceLock{f: f}, nil
}

func flock(fd, how int) error {
	for {
		err := unix.Flock(fd, how)
		if err != unix.EINTR {
			return err
		}
	}
}

// Release drops the lock (tests; a process simply exits).
func (l *InstanceLock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}

// tempPrefix starts the name of WriteFile's temp file for base (a random
// suffix follows): hidden (config loading and the watcher skip dot files)
// and recognisable, so RemoveStaleTemps can find what a crash left.
func tempPrefix(base string) string { return "." + base + ".tmp-" }

// RemoveStaleTemps deletes the temp files WriteFileAtomic leaves when rdmad
// dies between writing one and renaming it over name: regular files named
// named tempPrefix(base of name) + a suffix in name's directory. Only the temps of
// that one file are touched, never another program's. It must run only
// while the instance lock is held (another rdmad's write may be under
// way otherwise). It returns the paths it removed.
func RemoveStaleTemps(name string) ([]string, error) {
	dir, base := filepath.Split(name)
	ents, err := readDirents(filepath.Clean(dir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("stale temp files of %s: %w", name, err)
	}
	prefix := tempPrefix(base)
	var removed []string
	var errs []error
	for _, e := range ents {
		if !strings.HasPrefix(e.name, prefix) || len(e.name) == len(prefix) {
			continue
		}
		p := filepath.Join(dir, e.name)
		// Through the checked directory, never following a symlink.
		ok, err := RemoveFile(p, WriteOptions{})
		if err != nil {
			if !errors.Is(err, ErrNotRegular) {
				errs = append(errs, err)
			}
			continue
		}
		if ok {
			removed = append(removed, p)
		}
	}
	return removed, errors.Join(errs...)
}
