package capture

import (
	"io/fs"
	"os"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/rdmad/rdmad/daemon/host"
)

// The kernel's files rdmad and doctor read, as the kernel lays them out:
// each class directory's entries are links to the device's directory under
// sys/devices, written as they are (relative), with the directory they
// lead to.

// infiniband captures every RDMA device of sys/class/infiniband.
func (c *capturer) infiniband() {
	if _, ok := c.enterDir(host.ClassInfiniband); !ok {
		return
	}
	for _, n := range c.list(host.ClassInfiniband) {
		c.classEntry(path.Join(host.ClassInfiniband, n), c.ibDevice)
	}
}

// classEntry captures the class entry rel (a link to the device's
// directory, or a directory in a tree made by hand) with capture.
func (c *capturer) classEntry(rel string, capture func(dir string)) {
	switch k, st := c.lstat(rel); k {
	case kindDir:
		c.dir(rel)
		capture(rel)
	case kindLink:
		dir, err := c.resolve(rel, true, true)
		if err != nil {
			c.skip(rel, err)
			return
		}
		switch dk, dst := c.lstat(dir); dk {
		case kindDir:
			c.dir(dir)
			capture(dir)
		case kindOther:
			c.skip(rel, notRegular(dst))
		}
	case kindOther:
		c.skip(rel, notRegular(st))
	case kindFile:
		c.fileAt(rel, c.readAttr) // a class attribute (abi_version)
	}
}

// serialFiles are the attributes that hold a serial number (hfi1's
// "serial"): their text is replaced whole.
var serialFiles = []string{"serial", "serial_number", "board_serial"}

// ibDevice captures an RDMA device's directory: its attributes, each
// port, its OFED traffic classes (tc/), its device-wide hardware counters
// and its parent device (the PCI function, through the device link).
func (c *capturer) ibDevice(dir string) {
	c.deviceDir(dir, nil, func(rel, n string, k kind) {
		switch {
		case k == kindDir && n == "ports":
			c.dir(rel)
			for _, p := range c.list(rel) {
				c.port(path.Join(rel, p))
			}
		case k == kindDir && (n == "hw_counters" || n == "tc"):
			c.tree(rel, c.readAttr)
		case k == kindLink && n == "device":
			c.parentLink(rel)
		case k == kindFile && slices.Contains(serialFiles, n):
			c.fileAt(rel, c.readSerial)
		case k == kindFile || k == kindOther:
			c.fileAt(rel, c.readAttr)
		}
	})
}

// deviceDir captures a device's directory once: the attributes attrs (each
// named, so one the directory does not list is still tried), then each
// entry of the directory through entry, with its kind.
func (c *capturer) deviceDir(dir string, attrs []string, entry func(rel, name string, k kind)) {
	if c.walked(dir) {
		return
	}
	for _, n := range attrs {
		c.fileAt(path.Join(dir, n), c.readAttr)
	}
	for _, n := range c.list(dir) {
		rel := path.Join(dir, n)
		k, _ := c.lstat(rel)
		entry(rel, n, k)
	}
}

// linkOnly captures the link rel as a link, not what it leads to: the
// device's neighbours that rdmad reads only by name.
func (c *capturer) linkOnly(rel string) {
	if target, err := c.readlink(rel); err == nil {
		c.link(rel, target)
	}
}

// readSerial captures a serial number attribute, replaced.
func (c *capturer) readSerial(rel string, st fs.FileInfo) {
	if c.anon == nil {
		c.readAttr(rel, st)
		return
	}
	data, err := host.ReadAttr(c.abs(rel))
	if err != nil {
		c.readAttr(rel, st)
		return
	}
	s := c.anon.serial(string(data))
	if s != "" {
		s += "\n"
	}
	anon := c.anon
	c.anon = nil // replaced already; the scrubber would not know it
	c.file(rel, []byte(s), 0o644, timeZero)
	c.anon = anon
}

// port captures a port's directory: its attributes, counters and hardware
// counters, and its GID table. P_Key tables are not read by rdmad.
func (c *capturer) port(dir string) {
	switch k, _ := c.lstat(dir); k {
	case kindDir:
		if c.walked(dir) {
			return // a link back to a port, or to ports/
		}
		c.dir(dir)
	case kindNone:
		return
	default:
		c.classEntry(dir, c.port) // a port is a directory; a link to one is followed
		return
	}
	for _, n := range c.list(dir) {
		rel := path.Join(dir, n)
		switch k, _ := c.lstat(rel); {
		case k == kindDir && (n == "counters" || n == "hw_counters"):
			c.files(rel, c.readAttr)
		case k == kindDir && (n == "gids" || n == "gid_attrs"):
			// gidTable, once for both
		case k == kindFile || k == kindOther:
			c.fileAt(rel, c.readAttr)
		}
	}
	c.gidTable(dir)
}

// gidTable captures a port's GID table (gids, gid_attrs/types,
// gid_attrs/ndevs) up to its last populated entry: the kernel fills it
// from the start and rdmad stops at a run of empty entries (a ConnectX
// port lists 256 entries, a Soft-RoCE port 1,024, most of them empty). An
// empty entry before the last populated one is kept, empty, as rdmad
// reads it.
func (c *capturer) gidTable(port string) {
	dirs := [3]string{path.Join(port, "gids"), path.Join(port, "gid_attrs", "types"), path.Join(port, "gid_attrs", "ndevs")}
	var idx []int
	seen := map[int]bool{}
	for _, dir := range dirs[:2] {
		k, _ := c.lstat(dir)
		if k != kindDir {
			continue
		}
		c.dir(dir)
		for _, n := range c.list(dir) {
			if i, err := strconv.Atoi(n); err == nil && i >= 0 && strconv.Itoa(i) == n && !seen[i] {
				seen[i] = true
				idx = append(idx, i)
			}
		}
	}
	if k, _ := c.lstat(dirs[2]); k == kindDir {
		c.dir(dirs[2])
	}
	sort.Ints(idx)
	// Each entry is read once: its three files, kept until the last
	// populated entry is known.
	type entry struct {
		i     int
		files [3]attrRead
	}
	var table []entry
	last := -1
	for _, i := range idx {
		e := entry{i: i}
		for d, dir := range dirs {
			e.files[d] = c.readAttrData(path.Join(dir, strconv.Itoa(i)))
		}
		if strings.TrimSpace(string(e.files[1].data)) != "" || !zeroGID(string(e.files[0].data)) {
			last = i
		}
		table = append(table, e)
	}
	for _, e := range table {
		if e.i > last {
			break
		}
		for _, f := range e.files {
			f.emit(c)
		}
	}
}

// zeroGID reports whether g is no GID: empty, unreadable or all zeroes.
func zeroGID(g string) bool {
	return strings.Trim(strings.TrimSpace(g), "0:") == ""
}

// pciAttrs are the attributes of a PCI function that rdmad and doctor
// read: its identity, its PCIe link, SR-IOV, mlx4's VPI port types, and
// the uevent that names its driver. Nothing else (config space, BARs, VPD,
// which holds the serial number) is read.
var pciAttrs = []string{
	"class", "vendor", "device", "subsystem_vendor", "subsystem_device", "revision", "uevent",
	"current_link_speed", "current_link_width", "max_link_speed", "max_link_width", "numa_node",
	"sriov_numvfs", "sriov_totalvfs", "sriov_drivers_autoprobe", "sriov_offset", "sriov_stride", "sriov_vf_device",
	"mlx4_port1", "mlx4_port2",
}

// parentLink captures a device link (an RDMA device's "device", a VF's
// "physfn") and the device it leads to.
func (c *capturer) parentLink(rel string) {
	dir, err := c.resolve(rel, true, true)
	if err != nil {
		c.skip(rel, err)
		return
	}
	if k, _ := c.lstat(dir); k == kindDir {
		c.dir(dir)
		c.parentDevice(dir)
	}
}

// parentDevice captures an RDMA device's parent device (its PCI function,
// or an auxiliary device): pciAttrs, its driver, its physical function
// when it is a VF, the links to its VFs, its netdevs and its user-verbs
// devices.
func (c *capturer) parentDevice(dir string) {
	c.deviceDir(dir, pciAttrs, func(rel, n string, k kind) {
		switch {
		case k == kindLink && n == "driver":
			if drv, err := c.resolve(rel, true, true); err == nil {
				if dk, _ := c.lstat(drv); dk == kindDir {
					c.dir(drv)
				}
			} else {
				c.skip(rel, err)
			}
		case k == kindLink && n == "physfn":
			c.parentLink(rel)
		case k == kindLink && strings.HasPrefix(n, "virtfn"):
			c.linkOnly(rel)
		case k == kindDir && n == "net":
			c.dir(rel)
			for _, nd := range c.list(rel) {
				c.classEntry(path.Join(rel, nd), c.netdev)
			}
		case k == kindDir && n == "infiniband_verbs":
			c.dir(rel)
			for _, v := range c.list(rel) {
				c.classEntry(path.Join(rel, v), c.verbsDevice)
			}
		}
	})
}

func (c *capturer) readlink(rel string) (string, error) { return os.Readlink(c.abs(rel)) }

// netdevAttrs are the attributes of a netdev that rdmad and doctor read:
// its type, state, MTU and flags, which port of its function it is, its
// address (replaced), IPoIB's mode and P_Key, its speed.
var netdevAttrs = []string{
	"address", "addr_len", "carrier", "dev_id", "dev_port", "duplex", "flags", "ifindex", "iflink",
	"mode", "mtu", "operstate", "pkey", "speed", "type",
}

// netdevs captures every netdev of sys/class/net: doctor looks at all of
// them for IPoIB interfaces, lldpad's and the ports' netdevs.
func (c *capturer) netdevs() {
	if _, ok := c.enterDir(host.ClassNet); !ok {
		return
	}
	for _, n := range c.list(host.ClassNet) {
		c.classEntry(path.Join(host.ClassNet, n), c.netdev)
	}
}

// netdev captures a netdev's directory: netdevAttrs, OFED's ecn/ tree, and
// its links (device, master, upper_*, lower_*) as links only.
func (c *capturer) netdev(dir string) {
	c.deviceDir(dir, netdevAttrs, func(rel, n string, k kind) {
		switch {
		case k == kindDir && n == "ecn":
			c.tree(rel, c.readAttr)
		case k == kindLink && (n == "device" || n == "master" || strings.HasPrefix(n, "upper_") || strings.HasPrefix(n, "lower_")):
			c.linkOnly(rel)
		}
	})
}

// verbs captures sys/class/infiniband_verbs: each user-verbs device and
// the RDMA device it belongs to.
func (c *capturer) verbs() {
	const class = "sys/class/infiniband_verbs"
	if _, ok := c.enterDir(class); !ok {
		return
	}
	for _, n := range c.list(class) {
		c.classEntry(path.Join(class, n), c.verbsDevice)
	}
}

func (c *capturer) verbsDevice(dir string) {
	if c.walked(dir) {
		return
	}
	for _, n := range []string{"ibdev", "abi_version", "dev"} {
		c.fileAt(path.Join(dir, n), c.readAttr)
	}
	if rel := path.Join(dir, "device"); func() bool { k, _ := c.lstat(rel); return k == kindLink }() {
		c.linkOnly(rel)
	}
}

// configfs captures configfs rdma_cm whole: every device's and port's
// RoCE mode and TOS.
func (c *capturer) configfs() {
	c.tree(host.ConfigfsRdmaCM, c.readAttr)
}

// rdmaModules are the modules whose parameters are captured (ib_core's
// netns_mode is what rdmad reads; the others say how the drivers were
// loaded).
var rdmaModules = []string{"ib_core", "ib_uverbs", "rdma_cm", "rdma_rxe", "siw", "mlx4_core", "mlx4_en", "mlx5_core", "ib_ipoib"}

// modules captures sys/module: each module the kernel has (loaded or
// built in) as an empty directory, and the parameters of rdmaModules.
func (c *capturer) modules() {
	if _, ok := c.enterDir(host.SysModule); !ok {
		return
	}
	for _, n := range c.list(host.SysModule) {
		rel := path.Join(host.SysModule, n)
		if k, _ := c.lstat(rel); k == kindDir {
			c.dir(rel)
			if slices.Contains(rdmaModules, n) {
				c.files(path.Join(rel, "parameters"), c.readAttr)
			}
		}
	}
}
