// Package initramfs tells whether a kernel module loads from the running
// kernel's initramfs, and whether that image predates a module option
// file: a modprobe.d option reaches a module loaded from the initramfs
// only through the image's own copy of modprobe.d, so an image built
// before the file changed gives the next boot the old option.
//
// It does not unpack the image (compressed cpio; the tools that list it
// are not there under --root): it tells from the generator's configuration
// whether the module is in it (initramfs-tools' modules list, dracut's
// drivers and its rdma module), and from file times whether the image
// predates the option. Every read goes through host's bounded readers.
// The parts that write option files judge what a stale image means.
package initramfs

import (
	"bytes"
	"fmt"
	"os"
	"strings"

	"github.com/rdmad/rdmad/daemon/host"
)

// Generator is the tool that builds the host's initramfs.
type Generator int

const (
	// NoGenerator: neither initramfs-tools nor dracut is configured.
	NoGenerator Generator = iota
	// InitramfsTools is Debian's and Ubuntu's (update-initramfs).
	InitramfsTools
	// Dracut is RHEL's, Fedora's and SUSE's.
	Dracut
)

// Module is the module whose options are asked about.
type Module struct {
	// Brings reports whether a module the generator's configuration lists
	// brings it into the image (Named, Needing).
	Brings func(module string) bool
	// RDMADracutModule: dracut's rdma module brings it too (ib_core).
	RDMADracutModule bool
}

// Named is a module that only its own name brings into the image.
func Named(module string) func(string) bool {
	want := host.NormalizeModule(module)
	return func(m string) bool { return host.NormalizeModule(m) == want }
}

// Needing is a module that its own name brings into the image, and so
// does every module that needs it by the running kernel's modules.dep
// (read once, at the first module that is not it; without modules.dep,
// only its name).
func Needing(h *host.Host, module string) func(string) bool {
	want := host.NormalizeModule(module)
	var deps map[string][]string
	read := false
	return func(m string) bool {
		m = host.NormalizeModule(m)
		if m == want {
			return true
		}
		if !read {
			deps, _ = h.ModuleDeps()
			read = true
		}
		for _, dep := range deps[m] {
			if dep == want {
				return true
			}
		}
		return false
	}
}

// Source is the line of the generator's configuration that puts the
// module into the image.
type Source struct {
	File string // relative to the root
	Line int    // 1-based
	// Key is dracut's key (add_drivers, force_drivers, drivers,
	// add_dracutmodules, dracutmodules); "" for initramfs-tools' modules
	// list.
	Key string
	// Listed is the module the line lists, "" when it adds dracut's rdma
	// module.
	Listed string
}

// String is the source as a finding quotes it: "/etc/initramfs-tools/modules
// lists mlx4_ib", "add_drivers at /etc/dracut.conf.d/50-ib.conf:2 adds
// mlx4_ib", "add_dracutmodules at /etc/dracut.conf:3 adds the rdma module".
func (s Source) String() string {
	switch {
	case s.Key == "":
		return "/" + s.File + " lists " + s.Listed
	case s.Listed == "":
		return fmt.Sprintf("%s at /%s:%d adds the rdma module", s.Key, s.File, s.Line)
	}
	return fmt.Sprintf("%s at /%s:%d adds %s", s.Key, s.File, s.Line, s.Listed)
}

// Boot is what the next boot does with the module and its option file.
type Boot struct {
	Generator Generator
	// Image is the running kernel's initramfs, relative to the root
	// ("boot/initrd.img-6.1.0-28-amd64"); Rebuild the command that builds
	// it again ("update-initramfs -u -k 6.1.0-28-amd64"). Both "" without
	// a generator or a kernel release.
	Image, Rebuild string
	// FromInitramfs: the module loads from the initramfs, as From says.
	FromInitramfs bool
	From          Source
	// Stale: the module loads from the initramfs and the image is older
	// than the option file (both exist).
	Stale bool
}

// Generators' configuration.
const (
	initramfsToolsDir     = "etc/initramfs-tools"
	initramfsToolsModules = "etc/initramfs-tools/modules"
	dracutConf            = "etc/dracut.conf"
	dracutConfDir         = "etc/dracut.conf.d"
	dracutLibConfDir      = "usr/lib/dracut/dracut.conf.d"
	dracutLibDir          = "usr/lib/dracut"
)

// Read tells how the next boot loads m, whose options optionFile
// (relative to the root) sets.
func Read(h *host.Host, optionFile string, m Module) Boot {
	var b Boot
	rel, err := host.ReadAttr(h.InRoot(host.ProcOSRelease))
	release := strings.TrimSpace(string(rel))
	if err != nil || release == "" {
		return b
	}
	switch {
	case isDir(h, initramfsToolsDir):
		b.Generator, b.Image, b.Rebuild = InitramfsTools, "boot/initrd.img-"+release, "update-initramfs -u -k "+release
		b.From, b.FromInitramfs = initramfsToolsLists(h, m)
	case exists(h, dracutConf) || isDir(h, dracutConfDir) || isDir(h, dracutLibDir):
		b.Generator, b.Image, b.Rebuild = Dracut, "boot/initramfs-"+release+".img", "dracut -f --kver "+release
		b.From, b.FromInitramfs = dracutAdds(h, m)
	default:
		return b
	}
	if !b.FromInitramfs {
		return b
	}
	img, err1 := os.Stat(h.InRoot(b.Image))
	opt, err2 := os.Stat(h.InRoot(optionFile))
	b.Stale = err1 == nil && err2 == nil && opt.ModTime().After(img.ModTime())
	return b
}

// initramfsToolsLists: /etc/initramfs-tools/modules lists a module that
// brings m (Debian's MODULES=most takes no InfiniBand driver on its own).
func initramfsToolsLists(h *host.Host, m Module) (Source, bool) {
	var src Source
	found := false
	lines(h, initramfsToolsModules, func(n int, line string) bool {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			return true
		}
		if m.Brings(f[0]) {
			src, found = Source{File: initramfsToolsModules, Line: n, Listed: f[0]}, true
		}
		return !found
	})
	return src, found
}

// dracutAdds: dracut.conf or a dracut.conf.d drop-in adds a driver that
// brings m, or (RDMADracutModule) dracut's rdma module. The last item of
// the first line that adds one is the source.
func dracutAdds(h *host.Host, m Module) (Source, bool) {
	var files []string
	if exists(h, dracutConf) {
		files = append(files, dracutConf)
	}
	files = append(files, h.DropIns(".conf", dracutConfDir, dracutLibConfDir)...)
	var src Source
	found := false
	for _, f := range files {
		lines(h, f, func(n int, line string) bool {
			k, v, ok := strings.Cut(strings.TrimSpace(line), "=")
			if !ok || strings.HasPrefix(k, "#") {
				return true
			}
			key := strings.TrimSuffix(strings.TrimSpace(k), "+")
			for _, item := range strings.Fields(strings.Trim(strings.TrimSpace(v), `"'`)) {
				switch {
				case (key == "add_drivers" || key == "force_drivers" || key == "drivers") && m.Brings(item):
					src, found = Source{File: f, Line: n, Key: key, Listed: item}, true
				case m.RDMADracutModule && (key == "add_dracutmodules" || key == "dracutmodules") && item == "rdma":
					src, found = Source{File: f, Line: n, Key: key}, true
				}
			}
			return !found
		})
		if found {
			return src, true
		}
	}
	return Source{}, false
}

// lines calls fn with each line of rel and its number until fn returns
// false. The file is read whole first, within host.MaxConfigSize: a file
// over it yields no line at all (half a configuration would mislead).
func lines(h *host.Host, rel string, fn func(n int, line string) bool) {
	data, err := host.ReadFileLimit(h.InRoot(rel), host.MaxConfigSize)
	if err != nil {
		return
	}
	for n := 1; len(data) > 0; n++ {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		if !fn(n, string(line)) {
			return
		}
	}
}

// exists reports whether rel exists under the root (a final symlink not
// followed).
func exists(h *host.Host, rel string) bool {
	_, err := os.Lstat(h.Path(rel))
	return err == nil
}

// isDir reports whether rel is a directory (links followed inside the
// root).
func isDir(h *host.Host, rel string) bool {
	st, err := os.Stat(h.InRoot(rel))
	return err == nil && st.IsDir()
}
