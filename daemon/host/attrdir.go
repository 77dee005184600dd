package host

import (
	"bytes"
	"fmt"
	"io/fs"
	"runtime"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// AttrDir is a directory of attribute files opened once, whose files are
// read relative to it (openat): a reader of many files of one directory (a
// port's error counters, sampled every minute on every port) walks the
// directory's path once and builds no path per file. Its reads allocate
// nothing but their errors. The zero AttrDir is not open.
type AttrDir struct {
	h     *Host
	parts [maxDirParts]string // the directory, relative to the root, in parts: errors name it
	rel   string              // the same joined, when there are more parts or no descriptor
	fd    int                 // -1: read through h's AttrIO (a test's), or not open
}

// maxDirParts is how many parts of a directory's path an AttrDir keeps as
// they are given (joining them would allocate a path per directory).
const maxDirParts = 6

// AttrName is the name of a file relative to an AttrDir ("counters/
// symbol_error"), prepared once: the system call takes it as it is.
type AttrName struct {
	name string
	z    []byte // name and a NUL
}

// NewAttrName prepares name, a clean relative path.
func NewAttrName(name string) AttrName {
	return AttrName{name: name, z: append([]byte(name), 0)}
}

// String is the name.
func (n AttrName) String() string { return n.name }

// AttrBuf holds one attribute as read: the kernel never hands over more
// than a page.
type AttrBuf [MaxAttrSize + 1]byte

// OpenAttrDir opens the directory whose path under the root is parts
// joined by slashes (each part clean: rdmad's own names and device names
// from the kernel). Close it after use.
func (h *Host) OpenAttrDir(parts ...string) (AttrDir, error) {
	d := AttrDir{h: h, fd: -1}
	if len(parts) <= maxDirParts {
		copy(d.parts[:], parts)
	} else {
		d.rel = strings.Join(parts, "/")
	}
	if _, real := h.io.(OSAttrIO); !real {
		return d, nil
	}
	var p []byte
	if h.prefix == "" { // a root Path must join
		p = []byte(h.Path(d.dir()) + "\x00")
	} else {
		var buf [512]byte // the path is built here, not on the heap, when it fits
		p = append(buf[:0], h.prefix...)
		for i, s := range parts {
			if i > 0 {
				p = append(p, '/')
			}
			p = append(p, s...)
		}
		p = append(p, 0)
	}
	fd, err := openDir(&p[0])
	runtime.KeepAlive(p)
	if err != nil {
		return d, &fs.PathError{Op: "open", Path: h.Path(d.dir()), Err: err}
	}
	d.fd = fd
	return d, nil
}

// atFDCWD is AT_FDCWD as a variable: the constant is negative.
var atFDCWD = unix.AT_FDCWD

// openDir opens the NUL-terminated path at p as a directory: never
// blocking, never the controlling terminal, not inherited.
func openDir(p *byte) (int, error) {
	for {
		fd, _, errno := unix.Syscall6(unix.SYS_OPENAT, uintptr(atFDCWD), uintptr(unsafe.Pointer(p)),
			uintptr(unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NONBLOCK|unix.O_CLOEXEC), 0, 0, 0)
		if errno == unix.EINTR {
			continue
		}
		if errno != 0 {
			return -1, errno
		}
		return int(fd), nil
	}
}

// Close closes the directory.
func (d *AttrDir) Close() {
	if d.fd >= 0 {
		unix.Close(d.fd)
		d.fd = -1
	}
}

// Read reads the attribute name of the directory into buf and returns it
// without its trailing newlines. Only regular files are read (a FIFO or a
// device put in an attribute's place is an error at once), at most
// MaxAttrSize bytes, as ReadAttr does.
func (d *AttrDir) Read(name AttrName, buf *AttrBuf) ([]byte, error) {
	if d.fd < 0 {
		if d.h == nil {
			return nil, &fs.PathError{Op: "open", Path: name.name, Err: fs.ErrClosed}
		}
		b, err := d.h.io.ReadAttr(d.h.Path(d.dir() + "/" + name.name))
		if err != nil {
			return nil, err
		}
		return bytes.TrimRight(b, "\n"), nil
	}
	var fd int
	for {
		r, _, errno := unix.Syscall6(unix.SYS_OPENAT, uintptr(d.fd), uintptr(unsafe.Pointer(&name.z[0])),
			uintptr(unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY), 0, 0, 0)
		if errno == unix.EINTR {
			continue
		}
		if errno != 0 {
			return nil, d.err("open", name, errno)
		}
		fd = int(r)
		break
	}
	runtime.KeepAlive(name.z)
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, d.err("stat", name, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, d.err("open", name, fmt.Errorf("%w (%s)", ErrNotRegular, fileType(st.Mode)))
	}
	n, err := readRetry(fd, buf[:])
	if err != nil {
		return nil, d.err("read", name, err)
	}
	if n > MaxAttrSize {
		return nil, d.err("read", name, fmt.Errorf("%w of %d bytes for an attribute", ErrTooLarge, MaxAttrSize))
	}
	return bytes.TrimRight(buf[:n], "\n"), nil
}

func (d *AttrDir) err(op string, name AttrName, err error) error {
	return &fs.PathError{Op: op, Path: d.h.Path(d.dir() + "/" + name.name), Err: err}
}

// dir is the directory's path relative to the root.
func (d *AttrDir) dir() string {
	if d.rel != "" {
		return d.rel
	}
	n := 0
	for n < maxDirParts && d.parts[n] != "" {
		n++
	}
	return strings.Join(d.parts[:n], "/")
}
