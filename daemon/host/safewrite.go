package host

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Every file rdmad writes or removes (its drop-in, limits.d, system.conf.d,
// modprobe.d, the last good configuration, the metrics textfile, the
// instance lock, temporary files) goes through WriteFile, RemoveManaged or
// openWriteDir here: the parent directory is opened once, without
// following a symlink in its place, checked (a directory, owned by root,
// by the user rdmad runs as, or by the user the path is meant for), and
// everything else happens relative to that descriptor (openat, renameat,
// unlinkat). A directory swapped for a symlink after rdmad checked it, or
// between two writes, cannot send root's write elsewhere, and a file
// without rdmad's header is left alone at every replace, not only the
// first.

// ErrUnsafeDir is returned (wrapped) for a directory rdmad will not write
// into: a symlink, or owned by a user who is not root, rdmad's own or the
// one the path is meant for.
var ErrUnsafeDir = errors.New("is not a directory rdmad writes into")

// WriteOptions says how WriteFile replaces a file.
type WriteOptions struct {
	// Header, when set, must start the content, and an existing file
	// that does not start with it is left alone (ErrNotManaged): rdmad
	// never replaces a file it did not write. Checked before every
	// replace.
	Header string
	// SkipSame leaves a file that already holds the content untouched
	// (changed false).
	SkipSame bool
	// ParentOwner also accepts a directory owned by the owner of its own
	// parent: a directory of another daemon's (node_exporter's textfile
	// directory in its home), which is that user's by design.
	ParentOwner bool
}

// openWriteDir creates dir if missing (0755 whatever the umask) and opens it
// for writing into: O_NOFOLLOW|O_DIRECTORY, then the owner check on the
// descriptor.
func openWriteDir(dir string, parentOwner bool) (int, error) {
	if err := MkdirAllPublic(dir); err != nil {
		return -1, err
	}
	var fd int
	var err error
	for {
		fd, err = unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != unix.EINTR {
			break
		}
	}
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
		if st, lerr := os.Lstat(dir); lerr == nil && st.Mode()&fs.ModeSymlink != 0 {
			return -1, &fs.PathError{Op: "open", Path: dir, Err: fmt.Errorf("a symlink %w", ErrUnsafeDir)}
		}
	}
	if err != nil {
		return -1, &fs.PathError{Op: "open", Path: dir, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, &fs.PathError{Op: "stat", Path: dir, Err: err}
	}
	if st.Uid == 0 || int(st.Uid) == os.Geteuid() {
		return fd, nil
	}
	if parentOwner {
		var pst unix.Stat_t
		if err := unix.Stat(filepath.Dir(dir), &pst); err == nil && pst.Uid == st.Uid {
			return fd, nil
		}
	}
	unix.Close(fd)
	return -1, &fs.PathError{Op: "open", Path: dir, Err: fmt.Errorf("owned by uid %d %w", st.Uid, ErrUnsafeDir)}
}

// readAt reads up to limit bytes of base in the directory dfd without
// following a symlink and without blocking; exists is false when there is
// no such entry.
func readAt(dfd int, dir, base string, limit int) (exists bool, data []byte, err error) {
	name := filepath.Join(dir, base)
	var fd int
	for {
		fd, err = unix.Openat(dfd, base, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
		if err != unix.EINTR {
			break
		}
	}
	switch {
	case errors.Is(err, unix.ENOENT):
		return false, nil, nil
	case errors.Is(err, unix.ELOOP):
		return true, nil, &fs.PathError{Op: "open", Path: name, Err: fmt.Errorf("%w (a symlink)", ErrNotRegular)}
	case err != nil:
		return true, nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return true, nil, &fs.PathError{Op: "stat", Path: name, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return true, nil, &fs.PathError{Op: "open", Path: name, Err: fmt.Errorf("%w (%s)", ErrNotRegular, fileType(st.Mode))}
	}
	buf := make([]byte, 0, min(limit+1, 64<<10))
	for len(buf) <= limit {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := readRetry(fd, buf[len(buf):min(cap(buf), limit+1)])
		if err != nil {
			return true, nil, &fs.PathError{Op: "read", Path: name, Err: err}
		}
		if n == 0 {
			break
		}
		buf = buf[:len(buf)+n]
	}
	return true, buf, nil
}

// WriteFile replaces name with data atomically, through its directory's
// descriptor: a temporary file created there (O_EXCL|O_NOFOLLOW), written,
// given perm, synced, renamed over name, and the directory synced. Readers
// see the old file or the new one. changed is false when SkipSame found
// the content already there.
func WriteFile(name string, data []byte, perm fs.FileMode, o WriteOptions) (changed bool, err error) {
	if o.Header != "" && !bytes.HasPrefix(data, []byte(o.Header)) {
		return false, fmt.Errorf("%s: content lacks its header", name)
	}
	dir, base := filepath.Split(name)
	dir = filepath.Clean(dir)
	dfd, err := openWriteDir(dir, o.ParentOwner)
	if err != nil {
		return false, err
	}
	defer unix.Close(dfd)
	if o.Header != "" || o.SkipSame {
		limit := len(o.Header)
		if o.SkipSame {
			limit = len(data)
		}
		exists, old, err := readAt(dfd, dir, base, limit)
		switch {
		case err != nil && o.Header != "":
			return false, fmt.Errorf("%s %w (%w); remove it or move its settings into rdmad's configuration", name, ErrNotManaged, err)
		case err != nil:
			return false, err
		case exists && o.SkipSame && bytes.Equal(old, data):
			return false, nil
		case exists && o.Header != "" && !bytes.HasPrefix(old, []byte(o.Header)):
			return false, fmt.Errorf("%s %w; remove it or move its settings into rdmad's configuration", name, ErrNotManaged)
		}
	}
	tmp, fd, err := createTempAt(dfd, base)
	if err != nil {
		return false, &fs.PathError{Op: "create", Path: filepath.Join(dir, tmp), Err: err}
	}
	renamed := false
	defer func() {
		if !renamed {
			_ = unix.Unlinkat(dfd, tmp, 0)
		}
	}()
	tmpPath := filepath.Join(dir, tmp)
	err = writeAll(fd, data)
	if err == nil {
		err = unix.Fchmod(fd, uint32(perm.Perm()))
	}
	if err == nil {
		err = unix.Fsync(fd)
	}
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	if err != nil {
		return false, &fs.PathError{Op: "write", Path: tmpPath, Err: err}
	}
	if beforeRename != nil {
		beforeRename(tmpPath)
	}
	if err := unix.Renameat(dfd, tmp, dfd, base); err != nil {
		return false, &os.LinkError{Op: "rename", Old: tmpPath, New: name, Err: err}
	}
	renamed = true
	_ = unix.Fsync(dfd) // best effort: some filesystems refuse fsync on a directory
	return true, nil
}

// createTempAt creates a new temp file for base in dfd, named like
// tempPrefix(base) and a random suffix, 0600 until written.
func createTempAt(dfd int, base string) (string, int, error) {
	for try := 0; ; try++ {
		var r [6]byte
		_, _ = rand.Read(r[:])
		tmp := tempPrefix(base) + hex.EncodeToString(r[:])
		fd, err := unix.Openat(dfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if errors.Is(err, unix.EEXIST) && try < 100 {
			continue
		}
		return tmp, fd, err
	}
}

// RemoveFile deletes name through its directory's descriptor if it is a
// regular file that starts with o.Header ("": any regular file); removed is
// false when there is none or it is someone else's.
func RemoveFile(name string, o WriteOptions) (removed bool, err error) {
	return removeAt(name, o.Header, o.ParentOwner)
}

func removeAt(name, header string, parentOwner bool) (removed bool, err error) {
	dir, base := filepath.Split(name)
	dir = filepath.Clean(dir)
	dfd, err := openDirNoCreate(dir, parentOwner)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer unix.Close(dfd)
	exists, old, err := readAt(dfd, dir, base, len(header))
	if err != nil {
		return false, fmt.Errorf("remove %s: %w", name, err)
	}
	if !exists || !bytes.HasPrefix(old, []byte(header)) {
		return false, nil // missing, or not rdmad's: left alone
	}
	if err := unix.Unlinkat(dfd, base, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return false, &fs.PathError{Op: "remove", Path: name, Err: err}
	}
	return true, nil
}

// openDirNoCreate is openWriteDir for a directory that must already exist.
func openDirNoCreate(dir string, parentOwner bool) (int, error) {
	if _, err := os.Lstat(dir); err != nil {
		return -1, err
	}
	return openWriteDir(dir, parentOwner)
}

// writeAll writes all of b, as os.File.Write does: a short write is
// followed by another, which reports the cause (ENOSPC).
func writeAll(fd int, b []byte) error {
	for len(b) > 0 {
		n, err := writeRetry(fd, b)
		if err != nil {
			return err
		}
		if n == 0 {
			return unix.EIO
		}
		b = b[n:]
	}
	return nil
}
