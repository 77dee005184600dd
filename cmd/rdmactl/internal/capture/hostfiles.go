package capture

import (
	"errors"
	"io/fs"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host"
)

var timeZero time.Time

// The host's files that rdmad and doctor read besides sysfs and configfs,
// by what reads them. A path that is not there is not an error: most
// hosts have few of them.
var (
	// configTrees are captured with all they hold: rdmad's configuration
	// and module lists, and the verbs providers doctor checks.
	configTrees = []string{"etc/rdma", "etc/libibverbs.d"}
	// configDirs are captured file by file (not their subdirectories):
	// limits (memlock), modprobe.d in systemd's and kmod's search path
	// (the netns mode at boot, mlx4_en's PFC options, other managers'
	// files), systemd's manager drop-ins (DefaultLimitMEMLOCK), the
	// initramfs generators' drop-ins and NFS's.
	configDirs = []string{
		"etc/security/limits.d", "usr/etc/security/limits.d",
		"etc/modprobe.d", "run/modprobe.d", "usr/local/lib/modprobe.d", "usr/lib/modprobe.d", "lib/modprobe.d",
		"etc/systemd/system.conf.d", "run/systemd/system.conf.d", "usr/local/lib/systemd/system.conf.d",
		"usr/lib/systemd/system.conf.d", "lib/systemd/system.conf.d",
		"etc/dracut.conf.d", "usr/lib/dracut/dracut.conf.d", "etc/nfs.conf.d",
	}
	// configFiles are single files: limits.conf, systemd's system.conf,
	// MLNX_OFED's openib.conf, the initramfs's module list, dracut's
	// configuration, NFS's, the services list (NFS over RDMA's port),
	// the distribution (doctor's fixes name its packages), lldpad's
	// configuration (the netdevs it manages), rdmad's own state (the last
	// good configuration, what it found before its changes).
	configFiles = []string{
		"etc/security/limits.conf", "usr/etc/security/limits.conf",
		"etc/systemd/system.conf", "run/systemd/system.conf", "usr/local/lib/systemd/system.conf", "usr/lib/systemd/system.conf",
		"etc/infiniband/openib.conf", "etc/initramfs-tools/modules", "etc/dracut.conf",
		"etc/nfs.conf", "etc/services", "etc/os-release",
		"var/lib/lldpad/lldpad.conf", "var/lib/rdmad/found.json", "var/lib/rdmad/last-good-config.json",
	}
	// presenceFiles are captured as there or not (empty, with their
	// time): MLNX_OFED's init script, the NVIDIA driver container's ready
	// mark.
	presenceFiles = []string{"etc/init.d/openibd", "run/mellanox/drivers/.driver-ready"}
	// presenceDirs are directories doctor asks only the existence of:
	// initramfs-tools' and dracut's (which generator builds the initramfs),
	// sriov-network-operator's state.
	presenceDirs = []string{"etc/initramfs-tools", "usr/lib/dracut", "etc/sriov-operator"}
	// procAttrs are /proc files kept whole: the kernel release, the boot
	// (what rdmad found is kept per boot), nfsd's listeners.
	procAttrs = []string{host.ProcOSRelease, "proc/sys/kernel/random/boot_id", "proc/fs/nfsd/portlist"}
	// unitDirs are systemd's unit directories, in its order.
	unitDirs = []string{"etc/systemd/system", "run/systemd/system", "usr/local/lib/systemd/system", "usr/lib/systemd/system", "lib/systemd/system"}
	// units are the units doctor judges: rdma-core's module loader,
	// MLNX_OFED's openibd, lldpad, sriov-network-operator's, the container
	// runtimes and job services whose memlock limit reaches RDMA programs.
	// [memlock] check_units adds the site's.
	units = []string{"rdma-load-modules@*.service", "openibd.service", "lldpad.service", "lldpad.socket", "sriov-config.service",
		"containerd.service", "docker.service", "crio.service", "slurmd.service", "pbs_mom.service"}
)

// hostFiles captures the host's files outside sysfs.
func (c *capturer) hostFiles() {
	for _, t := range configTrees {
		c.tree(t, c.readConfig)
	}
	for _, d := range configDirs {
		c.files(d, c.readConfig)
	}
	for _, f := range configFiles {
		c.path(f, c.readConfig)
	}
	for _, f := range presenceFiles {
		c.path(f, c.presence)
	}
	for _, d := range presenceDirs {
		c.enterDir(d)
	}
	for _, f := range procAttrs {
		c.proc(f, host.MaxAttrSize, nil)
	}
	pol := c.policy()
	c.path("etc/group", c.filtered(host.MaxConfigSize, groupFilter(memlockGroup(pol))))
	c.path("etc/docker/daemon.json", c.filtered(host.MaxConfigSize, dockerFilter))
	c.path("var/lib/kubelet/device-plugins/kubelet_internal_checkpoint", c.filtered(host.MaxIndexSize, kubeletFilter))
	c.proc(host.ProcModules, host.MaxConfigSize, procModulesFilter)
	c.proc("proc/cmdline", host.MaxAttrSize, cmdlineFilter)
	c.proc("proc/mounts", host.MaxIndexSize, mountsFilter)
	c.proc("proc/net/tcp", host.MaxIndexSize, tcpListenFilter)
	c.proc("proc/net/tcp6", host.MaxIndexSize, tcpListenFilter)
	c.proc("proc/net/unix", host.MaxIndexSize, unixSocketFilter)
	c.lldpad()
	c.kernelRelease()
	c.unitFiles(pol)
	c.sysvLinks()
	c.systemdVersion()
	c.devInfiniband()
}

// path captures the file rel with read, the links on its way written.
func (c *capturer) path(rel string, read reader) {
	dir, base := path.Split(rel)
	if dir = strings.TrimSuffix(dir, "/"); dir != "" {
		resolved, err := c.resolve(dir, true, false)
		if err != nil {
			return // a directory on the way is missing: nothing to capture
		}
		if k, _ := c.lstat(resolved); k != kindDir {
			return
		}
		if resolved != dir { // merged /usr: lib -> usr/lib
			if _, err := c.resolve(dir, true, true); err != nil {
				c.skip(dir, err)
				return
			}
		}
		dir = resolved
	}
	c.fileAt(path.Join(dir, base), read)
}

// proc captures the /proc file rel at its own path, kept by keep (nil:
// whole): /proc/net and /proc/mounts are links into /proc/self, whose
// number is the capture's own process, and the tree needs only the files.
func (c *capturer) proc(rel string, limit int, keep func([]byte) []byte) {
	src, err := c.resolve(rel, true, false)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			c.skip(rel, err)
		}
		return
	}
	switch k, st := c.lstat(src); k {
	case kindFile:
		data, err := host.ReadFileLimit(c.abs(src), limit)
		if err != nil {
			c.skip(rel, err)
			return
		}
		if keep != nil {
			data = keep(data)
		}
		c.file(rel, data, 0o644, st.ModTime())
	case kindOther:
		c.skip(rel, notRegular(st))
	}
}

// policy is the configuration rdmad would apply (its memlock group and
// check_units name what doctor reads); the defaults when it does not
// load (nil).
func (c *capturer) policy() *config.Policy {
	pol, err := config.Load(host.Files{}, c.abs("etc/rdma/rdmad.toml"))
	if err != nil {
		return nil
	}
	return pol
}

func memlockGroup(pol *config.Policy) string {
	if pol != nil && pol.Memlock != nil && pol.Memlock.Group != "" {
		return pol.Memlock.Group
	}
	return config.DefaultMemlockGroup
}

// lldpad captures lldpad's pid file and the name of the process it names,
// when that is lldpad: how doctor and the qos part tell that lldpad runs.
// No other process is captured.
func (c *capturer) lldpad() {
	const pidFile = "run/lldpad.pid"
	raw, err := c.h.ReadString(pidFile)
	if err != nil {
		return
	}
	pid := strings.TrimSpace(strings.TrimRight(raw, "\x00"))
	comm := path.Join("proc", pid, "comm")
	if pid == "" || strings.ContainsAny(pid, "/.") {
		return
	}
	if s, err := c.h.ReadString(comm); err != nil || strings.TrimSpace(s) != "lldpad" {
		return
	}
	c.path(pidFile, c.readAttr)
	c.proc(comm, host.MaxAttrSize, nil)
}

// kernelRelease captures what is kept per kernel release: the module
// indexes rdmad resolves module names with (modules.alias,
// modules.builtin) and the initramfs check reads the initramfs's modules
// from (modules.dep), and the time of the initramfs image (the check
// compares it with the netns and mlx4_en option files').
func (c *capturer) kernelRelease() {
	rel, err := c.h.ReadString(host.ProcOSRelease)
	if rel = strings.TrimSpace(rel); err != nil || rel == "" || strings.ContainsAny(rel, "/") {
		return
	}
	for _, f := range []string{"modules.alias", "modules.builtin", "modules.dep"} {
		c.path(path.Join("lib/modules", rel, f), c.readFile(host.MaxIndexSize))
	}
	for _, img := range []string{"boot/initrd.img-" + rel, "boot/initramfs-" + rel + ".img"} {
		c.path(img, c.presence)
	}
}

// unitFiles captures units, with their drop-ins, from each unit directory,
// masks included, and their enablement links in etc/systemd/system's
// .wants directories.
func (c *capturer) unitFiles(pol *config.Policy) {
	want := slices.Clone(units)
	if pol != nil {
		want = append(want, pol.MemlockCheckUnits.Names...)
	}
	named := func(n string) bool {
		for _, u := range want {
			if ok, _ := path.Match(u, n); ok {
				return true
			}
		}
		return false
	}
	for _, dir := range unitDirs {
		d, ok := c.enterDir(dir)
		if !ok {
			continue
		}
		for _, n := range c.list(d) {
			rel := path.Join(d, n)
			k, _ := c.lstat(rel)
			switch {
			case named(n):
				c.fileAt(rel, c.readConfig)
			case n == "service.d" || strings.HasSuffix(n, ".d") && named(strings.TrimSuffix(n, ".d")):
				if k == kindDir || k == kindLink {
					c.files(rel, c.readConfig)
				}
			case k == kindDir && strings.HasSuffix(n, ".wants") && dir == unitDirs[0]:
				for _, w := range c.list(rel) {
					if named(w) {
						c.fileAt(path.Join(rel, w), c.presence)
					}
				}
			}
		}
	}
}

// sysvLinks captures the SysV runlevel links of openibd (an init script
// is enabled by them).
func (c *capturer) sysvLinks() {
	for _, dir := range []string{"etc/rc3.d", "etc/rc5.d", "etc/rcS.d"} {
		d, ok := c.enterDir(dir)
		if !ok {
			continue
		}
		for _, n := range c.list(d) {
			if strings.HasSuffix(n, "openibd") {
				c.fileAt(path.Join(d, n), c.presence)
			}
		}
	}
}

// systemdVersion captures the name of systemd's shared library (doctor
// reads systemd's version from it) as an empty file.
func (c *capturer) systemdVersion() {
	dirs := []string{"usr/lib/systemd", "usr/lib64/systemd", "lib/systemd"}
	for _, n := range c.list("usr/lib") {
		if strings.Contains(n, "-linux-") {
			dirs = append(dirs, path.Join("usr/lib", n, "systemd"))
		}
	}
	for _, dir := range dirs {
		k, _ := c.lstat(dir)
		if k != kindDir && k != kindLink {
			continue
		}
		d, err := c.resolve(dir, true, false)
		if err != nil {
			continue
		}
		for _, n := range c.list(d) {
			if strings.HasPrefix(n, "libsystemd-shared-") {
				c.path(path.Join(dir, n), c.presence)
			}
		}
	}
}

// devInfiniband captures the names of /dev/infiniband's device nodes as
// empty files: doctor asks whether each user-verbs device has its node
// (a tarball unpacked without root cannot hold device nodes, and a file
// of the name is what a fixture host has).
func (c *capturer) devInfiniband() {
	const dir = "dev/infiniband"
	d, ok := c.enterDir(dir)
	if !ok {
		return
	}
	for _, n := range c.list(d) {
		rel := path.Join(d, n)
		k, st := c.lstat(rel)
		if k == kindNone || k == kindDir || k == kindLink {
			continue
		}
		c.file(rel, nil, 0o644, st.ModTime())
	}
}
