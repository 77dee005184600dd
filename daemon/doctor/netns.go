package doctor

import (
	"fmt"
	"os"
	"path"
	"strings"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host"
)

// rdmadNetnsFile is the modprobe.d file rdmad writes for [netns].
const rdmadNetnsFile = "etc/modprobe.d/rdmad-netns.conf"

var modprobeDirs = []string{"etc/modprobe.d", "run/modprobe.d", "usr/local/lib/modprobe.d", "usr/lib/modprobe.d", "lib/modprobe.d"}

// bootNetns is the mode ib_core starts in at the next load: the last
// "options ib_core netns_mode=" of modprobe.d (files by name, /etc first),
// then ib_core.netns_mode= on the kernel command line; shared by default.
func (d *diag) bootNetns() bootNetnsSetting {
	b := bootNetnsSetting{mode: config.NetnsShared, where: "ib_core's default"}
	for _, f := range confFiles(d.h, ".conf", modprobeDirs...) {
		n := 0
		_ = boundedLines(d.h, f, capConfig, func(line string) bool {
			n++
			if m, ok := ibCoreNetnsOption(line); ok {
				b = bootNetnsSetting{mode: m, where: fmt.Sprintf("/%s:%d", f, n), file: f}
			}
			return true
		})
	}
	for _, opt := range strings.Fields(readAttr(d.h, "proc/cmdline")) {
		if v, ok := strings.CutPrefix(host.NormalizeModule(opt), "ib_core.netns_mode="); ok {
			if m, ok := netnsFromParam(v); ok {
				b = bootNetnsSetting{mode: m, where: "ib_core.netns_mode= on the kernel command line", cmdline: true}
			}
		}
	}
	return b
}

// ibCoreNetnsOption reads the netns mode a modprobe.d line gives ib_core
// ("options ib_core ... netns_mode=0 ..."; the last one on the line wins).
func ibCoreNetnsOption(line string) (config.NetnsMode, bool) {
	fl := strings.Fields(line)
	if len(fl) < 3 || fl[0] != "options" || host.NormalizeModule(fl[1]) != "ib_core" {
		return "", false
	}
	var mode config.NetnsMode
	found := false
	for _, opt := range fl[2:] {
		if v, ok := strings.CutPrefix(opt, "netns_mode="); ok {
			if m, ok := netnsFromParam(v); ok {
				mode, found = m, true
			}
		}
	}
	return mode, found
}

// bootNetnsSetting is where ib_core's netns mode at boot comes from.
type bootNetnsSetting struct {
	mode    config.NetnsMode
	where   string // for the operator: "/file:line", the command line, the default
	file    string // the modprobe.d file that decides, "" when none does
	cmdline bool   // ib_core.netns_mode= on the kernel command line decides
}

// netnsFromParam reads ib_core's bool parameter netns_mode (1 = shared).
func netnsFromParam(v string) (config.NetnsMode, bool) {
	switch strings.ToLower(v) {
	case "1", "y", "yes", "on", "true":
		return config.NetnsShared, true
	case "0", "n", "no", "off", "false":
		return config.NetnsExclusive, true
	}
	return "", false
}

// runningNetns is the running kernel's mode. ib_core exports netns_mode
// read-only in sysfs, and `rdma system set netns` changes the variable
// behind it, so the file tells the running mode; the NetnsReader is asked
// only when the file is not there. known is false when ib_core is not
// loaded or nothing tells.
func (d *diag) runningNetns() (config.NetnsMode, bool) {
	if !d.loadedModules()["ib_core"] {
		return "", false
	}
	if m, ok := netnsFromParam(readAttr(d.h, "sys/module/ib_core/parameters/netns_mode")); ok {
		return m, true
	}
	if d.in.Netns != nil {
		if m, err := d.in.Netns.Mode(); err == nil && m != config.NetnsUnmanaged {
			return m, true
		}
	}
	return "", false
}

func (d *diag) checkNetns() {
	declared := d.pol.Netns.Mode
	inForce := declared
	if d.pol.Netns.Runtime != config.NetnsUnmanaged {
		inForce = d.pol.Netns.Runtime
	}
	bootSetting := d.bootNetns()
	boot, bootWhere, bootFile := bootSetting.mode, bootSetting.where, bootSetting.file
	running, known := d.runningNetns()
	switch {
	case inForce == config.NetnsUnmanaged && known && running != boot:
		d.warn("netns-not-persistent", hostSubject,
			fmt.Sprintf("RDMA netns mode is %s, but ib_core starts %s at the next boot (%s): the change is lost at reboot", running, boot, bootWhere),
			fmt.Sprintf(`rdmactl netns set %s --persist ([netns] mode = "%s" in /etc/rdma/rdmad.toml)`, running, running))
	case inForce == config.NetnsUnmanaged:
		d.ok("netns-mode", hostSubject, fmt.Sprintf("RDMA netns mode %s, not declared (at boot: %s, %s)", d.runningText(running, known), boot, bootWhere))
	case declared != config.NetnsUnmanaged && boot != declared:
		fix := "rdmactl reconcile (rdmad writes /" + rdmadNetnsFile + "), and see rdmactl status"
		if bootFile == sriovNetnsFile {
			fix = fmt.Sprintf("%s is sriov-network-operator's (its SriovNetworkPoolConfig rdmaMode; it rewrites the file): remove rdmaMode there, or leave [netns] mode undeclared in rdmad (see coexist-sriov-operator)", bootWhere)
		} else if bootFile != "" && bootFile != rdmadNetnsFile {
			fix = fmt.Sprintf("remove netns_mode from %s: it is read after /%s", bootWhere, rdmadNetnsFile)
		} else if bootSetting.cmdline {
			fix = "remove ib_core.netns_mode= from the kernel command line"
		}
		d.fail("netns-boot-differs", hostSubject,
			fmt.Sprintf("[netns] mode = %q is declared, but ib_core starts %s at the next boot (%s)", declared, boot, bootWhere), fix)
	case known && running != inForce && inForce == declared:
		d.warn("netns-reboot-pending", hostSubject,
			fmt.Sprintf("RDMA netns mode %s is declared and persisted (%s), but the kernel still runs %s: the switch is refused while other network namespaces exist (EBUSY)", declared, bootWhere, running),
			"reboot, or delete the other network namespaces (ip netns list) and run: rdmactl reconcile")
	case known && running != inForce:
		d.fail("netns-mode-differs", hostSubject,
			fmt.Sprintf("RDMA netns mode %s was set at runtime, but the kernel runs %s", inForce, running),
			fmt.Sprintf("delete the other network namespaces (ip netns list), then: rdmactl netns set %s", inForce))
	case inForce != declared:
		d.ok("netns-mode", hostSubject, fmt.Sprintf("RDMA netns mode %s, set at runtime without persist (at boot: %s, %s)", d.runningText(running, known), boot, bootWhere))
	case !known:
		d.ok("netns-mode", hostSubject, fmt.Sprintf("RDMA netns mode %s declared, ib_core starts in it at boot (%s); running mode %s", declared, bootWhere, d.runningText(running, known)))
	default:
		d.ok("netns-mode", hostSubject, fmt.Sprintf("RDMA netns mode %s as declared, at boot too (%s)", running, bootWhere))
	}
	if bootFile != "" {
		d.checkInitramfs(bootFile, initramfsCheck{
			id: "netns-initramfs-stale", module: "ib_core", needs: d.needsIBCore, rdmaModule: true,
			consequence: "the next boot starts ib_core with the old netns_mode",
		})
	}
}

func (d *diag) runningText(m config.NetnsMode, known bool) string {
	switch {
	case known:
		return string(m)
	case !d.loadedModules()["ib_core"]:
		return "unknown (ib_core not loaded)"
	}
	return "unknown"
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
	img, err1 := os.Stat(hostPath(d.h, image))
	opt, err2 := os.Stat(hostPath(d.h, optionFile))
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
	files = append(files, confFiles(d.h, ".conf", "etc/dracut.conf.d", "usr/lib/dracut/dracut.conf.d")...)
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

// moduleDeps reads lib/modules/<release>/modules.dep: module -> every
// module it needs (the file lists them transitively). nil when absent.
func (d *diag) moduleDeps() map[string][]string {
	if d.modDeps != nil {
		return d.modDeps
	}
	rel := readAttr(d.h, host.ProcOSRelease)
	if rel == "" {
		return nil
	}
	deps := map[string][]string{}
	err := boundedLines(d.h, path.Join("lib/modules", rel, "modules.dep"), capIndex, func(line string) bool {
		mod, rest, ok := strings.Cut(line, ":")
		if !ok {
			return true
		}
		var list []string
		for _, p := range strings.Fields(rest) {
			list = append(list, moduleName(p))
		}
		deps[moduleName(mod)] = list
		return true
	})
	if err != nil {
		return nil
	}
	d.modDeps = deps
	return deps
}

// moduleName turns "kernel/drivers/infiniband/core/ib_core.ko.xz" into "ib_core".
func moduleName(p string) string {
	base := path.Base(strings.TrimSpace(p))
	if i := strings.Index(base, ".ko"); i >= 0 {
		base = base[:i]
	}
	return host.NormalizeModule(base)
}
