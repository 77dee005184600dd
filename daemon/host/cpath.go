package host

import (
	"bytes"
	"fmt"
	"io/fs"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The reads and writes of a pass, by path under the root, without the two
// copies of the path each would make on the heap (Path's string, the
// system call's NUL-terminated copy): the path is built once, on the
// stack. A pass makes thousands of them at 1,024 devices. Errors name the
// path as the other primitives do.

// pathBuf holds a path being built for a system call.
type pathBuf [512]byte

// cpath is rel under the root, NUL-terminated, in buf when it fits (on the
// heap otherwise); ok is false when rel must take Path's way (not clean,
// or a root Path joins).
func (h *Host) cpath(buf *pathBuf, rel string) (p []byte, ok bool) {
	if h.prefix == "" || !cleanRel(rel) {
		return nil, false
	}
	p = append(buf[:0], h.prefix...)
	p = append(p, rel...)
	return append(p, 0), true
}

// openatIn opens the NUL-terminated path p relative to the directory
// dirfd, retrying on EINTR.
func openatIn(dirfd int, p []byte, flags int) (int, error) {
	for {
		fd, _, errno := unix.Syscall6(unix.SYS_OPENAT, uintptr(dirfd), uintptr(unsafe.Pointer(&p[0])),
			uintptr(flags|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY), 0, 0, 0)
		runtime.KeepAlive(p)
		if errno == unix.EINTR {
			continue
		}
		if errno != 0 {
			return -1, errno
		}
		return int(fd), nil
	}
}

// openRegularRel is openRegular of rel under the root.
func (h *Host) openRegularRel(rel string, flags int) (int, error) {
	var buf pathBuf
	p, ok := h.cpath(&buf, rel)
	if !ok {
		return openRegular(h.Path(rel), flags)
	}
	return openRegularIn(atFDCWD, p, flags, func() string { return h.Path(rel) })
}

// openRegularIn is openRegular of the NUL-terminated path p relative to
// dirfd; name is its path, for errors.
func openRegularIn(dirfd int, p []byte, flags int, name func() string) (int, error) {
	fd, err := openatIn(dirfd, p, flags)
	if err != nil {
		return -1, &fs.PathError{Op: "open", Path: name(), Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, &fs.PathError{Op: "stat", Path: name(), Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return -1, &fs.PathError{Op: "open", Path: name(), Err: fmt.Errorf("%w (%s)", ErrNotRegular, fileType(st.Mode))}
	}
	return fd, nil
}

// readAttrFD reads the attribute open at fd as readAttrString does,
// closing fd; name is its path, for errors.
func readAttrFD(fd int, name func() string) (string, error) {
	defer unix.Close(fd)
	var buf [MaxAttrSize + 1]byte
	n, err := readRetry(fd, buf[:])
	if err != nil {
		return "", &fs.PathError{Op: "read", Path: name(), Err: err}
	}
	if n > MaxAttrSize {
		return "", &fs.PathError{Op: "read", Path: name(), Err: fmt.Errorf("%w of %d bytes for an attribute", ErrTooLarge, MaxAttrSize)}
	}
	return string(bytes.TrimRight(buf[:n], "\n")), nil
}

// readlinkIn is readlinkat of the NUL-terminated path p relative to
// dirfd, into a stack buffer; long is the way for a target that may not
// fit.
func readlinkIn(dirfd int, p []byte, name func() string, long func() (string, error)) (string, error) {
	var target [256]byte
	for {
		n, _, errno := unix.Syscall6(unix.SYS_READLINKAT, uintptr(dirfd), uintptr(unsafe.Pointer(&p[0])),
			uintptr(unsafe.Pointer(&target[0])), uintptr(len(target)), 0, 0)
		runtime.KeepAlive(p)
		switch {
		case errno == unix.EINTR:
			continue
		case errno != 0:
			return "", &fs.PathError{Op: "readlink", Path: name(), Err: errno}
		case int(n) == len(target): // may be cut: the long way
			return long()
		}
		return string(target[:n]), nil
	}
}

// readAttrStringRel is ReadAttr of rel under the root, as a string
// without its trailing newlines, copied once.
func (h *Host) readAttrStringRel(rel string) (string, error) {
	fd, err := h.openRegularRel(rel, unix.O_RDONLY)
	if err != nil {
		return "", err
	}
	return readAttrFD(fd, func() string { return h.Path(rel) })
}

// writeAttrRel is WriteAttr of rel under the root.
func (h *Host) writeAttrRel(rel string, data []byte) error {
	fd, err := h.openRegularRel(rel, unix.O_WRONLY|unix.O_TRUNC)
	if err != nil {
		return err
	}
	return writeFD(fd, data, func() string { return h.Path(rel) })
}

// writeFD writes data to the attribute open at fd as WriteAttr does,
// closing fd; name is its path, for errors.
func writeFD(fd int, data []byte, name func() string) error {
	n, err := writeRetry(fd, data)
	cerr := unix.Close(fd)
	switch {
	case err != nil:
		return &fs.PathError{Op: "write", Path: name(), Err: err}
	case n != len(data):
		return &fs.PathError{Op: "write", Path: name(), Err: fmt.Errorf("short write: %d of %d bytes", n, len(data))}
	case cerr != nil:
		return &fs.PathError{Op: "close", Path: name(), Err: cerr}
	}
	return nil
}
