package host

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// Size limits of host reads. Nothing rdmad reads is allowed to grow its
// memory without bound or to block it: a FIFO, a character device or an
// endless file put where a regular file is expected is an error, at once.
const (
	// MaxAttrSize bounds a sysfs or configfs attribute: the kernel never
	// returns more than a page for one.
	MaxAttrSize = 4096
	// MaxConfigSize bounds a configuration or list file (rdmad.toml, a
	// drop-in, /etc/rdma/modules/*.conf, limits.d, /proc/modules).
	MaxConfigSize = 1 << 20
	// MaxIndexSize bounds the kernel's module indexes (modules.alias is
	// about 1.5 MiB on a distribution kernel).
	MaxIndexSize = 32 << 20
)

// ErrNotRegular is returned (wrapped) when a path rdmad reads or writes as a
// file is something else: a FIFO, a device, a socket or a directory.
var ErrNotRegular = errors.New("not a regular file")

// ErrTooLarge is returned (wrapped) when a file exceeds its read limit.
var ErrTooLarge = errors.New("file exceeds the size limit")

// openRegular opens name without ever blocking (O_NONBLOCK: a FIFO with no
// writer or reader answers at once) and without becoming the controlling
// terminal, then refuses anything that is not a regular file. The returned
// fd is a plain descriptor: no runtime poller registration, which would
// cost an epoll_ctl per sysfs attribute.
func openRegular(name string, flags int) (int, error) {
	var fd int
	var err error
	for {
		fd, err = unix.Open(name, flags|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return -1, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, &fs.PathError{Op: "stat", Path: name, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return -1, &fs.PathError{Op: "open", Path: name, Err: fmt.Errorf("%w (%s)", ErrNotRegular, fileType(st.Mode))}
	}
	return fd, nil
}

func fileType(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFIFO:
		return "a FIFO"
	case unix.S_IFCHR:
		return "a character device"
	case unix.S_IFBLK:
		return "a block device"
	case unix.S_IFSOCK:
		return "a socket"
	case unix.S_IFDIR:
		return "a directory"
	}
	return fmt.Sprintf("mode %#o", mode&unix.S_IFMT)
}

func readRetry(fd int, b []byte) (int, error) {
	for {
		n, err := unix.Read(fd, b)
		if err != unix.EINTR {
			return n, err
		}
	}
}

// ReadAttr reads a sysfs or configfs attribute: one open, one read, one
// close. The kernel hands an attribute over whole in one read, so there is
// no second read to see end of file; a fixture file does the same.
func ReadAttr(name string) ([]byte, error) {
	var buf [MaxAttrSize + 1]byte
	b, err := readAttrInto(name, &buf)
	if err != nil {
		return nil, err
	}
	return append([]byte(nil), b...), nil
}

// readAttrInto reads the attribute name into buf, for ReadAttr.
func readAttrInto(name string, buf *[MaxAttrSize + 1]byte) ([]byte, error) {
	fd, err := openRegular(name, unix.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	n, err := readRetry(fd, buf[:])
	if err != nil {
		return nil, &fs.PathError{Op: "read", Path: name, Err: err}
	}
	if n > MaxAttrSize {
		return nil, &fs.PathError{Op: "read", Path: name, Err: fmt.Errorf("%w of %d bytes for an attribute", ErrTooLarge, MaxAttrSize)}
	}
	return buf[:n], nil
}

// ReadFileLimit reads a whole regular file of at most limit bytes. It reads
// until end of file, so files whose size the kernel does not report
// (/proc) are read completely.
func ReadFileLimit(name string, limit int) ([]byte, error) {
	fd, err := openRegular(name, unix.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	return readOpen(fd, name, limit, TrustAny)
}

// readOpen reads the open descriptor fd of name: a regular file (checked
// here too, for descriptors opened with openat), judged by trust, at most
// limit bytes.
func readOpen(fd int, name string, limit int, trust Trust) ([]byte, error) {
	size := 512
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, &fs.PathError{Op: "stat", Path: name, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fmt.Errorf("%w (%s)", ErrNotRegular, fileType(st.Mode))}
	}
	if err := trust.check(name, &st); err != nil {
		return nil, err
	}
	if st.Size > 0 && st.Size < int64(limit) {
		size = int(st.Size) + 1
	}
	buf := make([]byte, 0, size)
	for {
		if len(buf) == cap(buf) {
			if len(buf) > limit {
				return nil, &fs.PathError{Op: "read", Path: name, Err: fmt.Errorf("%w of %d bytes", ErrTooLarge, limit)}
			}
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := readRetry(fd, buf[len(buf):cap(buf)])
		if err != nil {
			return nil, &fs.PathError{Op: "read", Path: name, Err: err}
		}
		if n == 0 {
			break
		}
		buf = buf[:len(buf)+n]
		if len(buf) > limit {
			return nil, &fs.PathError{Op: "read", Path: name, Err: fmt.Errorf("%w of %d bytes", ErrTooLarge, limit)}
		}
	}
	return buf, nil
}

// ReadConfigFile reads a configuration or list file (MaxConfigSize).
func ReadConfigFile(name string) ([]byte, error) { return ReadFileLimit(name, MaxConfigSize) }

// WriteAttr writes an attribute in place, as echo does: no temp file
// (sysfs and configfs attributes cannot be renamed over), O_TRUNC for
// fixture files (the kernel ignores it), and never to anything but a
// regular file, so a FIFO cannot block the write.
func WriteAttr(name string, data []byte) error {
	return writeAttr(name, unix.O_WRONLY|unix.O_TRUNC, data)
}

// WriteKernelAttr writes a kernel attribute (sysfs, configfs) in place
// without truncating it first: an O_TRUNC open is a change notification of
// its own (IN_MODIFY on the attribute's directory), sent before the write
// and whatever the kernel then makes of the value. Regular files only; a
// plain file keeps what follows the bytes written, so fixtures are written
// with WriteAttr.
func WriteKernelAttr(name string, data []byte) error { return writeAttr(name, unix.O_WRONLY, data) }

// writeAttr opens name with flags (a regular file only) and writes data.
func writeAttr(name string, flags int, data []byte) error {
	fd, err := openRegular(name, flags)
	if err != nil {
		return err
	}
	n, err := writeRetry(fd, data)
	cerr := unix.Close(fd)
	switch {
	case err != nil:
		return &fs.PathError{Op: "write", Path: name, Err: err}
	case n != len(data):
		return &fs.PathError{Op: "write", Path: name, Err: fmt.Errorf("short write: %d of %d bytes", n, len(data))}
	case cerr != nil:
		return &fs.PathError{Op: "close", Path: name, Err: cerr}
	}
	return nil
}

func writeRetry(fd int, b []byte) (int, error) {
	for {
		n, err := unix.Write(fd, b)
		if err != unix.EINTR {
			return n, err
		}
	}
}

// ReadDirNames lists a directory's entries, sorted, without following a
// final symlink to something that is not a directory and without blocking
// on a FIFO put in its place.
func ReadDirNames(name string) ([]string, error) {
	ents, err := readDirents(name)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(ents))
	for i, e := range ents {
		names[i] = e.name
	}
	return names, nil
}

type dirent struct {
	name string
	typ  uint8 // unix.DT_*; DT_UNKNOWN on file systems that do not say
}

// readDirents reads the entries of a directory, sorted by name.
func readDirents(name string) ([]dirent, error) { return readDirentsTrusted(name, TrustAny) }

// readDirentsTrusted is readDirents that first judges the directory it
// opened by trust.
func readDirentsTrusted(name string, trust Trust) ([]dirent, error) {
	var fd int
	var err error
	for {
		fd, err = unix.Open(name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	defer unix.Close(fd)
	return readDirentsOpen(fd, func() string { return name }, trust)
}

// readDirentsOpen reads the entries of the open directory fd, sorted by
// name, after judging it by trust; name is its path, for errors.
func readDirentsOpen(fd int, name func() string, trust Trust) ([]dirent, error) {
	if trust != TrustAny {
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return nil, &fs.PathError{Op: "stat", Path: name(), Err: err}
		}
		if err := trust.check(name(), &st); err != nil {
			return nil, err
		}
	}
	var out []dirent
	var buf [8192]byte // on the stack: a pass lists every device's ports
	for {
		n, err := unix.ReadDirent(fd, buf[:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "readdirent", Path: name(), Err: err}
		}
		if n <= 0 {
			break
		}
		b := buf[:n]
		for len(b) > 0 {
			if len(b) < 19 {
				return nil, &fs.PathError{Op: "readdirent", Path: name(), Err: errors.New("malformed directory entry")}
			}
			reclen := binary.NativeEndian.Uint16(b[16:18]) // linux_dirent64.d_reclen
			if reclen < 19 || int(reclen) > len(b) {
				return nil, &fs.PathError{Op: "readdirent", Path: name(), Err: errors.New("malformed directory entry")}
			}
			rec := b[:reclen]
			b = b[reclen:]
			typ := rec[18]
			nameBytes := rec[19:]
			for i, c := range nameBytes {
				if c == 0 {
					nameBytes = nameBytes[:i]
					break
				}
			}
			if n := string(nameBytes); n != "." && n != ".." {
				out = append(out, dirent{name: n, typ: typ})
			}
		}
	}
	slices.SortFunc(out, func(a, b dirent) int { return strings.Compare(a.name, b.name) })
	return out, nil
}

// Files reads configuration files by absolute path with the limits above;
// it is what config.Load gets on a real host. With a Trust, every file and
// the drop-in directory are judged on the descriptor that is read: the
// daemon's configuration must be root's (TrustFor).
type Files struct {
	Trust Trust
}

// ReadFile implements config.Reader.
func (f Files) ReadFile(name string) ([]byte, error) {
	fd, err := openRegular(name, unix.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	return readOpen(fd, name, MaxConfigSize, f.Trust)
}

// ReadDir implements config.Reader: the names of name's entries that are
// not directories (nor symlinks to one), sorted. A FIFO or device among
// them is listed, so that reading it fails with an error naming it.
func (f Files) ReadDir(name string) ([]string, error) {
	ents, err := readDirentsTrusted(name, f.Trust)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		switch e.typ {
		case unix.DT_DIR:
			continue
		case unix.DT_LNK, unix.DT_UNKNOWN:
			if st, err := os.Stat(name + "/" + e.name); err == nil && st.IsDir() {
				continue
			}
		}
		out = append(out, e.name)
	}
	return out, nil
}
