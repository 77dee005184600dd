package doctor

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/rdmad/rdmad/daemon/host"
)

// The reads below are doctor's own bounded reader, to be replaced by the
// shared one in daemon/host once it exists: every host file doctor opens
// goes through boundedRead, boundedLines or boundedDir, which refuse what is
// not a regular file (a FIFO would block, a device file could be endless)
// and stop at a size cap, so no file on the host can wedge or blind the
// daemon that answers Diagnose.

// Size caps by kind of file.
const (
	capAttr   = 4 << 10  // a sysfs or procfs attribute
	capConfig = 1 << 20  // a configuration file (limits.conf, nfs.conf, a unit...)
	capIndex  = 16 << 20 // modules.dep, /proc/net/tcp
	capDir    = 4096     // entries read from one directory
)

var (
	errNotRegular = errors.New("not a regular file")
	errTooLarge   = errors.New("larger than doctor reads")
)

// hostPath resolves rel under the host root. A final symlink with an
// absolute target is followed inside the root (a unit file linked to
// /usr/lib/... in a --root tree must not be read from the machine running
// the tests); relative links resolve as the kernel resolves them.
func hostPath(h *host.Host, rel string) string {
	p := h.Path(rel)
	for i := 0; i < 8; i++ {
		st, err := os.Lstat(p)
		if err != nil || st.Mode()&fs.ModeSymlink == 0 {
			return p
		}
		target, err := os.Readlink(p)
		if err != nil || !filepath.IsAbs(target) {
			return p
		}
		if target == "/dev/null" { // a masked unit: keep the link, callers check for it
			return p
		}
		p = h.Path(target)
	}
	return p
}

// openBounded opens rel for reading if it is a regular file. O_NONBLOCK
// keeps open(2) of a FIFO from waiting for a writer.
func openBounded(h *host.Host, rel string) (*os.File, error) {
	f, err := os.OpenFile(hostPath(h, rel), os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("/%s: %w", rel, errNotRegular)
	}
	return f, nil
}

// boundedRead reads rel whole if it is a regular file of at most limit
// bytes.
func boundedRead(h *host.Host, rel string, limit int64) ([]byte, error) {
	f, err := openBounded(h, rel)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("/%s: %w", rel, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("/%s: %w (%d bytes)", rel, errTooLarge, limit)
	}
	return b, nil
}

// readAttr reads a short attribute and trims it; "" when it cannot be read.
func readAttr(h *host.Host, rel string) string {
	b, err := boundedRead(h, rel, capAttr)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// boundedLines calls fn for each line of rel (without its newline) until fn
// returns false, reading at most limit bytes. A file whose size is known to
// be over the limit is refused before any line is read (half a
// configuration file would mislead); a procfs file, whose size reads as 0,
// is cut at the limit with an error after the lines read so far.
func boundedLines(h *host.Host, rel string, limit int64, fn func(line string) bool) error {
	f, err := openBounded(h, rel)
	if err != nil {
		return err
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > limit {
		return fmt.Errorf("/%s: %w (%d bytes)", rel, errTooLarge, limit)
	}
	lr := &io.LimitedReader{R: f, N: limit + 1}
	sc := bufio.NewScanner(lr)
	sc.Buffer(make([]byte, 0, 4096), 64<<10)
	for sc.Scan() {
		if !fn(sc.Text()) {
			return nil
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("/%s: %w", rel, err)
	}
	if lr.N <= 0 {
		return fmt.Errorf("/%s: %w (%d bytes)", rel, errTooLarge, limit)
	}
	return nil
}

// boundedDir lists at most capDir entry names of rel, sorted.
func boundedDir(h *host.Host, rel string) ([]string, error) {
	d, err := os.Open(hostPath(h, rel))
	if err != nil {
		return nil, err
	}
	defer d.Close()
	names, err := d.Readdirnames(capDir)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("/%s: %w", rel, err)
	}
	sort.Strings(names)
	return names, nil
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
	st, err := os.Stat(hostPath(h, rel))
	return err == nil && st.IsDir()
}

// masked reports whether rel is a symlink to /dev/null (a masked unit).
func masked(h *host.Host, rel string) bool {
	t, err := os.Readlink(h.Path(rel))
	return err == nil && t == "/dev/null"
}

// confFiles lists "<dir>/*<suffix>" across dirs the way systemd and
// modprobe merge drop-in directories: sorted by file name, and a name in an
// earlier directory hides the same name in later ones. It returns paths
// relative to the root.
func confFiles(h *host.Host, suffix string, dirs ...string) []string {
	seen := map[string]string{}
	for _, dir := range dirs {
		names, err := boundedDir(h, dir)
		if err != nil {
			continue
		}
		for _, n := range names {
			if !strings.HasSuffix(n, suffix) || strings.HasPrefix(n, ".") {
				continue
			}
			if _, ok := seen[n]; !ok {
				seen[n] = path.Join(dir, n)
			}
		}
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]string, 0, len(names))
	for _, n := range names {
		out = append(out, seen[n])
	}
	return out
}

// printable makes s safe to publish: invalid UTF-8 bytes and control
// characters become \xNN, so a finding stays one valid UTF-8 line whatever
// bytes a file or interface name holds.
func printable(s string) string {
	clean := true
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && n == 1) || r < 0x20 || r == 0x7f {
			clean = false
			break
		}
		i += n
	}
	if clean {
		return s
	}
	var b bytes.Buffer
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && n == 1) || r < 0x20 || r == 0x7f {
			fmt.Fprintf(&b, `\x%02x`, s[i])
			i++
			continue
		}
		b.WriteString(s[i : i+n])
		i += n
	}
	return b.String()
}
