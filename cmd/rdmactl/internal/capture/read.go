package capture

import (
	"errors"
	"fmt"
	"io/fs"
	"path"

	"github.com/rdmad/rdmad/daemon/host"
)

// A reader captures one regular file, rel, whose stat is st.
type reader func(rel string, st fs.FileInfo)

// fileAt captures rel when it is a file: a regular file through read; a
// symlink written as it is, and the regular file it leads to (inside the
// root) through read too. A link to nothing is written alone (a unit
// masked by a link to /dev/null is one). A FIFO, a socket or a device, or
// a link to one, is skipped, named; a directory is left to the caller.
func (c *capturer) fileAt(rel string, read reader) {
	k, st := c.lstat(rel)
	switch k {
	case kindFile:
		read(rel, st)
	case kindOther:
		c.skip(rel, notRegular(st))
	case kindLink:
		if t, err := c.readlink(rel); err == nil && t == "/dev/null" {
			c.link(rel, t) // a masked unit: the link is what counts
			return
		}
		target, err := c.resolve(rel, true, false)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			c.skip(rel, err)
			return
		}
		tk, tst := kindNone, fs.FileInfo(nil)
		if err == nil {
			tk, tst = c.lstat(target)
		}
		switch tk {
		case kindOther:
			c.skip(rel, notRegular(tst))
			return
		case kindFile:
			// The directories on the way (merged /usr's lib -> usr/lib)
			// are written as links too.
			if t, err := c.resolve(rel, true, true); err != nil || t != target {
				if err != nil {
					c.skip(rel, err)
				}
				return
			}
			read(target, tst)
		}
		if target, err := c.readlink(rel); err == nil {
			c.link(rel, target)
		}
	}
}

// notRegular is the error of a path that is not a regular file, as
// rdmad's readers word it.
func notRegular(st fs.FileInfo) error {
	return fmt.Errorf("%w (%s)", host.ErrNotRegular, typeOf(st.Mode()))
}

func typeOf(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m.IsDir():
		return "a directory"
	}
	return "mode " + m.String()
}

// files captures the files directly in directory rel (not its
// subdirectories), and rel itself, so an empty directory is there too.
func (c *capturer) files(rel string, read reader) {
	dir, ok := c.enterDir(rel)
	if !ok {
		return
	}
	for _, n := range c.list(dir) {
		c.fileAt(path.Join(dir, n), read)
	}
}

// tree captures directory rel with everything under it, to maxDepth. A
// link to a directory is written, not walked: what it leads to is the
// host's, not this tree's.
func (c *capturer) tree(rel string, read reader) {
	dir, ok := c.enterDir(rel)
	if !ok {
		return
	}
	c.walkTree(dir, read, 0)
}

func (c *capturer) walkTree(dir string, read reader, depth int) {
	if depth > maxDepth {
		c.skip(dir, fmt.Errorf("more than %d directories deep", maxDepth))
		return
	}
	for _, n := range c.list(dir) {
		rel := path.Join(dir, n)
		switch k, _ := c.lstat(rel); k {
		case kindDir:
			if !c.walked(rel) {
				c.dir(rel)
				c.walkTree(rel, read, depth+1)
			}
		default:
			c.fileAt(rel, read)
		}
	}
}

// enterDir is directory rel resolved (the links on the way written), and
// the directory itself written; ok is false when it is not a directory.
func (c *capturer) enterDir(rel string) (string, bool) {
	dir, err := c.resolve(rel, true, true)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			c.skip(rel, err)
		}
		return "", false
	}
	switch k, st := c.lstat(dir); k {
	case kindDir:
		c.dir(dir)
		return dir, true
	case kindOther:
		c.skip(rel, notRegular(st))
	}
	return "", false
}

// readAttr is the reader of a sysfs, configfs or /proc attribute: one read
// of at most a page, as rdmad reads one. An attribute that answers an error
// (EINVAL, EOPNOTSUPP, EIO: an empty GID entry, a counter the driver does
// not keep) is captured empty, which rdmad reads as it reads the error:
// no value.
func (c *capturer) readAttr(rel string, _ fs.FileInfo) {
	data, err := host.ReadAttr(c.abs(rel))
	switch {
	case err == nil:
	case errors.Is(err, host.ErrNotRegular) || errors.Is(err, host.ErrTooLarge):
		c.skip(rel, err)
		return
	case errors.Is(err, fs.ErrNotExist):
		return
	default:
		c.res.Unreadable++
		data = nil
	}
	c.file(rel, data, 0o644, timeZero)
}

// attrRead is an attribute read and not yet written.
type attrRead struct {
	rel        string
	data       []byte
	unreadable bool
	read       func(rel string, st fs.FileInfo) // not a plain file: captured by fileAt when written
}

// readAttrData reads the attribute rel for a later emit: a regular file's
// text now, anything else (a link, a FIFO) handled as fileAt handles it
// then.
func (c *capturer) readAttrData(rel string) attrRead {
	k, _ := c.lstat(rel)
	switch k {
	case kindNone, kindDir:
		return attrRead{}
	case kindFile:
		data, err := host.ReadAttr(c.abs(rel))
		if err == nil || !errors.Is(err, host.ErrNotRegular) && !errors.Is(err, host.ErrTooLarge) && !errors.Is(err, fs.ErrNotExist) {
			return attrRead{rel: rel, data: data, unreadable: err != nil}
		}
	}
	return attrRead{rel: rel, read: c.readAttr}
}

func (a attrRead) emit(c *capturer) {
	switch {
	case a.rel == "":
	case a.read != nil:
		c.fileAt(a.rel, a.read)
	default:
		if a.unreadable {
			c.res.Unreadable++
		}
		c.file(a.rel, a.data, 0o644, timeZero)
	}
}

// readFile is the reader of a configuration file of at most limit bytes,
// as rdmad and doctor read theirs (a file over the limit is skipped, not
// cut: half a file would say something else), with its time and mode.
func (c *capturer) readFile(limit int) reader {
	return func(rel string, st fs.FileInfo) {
		data, err := host.ReadFileLimit(c.abs(rel), limit)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				c.skip(rel, err)
			}
			return
		}
		c.file(rel, data, st.Mode().Perm(), st.ModTime())
	}
}

// readConfig reads a configuration file (host.MaxConfigSize).
func (c *capturer) readConfig(rel string, st fs.FileInfo) { c.readFile(host.MaxConfigSize)(rel, st) }

// presence captures that rel exists and when it changed, not what it
// holds: an empty file of the same name and time (doctor asks only
// whether it is there, or compares its time with another file's).
func (c *capturer) presence(rel string, st fs.FileInfo) {
	c.file(rel, nil, st.Mode().Perm(), st.ModTime())
}

// filtered reads a configuration file and captures what keep makes of it:
// the part rdmad or doctor reads, without what they do not (and may name
// the host's users or its other services).
func (c *capturer) filtered(limit int, keep func([]byte) []byte) reader {
	return func(rel string, st fs.FileInfo) {
		data, err := host.ReadFileLimit(c.abs(rel), limit)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				c.skip(rel, err)
			}
			return
		}
		c.file(rel, keep(data), st.Mode().Perm(), st.ModTime())
	}
}
