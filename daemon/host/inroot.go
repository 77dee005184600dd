package host

import (
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// InRoot is Path(rel) with a final symlink whose target is absolute
// followed inside the root: a file in a --root tree linked to /usr/lib/...
// must not be read from the machine rdmad runs on. Relative links resolve
// as the kernel resolves them; a link to /dev/null (a masked unit) is kept,
// for the caller to tell.
func (h *Host) InRoot(rel string) string {
	p := h.Path(rel)
	for i := 0; i < 8; i++ {
		st, err := os.Lstat(p)
		if err != nil || st.Mode()&fs.ModeSymlink == 0 {
			return p
		}
		target, err := os.Readlink(p)
		if err != nil || !filepath.IsAbs(target) || target == "/dev/null" {
			return p
		}
		p = h.Path(target)
	}
	return p
}

// DropIns lists "<dir>/*<suffix>" across dirs the way systemd, modprobe
// and dracut merge drop-in directories: sorted by file name, and a name in
// an earlier directory hides the same name in later ones. Paths are
// relative to the root; a directory that cannot be read adds nothing.
func (h *Host) DropIns(suffix string, dirs ...string) []string {
	seen := map[string]string{}
	for _, dir := range dirs {
		names, err := ReadDirNames(h.InRoot(dir))
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
