package host

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"strings"

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
	fd    int                 // the descriptor, when open
	open  bool                // false: read through h's AttrIO (a test's), or not open
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
	d := AttrDir{h: h}
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
	fd, err := openatIn(atFDCWD, p, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return d, &fs.PathError{Op: "open", Path: h.Path(d.dir()), Err: err}
	}
	d.fd, d.open = fd, true
	return d, nil
}

// atFDCWD is AT_FDCWD as a variable: the constant is negative.
var atFDCWD = unix.AT_FDCWD

// Close closes the directory.
func (d *AttrDir) Close() {
	if d.open {
		unix.Close(d.fd)
		d.open = false
	}
}

// Read reads the attribute name of the directory into buf and returns it
// without its trailing newlines. Only regular files are read (a FIFO or a
// device put in an attribute's place is an error at once), at most
// MaxAttrSize bytes, as ReadAttr does.
func (d *AttrDir) Read(name AttrName, buf *AttrBuf) ([]byte, error) {
	if !d.open {
		if d.h == nil {
			return nil, &fs.PathError{Op: "open", Path: name.name, Err: fs.ErrClosed}
		}
		b, err := d.h.io.ReadAttr(d.h.Path(d.dir() + "/" + name.name))
		if err != nil {
			return nil, err
		}
		return bytes.TrimRight(b, "\n"), nil
	}
	fd, err := openRegularIn(d.fd, name.z, unix.O_RDONLY, func() string { return d.path(name.name) })
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	n, err := readRetry(fd, buf[:])
	if err != nil {
		return nil, d.err("read", name, err)
	}
	if n > MaxAttrSize {
		return nil, d.err("read", name, fmt.Errorf("%w of %d bytes for an attribute", ErrTooLarge, MaxAttrSize))
	}
	return bytes.TrimRight(buf[:n], "\n"), nil
}

// ReadString reads the attribute name (a clean path below the directory)
// as Host.ReadString does, its name built on the stack.
func (d *AttrDir) ReadString(name string) (string, error) {
	if !d.open {
		return d.h.ReadString(d.dir() + "/" + name)
	}
	var nb pathBuf
	path := func() string { return d.path(name) }
	fd, err := openRegularIn(d.fd, append(append(nb[:0], name...), 0), unix.O_RDONLY, path)
	if err != nil {
		return "", err
	}
	return readAttrFD(fd, path)
}

// WriteString writes the attribute name (a clean path below the
// directory) as Host.WriteString does.
func (d *AttrDir) WriteString(name, value string) error {
	if !d.open {
		return d.h.WriteString(d.dir()+"/"+name, value)
	}
	var nb pathBuf
	path := func() string { return d.path(name) }
	fd, err := openRegularIn(d.fd, append(append(nb[:0], name...), 0), unix.O_WRONLY|unix.O_TRUNC, path)
	if err != nil {
		return err
	}
	return writeFD(fd, []byte(value), path)
}

// Open reports whether the directory is open: false when OpenAttrDir
// failed, or the host's AttrIO is a test's (its reads and writes then
// take the path from the root).
func (d *AttrDir) Open() bool { return d.open }

// Readlink is the target of the symbolic link name below the directory.
func (d *AttrDir) Readlink(name string) (string, error) {
	long := func() (string, error) { return os.Readlink(d.path(name)) }
	if !d.open {
		return long()
	}
	var nb pathBuf
	return readlinkIn(d.fd, append(append(nb[:0], name...), 0), func() string { return d.path(name) }, long)
}

// ReadDirNames lists the entries of the directory name below the
// directory, sorted, as Host.ReadDirNames does.
func (d *AttrDir) ReadDirNames(name string) ([]string, error) {
	if !d.open {
		return d.h.ReadDirNames(d.dir() + "/" + name)
	}
	var nb pathBuf
	fd, err := openatIn(d.fd, append(append(nb[:0], name...), 0), unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: d.path(name), Err: err}
	}
	defer unix.Close(fd)
	ents, err := readDirentsOpen(fd, func() string { return d.path(name) }, TrustAny)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(ents))
	for i, e := range ents {
		names[i] = e.name
	}
	return names, nil
}

// path is the full path of name below the directory.
func (d *AttrDir) path(name string) string { return d.h.Path(d.dir() + "/" + name) }

func (d *AttrDir) err(op string, name AttrName, err error) error {
	return &fs.PathError{Op: op, Path: d.path(name.name), Err: err}
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
