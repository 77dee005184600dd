package doctor

import (
	"fmt"
	"os"
	"strings"

	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/netns"
	"github.com/rdmad/rdmad/daemon/qos"
)

// The initramfs check: a module option file rdmad writes reaches a module
// loaded from the initramfs only through the image's copy of modprobe.d,
// so an image built before the file changed gives the next boot the old
// option. Doctor judges the image against the files the parts name: the
// RDMA netns mode's (the netns part judges the mode itself, in its records
// and checks) and the mlx4_en PFC options (the qos part judges QoS).

// checkNetnsInitramfs: the modprobe.d option that gives ib_core its RDMA
// netns mode at boot.
func (d *diag) checkNetnsInitramfs() {
	if f := netns.BootMode(d.h).File; f != "" {
		d.checkInitramfs(f, initramfsCheck{
			id: "netns-initramfs-stale", module: "ib_core", needs: d.needsIBCore, rdmaModule: true,
			consequence: "the next boot starts ib_core in the old RDMA netns mode",
		})
	}
}

// checkMLX4Initramfs: rdmad's mlx4_en PFC options.
func (d *diag) checkMLX4Initramfs() {
	if exists(d.h, qos.MLX4File) {
		d.checkInitramfs(qos.MLX4File, initramfsCheck{
			id: "qos-mlx4-initramfs-stale", module: "mlx4_en",
			needs:       func(m string) bool { return host.NormalizeModule(m) == "mlx4_en" },
			consequence: "the next boot loads mlx4_en with the old PFC options",
		})
	}
}

// checkInitramfs: a modprobe.d option reaches ib_core only through the
// copy of modprobe.d inside the initramfs when ib_core loads from there.
// Doctor does not unpack the image (compressed cpio; the tools that list it
// are not there under --root): it tells from the generator's configuration
// whether ib_core is in it, and from file times whether the image predates
// the option.
// initramfsCheck says which module's options checkInitramfs is about.
type initramfsCheck struct {
	id          string                   // the finding's id
	module      string                   // the module the option is for
	needs       func(module string) bool // whether a module listed for the initramfs brings it
	rdmaModule  bool                     // dracut's rdma module brings it too
	consequence string                   // what a stale image means at the next boot
}

func (d *diag) checkInitramfs(optionFile string, c initramfsCheck) {
	rel := readAttr(d.h, host.ProcOSRelease)
	if rel == "" {
		return
	}
	var image, fix, why string
	switch {
	case isDir(d.h, "etc/initramfs-tools"):
		image, fix = "boot/initrd.img-"+rel, "update-initramfs -u -k "+rel
		why = d.initramfsToolsHas(c.needs)
	case exists(d.h, "etc/dracut.conf") || isDir(d.h, "etc/dracut.conf.d") || isDir(d.h, "usr/lib/dracut"):
		image, fix = "boot/initramfs-"+rel+".img", "dracut -f --kver "+rel
		why = d.dracutHas(c.needs, c.rdmaModule)
	default:
		return
	}
	if why == "" {
		return
	}
	img, err1 := os.Stat(d.h.InRoot(image))
	opt, err2 := os.Stat(d.h.InRoot(optionFile))
	if err1 != nil || err2 != nil || !opt.ModTime().After(img.ModTime()) {
		return
	}
	d.warn(c.id, hostSubject,
		fmt.Sprintf("%s loads from the initramfs (%s), and /%s was built before /%s changed: %s", c.module, why, image, optionFile, c.consequence),
		fix)
}

// initramfsToolsHas: /etc/initramfs-tools/modules lists a module for which
// needs holds (for ib_core: ib_core or a module that needs it; Debian's
// MODULES=most takes no InfiniBand driver on its own).
func (d *diag) initramfsToolsHas(needs func(string) bool) string {
	var why string
	_ = boundedLines(d.h, "etc/initramfs-tools/modules", capConfig, func(line string) bool {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			return true
		}
		if needs(f[0]) {
			why = "/etc/initramfs-tools/modules lists " + f[0]
			return false
		}
		return true
	})
	return why
}

// dracutHas: dracut.conf(.d) adds a driver for which needs holds, or (with
// rdmaModule) the rdma dracut module.
func (d *diag) dracutHas(needs func(string) bool, rdmaModule bool) string {
	files := []string{}
	if exists(d.h, "etc/dracut.conf") {
		files = append(files, "etc/dracut.conf")
	}
	files = append(files, d.h.DropIns(".conf", "etc/dracut.conf.d", "usr/lib/dracut/dracut.conf.d")...)
	why := ""
	for _, f := range files {
		n := 0
		_ = boundedLines(d.h, f, capConfig, func(line string) bool {
			n++
			k, v, ok := strings.Cut(strings.TrimSpace(line), "=")
			if !ok || strings.HasPrefix(k, "#") {
				return true
			}
			key := strings.TrimSuffix(strings.TrimSpace(k), "+")
			for _, item := range strings.Fields(strings.Trim(strings.TrimSpace(v), `"'`)) {
				switch {
				case (key == "add_drivers" || key == "force_drivers" || key == "drivers") && needs(item):
					why = fmt.Sprintf("%s at /%s:%d adds %s", key, f, n, item)
				case rdmaModule && (key == "add_dracutmodules" || key == "dracutmodules") && item == "rdma":
					why = fmt.Sprintf("%s at /%s:%d adds the rdma module", key, f, n)
				}
			}
			return why == ""
		})
		if why != "" {
			return why
		}
	}
	return ""
}

// needsIBCore: the module is ib_core or, by modules.dep, depends on it.
func (d *diag) needsIBCore(module string) bool {
	m := host.NormalizeModule(module)
	if m == "ib_core" {
		return true
	}
	for _, dep := range d.moduleDeps()[m] {
		if dep == "ib_core" {
			return true
		}
	}
	return false
}

// moduleDeps is the running kernel's modules.dep (host.ModuleDeps), read
// once per run; nil when it cannot be read.
func (d *diag) moduleDeps() map[string][]string {
	if d.modDeps == nil {
		if deps, err := d.h.ModuleDeps(); err == nil {
			d.modDeps = deps
		}
	}
	return d.modDeps
}
