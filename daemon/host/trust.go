package host

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// ErrUntrusted is returned (wrapped, as an *UntrustedError) for a file or
// directory rdmad acts on with its privileges that users other than root
// can change.
var ErrUntrusted = errors.New("can be changed by users other than root")

// Trust is the rule a file rdmad trusts (its configuration, the modules
// lists) must meet, as sshd's StrictModes, sudo and polkit judge theirs.
type Trust int

const (
	// TrustAny judges nothing (parsers and tests of them).
	TrustAny Trust = iota
	// TrustRoot is the rule on a real host (--root /): owned by root (or
	// by the user rdmad runs as, who then has no more privileges than it),
	// not writable by others, and writable by the group only when the
	// group is root's.
	TrustRoot
	// TrustUser is the rule under --root DIR (fixtures, make demo, clones
	// made under umask 002): owned by the user running rdmad, not
	// writable by others; group bits are not judged.
	TrustUser
)

// TrustFor is the rule for a host rooted at root.
func TrustFor(root string) Trust {
	if filepath.Clean(root) == "/" {
		return TrustRoot
	}
	return TrustUser
}

// UntrustedError says why a file is not trusted.
type UntrustedError struct {
	Path   string
	Reason string // "owned by uid 1000", "writable by others (mode 0666)"
	Fix    string
}

func (e *UntrustedError) Error() string {
	return fmt.Sprintf("%s is %s: rdmad does not trust what another user can change (%s)", e.Path, e.Reason, e.Fix)
}

func (e *UntrustedError) Is(target error) bool { return target == ErrUntrusted }

// check judges the file or directory name, stat'ed from the descriptor
// rdmad reads.
func (t Trust) check(name string, st *unix.Stat_t) error {
	if t == TrustAny {
		return nil
	}
	euid := uint32(os.Geteuid())
	mode := st.Mode & 0o7777
	switch {
	case t == TrustRoot && st.Uid != 0 && st.Uid != euid:
		return &UntrustedError{name, fmt.Sprintf("owned by uid %d, not root", st.Uid), "chown root " + name}
	case t == TrustUser && st.Uid != euid:
		return &UntrustedError{name, fmt.Sprintf("owned by uid %d, not uid %d, who runs rdmad", st.Uid, euid), "chown it to the user running rdmad"}
	case mode&0o002 != 0:
		return &UntrustedError{name, fmt.Sprintf("writable by others (mode %04o)", mode), "chmod o-w " + name}
	case t == TrustRoot && mode&0o020 != 0 && st.Gid != 0:
		return &UntrustedError{name, fmt.Sprintf("writable by group %d, not root's (mode %04o)", st.Gid, mode), "chmod g-w " + name + ", or chgrp root"}
	}
	return nil
}

// ReadTrustedFile reads rel under the root as a list rdmad acts on with its
// privileges (/etc/rdma/modules/*.conf): its directory is opened without
// following a symlink in its place and judged, the file is opened relative
// to it (openat, O_NOFOLLOW, never blocking) and the descriptor that is
// read is judged: what is checked is what is read.
func (h *Host) ReadTrustedFile(rel string) ([]byte, error) {
	return h.ReadTrustedFileLimit(rel, MaxConfigSize)
}

// ReadTrustedFileLimit is ReadTrustedFile for a file of at most limit
// bytes (rdmad's state under /var/lib/rdmad, which stands for files of
// MaxConfigSize each).
func (h *Host) ReadTrustedFileLimit(rel string, limit int) ([]byte, error) {
	trust := TrustFor(h.Root)
	name := h.Path(rel)
	dir, base := filepath.Split(name)
	dir = filepath.Clean(dir)
	dfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if st, lerr := os.Lstat(dir); lerr == nil && st.Mode()&fs.ModeSymlink != 0 {
			return nil, &UntrustedError{dir, "a symlink", "make it a directory"}
		}
		return nil, &fs.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(dfd)
	var st unix.Stat_t
	if err := unix.Fstat(dfd, &st); err != nil {
		return nil, &fs.PathError{Op: "stat", Path: dir, Err: err}
	}
	if err := trust.check(dir, &st); err != nil {
		return nil, err
	}
	fd, err := unix.Openat(dfd, base, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return nil, &UntrustedError{name, "a symlink", "make it a regular file"}
		}
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	defer unix.Close(fd)
	return readOpen(fd, name, limit, trust)
}
