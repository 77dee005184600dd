package capture

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"
	"syscall"

	"github.com/rdmad/rdmad/daemon/host"
)

// maxLinks is how many symlinks one path may go through, as the kernel's
// own limit (MAXSYMLINKS, 40): past it the path is a loop.
const maxLinks = 40

// resolve is rel with every symlink in it followed inside the root (an
// absolute target starts again at the root, ".." stops at it), the last
// element too when followLast. Each link met on the way is written to the
// capture (emit), so the path reads the same in the tree. A loop is ELOOP
// after maxLinks links.
func (c *capturer) resolve(rel string, followLast, emit bool) (string, error) {
	todo := strings.Split(rel, "/")
	var done []string
	links := 0
	// The links met are written once the path resolves: a loop's first
	// link is not left in the capture.
	type met struct{ rel, target string }
	var seen []met
	for len(todo) > 0 {
		name := todo[0]
		todo = todo[1:]
		switch name {
		case "", ".":
			continue
		case "..":
			if len(done) > 0 {
				done = done[:len(done)-1]
			}
			continue
		}
		cur := path.Join(append(done, name)...)
		if len(todo) == 0 && !followLast {
			done = append(done, name)
			break
		}
		st, err := os.Lstat(c.abs(cur))
		if err != nil {
			return "", err
		}
		if st.Mode()&fs.ModeSymlink == 0 {
			done = append(done, name)
			continue
		}
		if links++; links > maxLinks {
			return "", &fs.PathError{Op: "resolve", Path: "/" + rel, Err: syscall.ELOOP}
		}
		target, err := os.Readlink(c.abs(cur))
		if err != nil {
			return "", err
		}
		if emit {
			if _, err := relativeTarget(cur, target); err != nil {
				return "", fmt.Errorf("/%s: %w", cur, err)
			}
			seen = append(seen, met{cur, target})
		}
		if path.IsAbs(target) {
			done = nil
		}
		todo = append(strings.Split(target, "/"), todo...)
	}
	for _, m := range seen {
		c.link(m.rel, m.target)
	}
	return path.Join(done...), nil
}

// kind is what a path is, without following a final symlink.
type kind int

const (
	kindNone kind = iota
	kindFile
	kindDir
	kindLink
	kindOther // FIFO, socket, device
)

// lstat is the kind of rel and its stat (nil when it does not exist).
func (c *capturer) lstat(rel string) (kind, fs.FileInfo) {
	st, err := os.Lstat(c.abs(rel))
	switch {
	case err != nil:
		return kindNone, nil
	case st.Mode()&fs.ModeSymlink != 0:
		return kindLink, st
	case st.Mode().IsRegular():
		return kindFile, st
	case st.IsDir():
		return kindDir, st
	}
	return kindOther, st
}

// list is the names in directory rel, sorted, through rdmad's reader (it
// never blocks on a FIFO put in a directory's place); nil when rel is not
// there. A directory of more than maxListed entries is cut there, and said.
func (c *capturer) list(rel string) []string {
	names, err := host.ReadDirNames(c.abs(rel))
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			c.skip(rel, err)
		}
		return nil
	}
	if len(names) > maxListed {
		c.skip(rel, fmt.Errorf("%d entries: only the first %d captured", len(names), maxListed))
		names = names[:maxListed]
	}
	return names
}

// walked reports whether the source path rel was handled already, and
// marks it.
func (c *capturer) walked(rel string) bool {
	if c.seen[rel] {
		return true
	}
	c.seen[rel] = true
	return false
}
