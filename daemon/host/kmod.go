package host

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"
	"sync"
)

// ProcOSRelease names the running kernel, whose modules directory holds the
// alias and built-in indexes modprobe itself uses.
const ProcOSRelease = "proc/sys/kernel/osrelease"

// moduleIndex is what modprobe knows and /proc/modules does not: that a name
// in a modules list may be an alias (xprtrdma and svcrdma are rpcrdma) or
// built into the kernel. Without it such names look missing on every pass.
type moduleIndex struct {
	key     string              // files and mtimes it was built from
	aliases map[string][]string // plain alias name -> module names
	builtin map[string]bool
}

var noIndex = &moduleIndex{}

type moduleIndexCache struct {
	mu  sync.Mutex
	idx *moduleIndex
}

// MissingModules returns the names among names that the kernel does not
// have: not loaded, not built in, and not an alias of a module that is.
// Names are compared as the kernel does ('-' is '_').
func (h *Host) MissingModules(names []string) ([]string, error) {
	loaded, err := h.LoadedModules()
	if err != nil {
		return nil, err
	}
	idx, err := h.moduleIndex()
	if err != nil {
		return nil, err
	}
	have := func(n string) bool { return loaded[n] || idx.builtin[n] }
	var missing []string
	for _, name := range names {
		n := NormalizeModule(name)
		if have(n) {
			continue
		}
		found := false
		for _, target := range idx.aliases[n] {
			if have(target) {
				found = true
				break
			}
		}
		if !found {
			missing = append(missing, name)
		}
	}
	return missing, nil
}

// moduleIndex reads lib/modules/<release>/modules.{alias,builtin} under the
// root, once per change of those files. A host without them (a fixture, a
// kernel without modules) has an empty index.
func (h *Host) moduleIndex() (*moduleIndex, error) {
	rel, err := h.ReadString(ProcOSRelease)
	if errors.Is(err, fs.ErrNotExist) {
		return noIndex, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", ProcOSRelease, err)
	}
	dir := path.Join("lib/modules", strings.TrimSpace(rel))
	aliasFile, builtinFile := path.Join(dir, "modules.alias"), path.Join(dir, "modules.builtin")
	key := rel + stamp(h.Path(aliasFile)) + stamp(h.Path(builtinFile))

	h.kmod.mu.Lock()
	defer h.kmod.mu.Unlock()
	if h.kmod.idx != nil && h.kmod.idx.key == key {
		return h.kmod.idx, nil
	}
	idx := &moduleIndex{key: key, aliases: map[string][]string{}, builtin: map[string]bool{}}
	if b, err := ReadFileLimit(h.Path(aliasFile), MaxIndexSize); err == nil {
		parseAliases(b, idx.aliases)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("read /%s: %w", aliasFile, err)
	}
	if b, err := ReadFileLimit(h.Path(builtinFile), MaxIndexSize); err == nil {
		parseBuiltin(b, idx.builtin)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("read /%s: %w", builtinFile, err)
	}
	h.kmod.idx = idx
	return idx, nil
}

func stamp(name string) string {
	st, err := os.Stat(name)
	if err != nil {
		return "|-"
	}
	return fmt.Sprintf("|%d.%d", st.ModTime().UnixNano(), st.Size())
}

// parseAliases keeps "alias NAME MODULE" lines whose NAME is a plain word:
// the device-id patterns (pci:v*...) cannot appear in a modules list.
// Lines are split by hand, not by a bufio.Scanner, which stops at its
// first over-long line and would drop every alias after it.
func parseAliases(b []byte, into map[string][]string) {
	for len(b) > 0 {
		var line []byte
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			line, b = b, nil
		}
		if !bytes.HasPrefix(line, []byte("alias")) {
			continue
		}
		f := strings.Fields(string(line))
		if len(f) != 3 || f[0] != "alias" || strings.ContainsAny(f[1], "*?[:") {
			continue
		}
		a := NormalizeModule(f[1])
		into[a] = append(into[a], NormalizeModule(f[2]))
	}
}

// parseBuiltin reads "kernel/fs/configfs/configfs.ko" lines.
func parseBuiltin(b []byte, into map[string]bool) {
	for _, line := range strings.Split(string(b), "\n") {
		if base := path.Base(strings.TrimSpace(line)); strings.HasSuffix(base, ".ko") && len(base) > len(".ko") {
			into[NormalizeModule(strings.TrimSuffix(base, ".ko"))] = true
		}
	}
}

// ModuleDeps reads lib/modules/<release>/modules.dep of the running
// kernel: module -> every module it needs (the file lists them
// transitively), names as the kernel compares them. An error when the
// release or the file cannot be read (a fixture without module indexes).
func (h *Host) ModuleDeps() (map[string][]string, error) {
	b, err := ReadAttr(h.InRoot(ProcOSRelease))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", ProcOSRelease, err)
	}
	rel := strings.TrimSpace(string(b))
	if rel == "" {
		return nil, fmt.Errorf("read %s: empty", ProcOSRelease)
	}
	depFile := path.Join("lib/modules", rel, "modules.dep")
	data, err := ReadFileLimit(h.InRoot(depFile), MaxIndexSize)
	if err != nil {
		return nil, fmt.Errorf("read /%s: %w", depFile, err)
	}
	deps := map[string][]string{}
	for _, line := range strings.Split(string(data), "\n") {
		mod, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		var list []string
		for _, p := range strings.Fields(rest) {
			list = append(list, moduleFileName(p))
		}
		deps[moduleFileName(mod)] = list
	}
	return deps, nil
}

// moduleFileName turns "kernel/drivers/infiniband/core/ib_core.ko.xz"
// into "ib_core".
func moduleFileName(p string) string {
	base := path.Base(strings.TrimSpace(p))
	if i := strings.Index(base, ".ko"); i >= 0 {
		base = base[:i]
	}
	return NormalizeModule(base)
}
