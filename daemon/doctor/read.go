package doctor

import (
	"bytes"
	"os"
	"strings"

	"github.com/rdmad/rdmad/daemon/host"
)

// Every host file doctor reads goes through host's bounded reader
// (host.ReadAttr, host.ReadFileLimit, host.ReadDirNames): regular files
// only, opened without blocking (a FIFO answers at once), size-capped, so
// nothing on the host can wedge or blind the daemon that answers Diagnose.
// The helpers below only add what doctor needs on top: paths under the
// root (host.InRoot), lines, and "" for an attribute that cannot be read.

// Size caps by kind of file.
const (
	capAttr   = host.MaxAttrSize
	capConfig = host.MaxConfigSize
	capIndex  = host.MaxIndexSize // /proc/net/tcp, /proc/net/unix
)

// boundedRead reads rel whole if it is a regular file of at most limit
// bytes.
func boundedRead(h *host.Host, rel string, limit int) ([]byte, error) {
	return host.ReadFileLimit(h.InRoot(rel), limit)
}

// readAttr reads a short attribute and trims it; "" when it cannot be read.
func readAttr(h *host.Host, rel string) string {
	b, err := host.ReadAttr(h.InRoot(rel))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// boundedLines calls fn for each line of rel (without its newline) until fn
// returns false. The file is read whole first, within limit: a file over
// it yields no line at all (half a configuration file would mislead).
func boundedLines(h *host.Host, rel string, limit int, fn func(line string) bool) error {
	b, err := boundedRead(h, rel, limit)
	if err != nil {
		return err
	}
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		if !fn(string(line)) {
			return nil
		}
	}
	return nil
}

// boundedDir lists the entry names of rel, sorted.
func boundedDir(h *host.Host, rel string) ([]string, error) {
	return host.ReadDirNames(h.InRoot(rel))
}

// exists reports whether rel exists under the root (without following a
// final symlink out of it).
func exists(h *host.Host, rel string) bool {
	_, err := os.Lstat(h.Path(rel))
	return err == nil
}

// readlinkHost reads the symlink rel (sysfs links are relative).
func readlinkHost(h *host.Host, rel string) (string, error) {
	return os.Readlink(h.Path(rel))
}

// isDir reports whether rel is a directory (following links inside the root).
func isDir(h *host.Host, rel string) bool {
	st, err := os.Stat(h.InRoot(rel))
	return err == nil && st.IsDir()
}

// masked reports whether rel is a symlink to /dev/null (a masked unit).
func masked(h *host.Host, rel string) bool {
	t, err := os.Readlink(h.Path(rel))
	return err == nil && t == "/dev/null"
}
