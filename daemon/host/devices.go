package host

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// ErrNoDevice is returned (wrapped) when a device vanished or never existed.
var ErrNoDevice = errors.New("no such RDMA device")

// Transport is how a port carries RDMA; it decides which module lists of
// /etc/rdma/modules apply (rdma-core's ID_RDMA_* udev properties).
type Transport string

const (
	TransportInfiniBand Transport = "infiniband"
	TransportRoCE       Transport = "roce"
	TransportIWARP      Transport = "iwarp"
	TransportOPA        Transport = "opa"
	TransportUnknown    Transport = "unknown"
)

// Detail says how much of a device one read fetches. Every event re-reads
// the device it names, so what is read is what the callers need, no more.
// A read always has the name, driver, PCI address, node type, the port
// list and each port's link layer: what transports and most selectors need.
type Detail uint8

const (
	// ReadGUID adds node_guid (a guid selector matches on it).
	ReadGUID Detail = 1 << iota
	// ReadNetdevs adds the netdevs of the device (a netdev selector, soft
	// links).
	ReadNetdevs
	// ReadPublished adds everything the daemon publishes: firmware and
	// board attributes, port state, rate, LIDs, GID types, and configfs
	// values and presence.
	ReadPublished

	// DetailPolicy is what any policy can need.
	DetailPolicy = ReadGUID | ReadNetdevs
	// DetailFull is everything.
	DetailFull = DetailPolicy | ReadPublished
)

// Device is the observed state of one RDMA device.
type Device struct {
	Name         string
	NodeType     string // raw node_type, e.g. "1: CA", "4: RNIC"
	NodeGUID     string
	SysImageGUID string
	FWVersion    string
	HCAType      string
	BoardID      string
	Driver       string // kernel driver of the parent device (mlx5_core, hfi1), or the soft driver (rdma_rxe, siw)
	PCIAddress   string // "" for soft devices
	Parent       string // rxe: the netdev it sits on
	NodeDesc     string // node_desc; siw is recognised by it
	Netdevs      []string
	Ports        []Port
	RoCEConfig   bool   // configfs rdma_cm/<dev> exists (read with ReadPublished)
	Detail       Detail // what the read fetched
}

// Port is the observed state of one port.
type Port struct {
	Number    int
	State     string // "ACTIVE", "DOWN", ... (state name without the number)
	PhysState string // "LinkUp", "Disabled", ...
	Rate      string
	LinkLayer string // "InfiniBand", "Ethernet", "" when unknown
	LID       string
	SMLID     string
	GIDTypes  []string // distinct types of populated GIDs ("IB/RoCE v1", "RoCE v2")
	Netdevs   []string
	// The settings rdmad keeps on a port (RoCE mode, PFC...) are not
	// here: each part reads its own and records them
	// (reconcile.PortState.Records).
}

// Path of a port in sysfs, relative to the root.
func portPath(dev string, port int, attr ...string) string {
	return path.Join(append([]string{ClassInfiniband, dev, "ports", strconv.Itoa(port)}, attr...)...)
}

// ConfigfsPortPath is the rdma_cm directory of a port, relative to the root.
func ConfigfsPortPath(dev string, port int, attr ...string) string {
	if len(attr) <= 1 && cleanRel(dev) && !strings.Contains(dev, "/") && (len(attr) == 0 || cleanRel(attr[0])) {
		// The common case, without path.Join's cleaning (a pass builds
		// several of these per port).
		p := ConfigfsRdmaCM + "/" + dev + "/ports/" + strconv.Itoa(port)
		if len(attr) == 1 {
			p += "/" + attr[0]
		}
		return p
	}
	return path.Join(append([]string{ConfigfsRdmaCM, dev, "ports", strconv.Itoa(port)}, attr...)...)
}

// PortNetdev is the netdev under port p of d, the one its DCB settings
// belong to: of the PCI function's own netdevs, the one in the port's GID
// table, else the function's only one, else the one whose dev_port is the
// port's index (mlx4_en: one netdev per port of one function). A bond,
// bridge or VLAN on the port is in its GID table too, and may sort before
// the function's netdev, so the GID table alone decides only for a device
// without a PCI function (rxe, siw: their parent, else their GID table).
// "" when none is known.
func (h *Host) PortNetdev(d *Device, p *Port) string {
	if d.PCIAddress != "" {
		own, _ := h.ReadDirNames(path.Join(ClassInfiniband, d.Name, "device", "net"))
		for _, n := range p.Netdevs {
			if slices.Contains(own, n) {
				return n
			}
		}
		if len(own) == 1 {
			return own[0]
		}
		want := strconv.Itoa(p.Number - 1)
		for _, n := range own {
			s, err := h.ReadString(path.Join(ClassInfiniband, d.Name, "device", "net", n, "dev_port"))
			if err == nil && strings.TrimSpace(s) == want {
				return n
			}
		}
		return ""
	}
	if d.Parent != "" {
		return d.Parent
	}
	if len(p.Netdevs) > 0 {
		return p.Netdevs[0]
	}
	if len(d.Netdevs) == 1 {
		return d.Netdevs[0]
	}
	return ""
}

// IsVF reports whether d is on a PCI virtual function: its PCI device has
// a physfn link (on the host that created it), or, for a VF passed through
// to a virtual machine, where no physfn link exists, its PCI ID is one its
// driver registers as a VF.
func (h *Host) IsVF(d *Device) bool {
	if d.PCIAddress == "" {
		return false
	}
	dev := path.Join(ClassInfiniband, d.Name, "device")
	if h.Exists(path.Join(dev, "physfn")) {
		return true
	}
	vendor, err := h.ReadString(path.Join(dev, "vendor"))
	if err != nil || strings.TrimSpace(vendor) != mellanoxVendor {
		return false
	}
	id, err := h.ReadString(path.Join(dev, "device"))
	return err == nil && mellanoxVFs[strings.TrimSpace(id)]
}

// mellanoxVendor is the PCI vendor ID of Mellanox (NVIDIA networking).
const mellanoxVendor = "0x15b3"

// mellanoxVFs are the PCI device IDs the kernel's mlx5_core and mlx4_core
// tables mark as virtual functions (MLX5_PCI_DEV_IS_VF, MLX4_PCI_DEV_IS_VF in
// drivers/net/ethernet/mellanox/mlx{5/core,4}/main.c).
var mellanoxVFs = map[string]bool{
	"0x1012": true, // Connect-IB VF
	"0x1014": true, // ConnectX-4 VF
	"0x1016": true, // ConnectX-4 Lx VF
	"0x1018": true, // ConnectX-5 VF
	"0x101a": true, // ConnectX-5 Ex VF
	"0x101c": true, // ConnectX-6 VF
	"0x101e": true, // ConnectX family mlx5Gen VF (ConnectX-6 Dx and later)
	"0xa2d3": true, // BlueField integrated ConnectX-5 VF
	"0x1002": true, // ConnectX-2 VF (mlx4)
	"0x1004": true, // ConnectX-3 VF (mlx4)
}

// PortTransport is the transport of port p of d.
func (d *Device) PortTransport(p *Port) Transport {
	switch {
	case strings.HasPrefix(d.NodeType, "4"):
		return TransportIWARP
	case d.Driver == "hfi1":
		return TransportOPA
	case p.LinkLayer == "Ethernet":
		return TransportRoCE
	case p.LinkLayer == "InfiniBand":
		return TransportInfiniBand
	}
	return TransportUnknown
}

// Transports are the distinct transports of the device's ports, sorted.
func (d *Device) Transports() []Transport {
	var out []Transport
	for i := range d.Ports {
		t := d.PortTransport(&d.Ports[i])
		if !containsTransport(out, t) {
			out = append(out, t)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func containsTransport(ts []Transport, t Transport) bool {
	for _, x := range ts {
		if x == t {
			return true
		}
	}
	return false
}

// Port returns the port numbered n, or nil.
func (d *Device) Port(n int) *Port {
	for i := range d.Ports {
		if d.Ports[i].Number == n {
			return &d.Ports[i]
		}
	}
	return nil
}

// Clone returns a deep copy: the reconciler hands copies to parts and keeps
// its cache unchanged until a pass commits.
func (d *Device) Clone() Device {
	c := *d
	c.Netdevs = append([]string(nil), d.Netdevs...)
	c.Ports = make([]Port, len(d.Ports))
	for i, p := range d.Ports {
		p.GIDTypes = append([]string(nil), p.GIDTypes...)
		p.Netdevs = append([]string(nil), p.Netdevs...)
		c.Ports[i] = p
	}
	return c
}

// DeviceNames lists the RDMA devices present, sorted. A host without the
// class directory (no RDMA stack loaded) has none; that is not an error.
func (h *Host) DeviceNames() ([]string, error) {
	names, err := h.ReadDirNames(ClassInfiniband)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list RDMA devices: %w", err)
	}
	return names, nil
}

// Devices reads every RDMA device fully. A device that vanishes while being
// read is skipped; other read errors are returned with the devices that
// did read.
func (h *Host) Devices() ([]Device, error) {
	names, err := h.DeviceNames()
	if err != nil {
		return nil, err
	}
	var devs []Device
	var errs []error
	for _, n := range names {
		d, err := h.ReadDevice(n, DetailFull)
		switch {
		case errors.Is(err, ErrNoDevice):
			continue
		case err != nil:
			errs = append(errs, err)
			continue
		}
		devs = append(devs, d)
	}
	return devs, errors.Join(errs...)
}

// Device reads one RDMA device fully (DetailFull).
func (h *Host) Device(name string) (Device, error) { return h.ReadDevice(name, DetailFull) }

// MaxDeviceNameLen is the longest RDMA device name the kernel allows
// (IB_DEVICE_NAME_MAX - 1).
const MaxDeviceNameLen = 63

// ValidDeviceName reports whether name can be an RDMA device of the class
// directory; anything else (a path, an overlong name from a hostile event
// or call) is never looked up.
func ValidDeviceName(name string) bool {
	return name != "" && len(name) <= MaxDeviceNameLen && name != "." && name != ".." && !strings.ContainsAny(name, "/\x00")
}

// ReadDevice reads one RDMA device at the given detail. Optional
// attributes that are missing or unreadable (EINVAL is common) are left
// empty; only the device directory itself is required. ErrNoDevice
// (wrapped) when it does not exist.
func (h *Host) ReadDevice(name string, detail Detail) (Device, error) {
	if !ValidDeviceName(name) {
		return Device{}, fmt.Errorf("device %q: %w", name, ErrNoDevice)
	}
	base := path.Join(ClassInfiniband, name)
	// The device's directory is opened once and its attributes are read
	// relative to it: a pass reads every device, and walking the class
	// link and the whole path again for each attribute cost more than
	// the reads.
	dir, err := h.OpenAttrDir(ClassInfiniband, name)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return Device{}, fmt.Errorf("device %s: %w", name, ErrNoDevice)
		}
		return Device{}, fmt.Errorf("device %s: %w", name, err)
	}
	defer dir.Close()
	// The port list is read first: it is needed anyway, and its absence
	// (with the device's) is how a vanished device shows.
	portNames, err := dir.ReadDirNames("ports")
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			return Device{}, fmt.Errorf("device %s: ports: %w", name, err)
		}
		if !h.Exists(base) {
			return Device{}, fmt.Errorf("device %s: %w", name, ErrNoDevice)
		}
	}
	d := Device{Name: name, Detail: detail}
	opt := func(attr string) string { return optional(dir.ReadString(attr)) }
	d.NodeType = opt("node_type")
	if detail&ReadGUID != 0 {
		d.NodeGUID = opt("node_guid")
	}
	dev, err := dir.Readlink("device")
	// Only a device with no parent device at all is a soft one: a hardware
	// device whose driver link is missing (being unbound) is not rxe or siw.
	soft := errors.Is(err, fs.ErrNotExist)
	if err == nil {
		if b := filepath.Base(dev); isPCIAddress(b) {
			d.PCIAddress = b
		}
		if drv, err := dir.Readlink("device/driver"); err == nil {
			d.Driver = filepath.Base(drv)
		}
	}
	if d.PCIAddress == "" {
		// Soft devices have no PCI function: rxe names its netdev in
		// "parent", siw says who it is in node_desc.
		d.Parent = opt("parent")
		d.NodeDesc = opt("node_desc")
		if soft {
			d.Driver = softDriver(d.NodeType, d.Parent, d.NodeDesc)
		}
	}
	if detail&ReadPublished != 0 {
		d.SysImageGUID = opt("sys_image_guid")
		d.FWVersion = opt("fw_ver")
		d.HCAType = opt("hca_type")
		d.BoardID = opt("board_id")
		d.RoCEConfig = h.Exists(path.Join(ConfigfsRdmaCM, name))
	}
	netdevs := map[string]bool{}
	if d.Parent != "" {
		netdevs[d.Parent] = true
	}
	if d.PCIAddress != "" && detail&ReadNetdevs != 0 {
		if names, err := dir.ReadDirNames("device/net"); err == nil {
			for _, n := range names {
				netdevs[n] = true
			}
		}
	}
	// A soft device without "parent" (siw) names its netdev only in its
	// GID table.
	gids := detail&ReadPublished != 0 || (detail&ReadNetdevs != 0 && d.PCIAddress == "" && d.Parent == "")
	for _, pn := range portNames {
		num, err := strconv.Atoi(pn)
		if err != nil || num <= 0 || strconv.Itoa(num) != pn {
			continue // not a port directory ("01" would be read as ports/1); sysfs has none, but be tolerant
		}
		p := h.readPort(&dir, name, num, detail, gids)
		for _, n := range p.Netdevs {
			netdevs[n] = true
		}
		d.Ports = append(d.Ports, p)
	}
	sort.Slice(d.Ports, func(i, j int) bool { return d.Ports[i].Number < d.Ports[j].Number })
	d.Netdevs = sortedKeys(netdevs)
	if len(d.Ports) == 0 && !h.Exists(base) { // vanished while we read it: say so rather than return a half device
		return Device{}, fmt.Errorf("device %s: %w", name, ErrNoDevice)
	}
	return d, nil
}

// optional is an attribute as read, "" when it is missing or refuses to
// read.
func optional(s string, err error) string {
	if err != nil {
		return ""
	}
	return strings.TrimSpace(s)
}

// readOptional reads an attribute that may be missing or refuse to read;
// those read as "".
func (h *Host) readOptional(rel string) string {
	s, _ := h.ReadString(rel)
	return strings.TrimSpace(s)
}

// gidScanGap is how many unpopulated GID entries in a row end the scan.
const gidScanGap = 8

func (h *Host) readPort(dir *AttrDir, dev string, num int, detail Detail, gids bool) Port {
	prefix := "ports/" + strconv.Itoa(num) + "/"
	opt := func(attr string) string { return optional(dir.ReadString(prefix + attr)) }
	p := Port{Number: num, LinkLayer: opt("link_layer")}
	if detail&ReadPublished != 0 {
		p.State, p.PhysState = stripCode(opt("state")), stripCode(opt("phys_state"))
		p.Rate = opt("rate")
		p.LID = opt("lid")
		p.SMLID = opt("sm_lid")
	}
	if gids {
		p.GIDTypes, p.Netdevs = readGIDs(dir, prefix)
	}
	return p
}

// RefreshPortState re-reads the state and physical state of p, which
// change without any event on InfiniBand ports. It reports whether either
// changed.
func (h *Host) RefreshPortState(dev string, p *Port) bool {
	state := stripCode(h.readOptional(portPath(dev, p.Number, "state")))
	phys := stripCode(h.readOptional(portPath(dev, p.Number, "phys_state")))
	changed := state != p.State || phys != p.PhysState
	p.State, p.PhysState = state, phys
	return changed
}

// readGIDs returns the distinct GID types and netdevs of a port's GID
// table. Tables are large (rxe has 1024 entries, mlx5 256) and filled from
// the start; unpopulated entries answer EINVAL. Reading all of them costs
// thousands of syscalls, so the scan stops after a run of empty entries.
func readGIDs(dir *AttrDir, port string) (types, netdevs []string) {
	names, err := dir.ReadDirNames(port + "gid_attrs/types")
	if err != nil {
		return nil, nil
	}
	idx := make([]int, 0, len(names))
	for _, n := range names {
		if i, err := strconv.Atoi(n); err == nil {
			idx = append(idx, i)
		}
	}
	sort.Ints(idx)
	typeSet, ndevSet := map[string]bool{}, map[string]bool{}
	empty := 0
	for _, i := range idx {
		t := optional(dir.ReadString(port + "gid_attrs/types/" + strconv.Itoa(i)))
		if t == "" {
			if empty++; empty >= gidScanGap {
				break
			}
			continue
		}
		empty = 0
		typeSet[t] = true
		if n := optional(dir.ReadString(port + "gid_attrs/ndevs/" + strconv.Itoa(i))); n != "" {
			ndevSet[n] = true
		}
	}
	return sortedKeys(typeSet), sortedKeys(ndevSet)
}

// stripCode turns sysfs "4: ACTIVE" into "ACTIVE".
func stripCode(s string) string {
	if i := strings.Index(s, ": "); i >= 0 {
		return s[i+2:]
	}
	return s
}

func sortedKeys(m map[string]bool) []string {
	if len(m) == 0 {
		return nil
	}
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// isPCIAddress reports whether s looks like "0000:3b:00.0".
func isPCIAddress(s string) bool {
	if len(s) != 12 || s[4] != ':' || s[7] != ':' || s[10] != '.' {
		return false
	}
	for i, c := range s {
		if i == 4 || i == 7 || i == 10 {
			continue
		}
		if !strings.ContainsRune("0123456789abcdefABCDEF", c) {
			return false
		}
	}
	return true
}

// IsNoDevice reports whether err says a device (or its configfs
// directory) went away: ErrNoDevice, or ENODEV from the kernel.
func IsNoDevice(err error) bool {
	return errors.Is(err, ErrNoDevice) || errors.Is(err, syscall.ENODEV)
}

// ReadPort reads one port of a device again, without its GID table (a
// D-Bus call on one port re-reads that port only).
func (h *Host) ReadPort(dev string, num int, detail Detail) (Port, error) {
	if !ValidDeviceName(dev) || !h.Exists(portPath(dev, num)) {
		return Port{}, fmt.Errorf("device %s port %d: %w", dev, num, ErrNoDevice)
	}
	dir, err := h.OpenAttrDir(ClassInfiniband, dev)
	if err != nil {
		return Port{}, fmt.Errorf("device %s port %d: %w", dev, num, ErrNoDevice)
	}
	defer dir.Close()
	return h.readPort(&dir, dev, num, detail, false), nil
}

// The soft RDMA drivers. Their devices sit under /sys/devices/virtual with
// no device link, so sysfs names no driver: rdmad names it, and a
// driver = "rdma_rxe" selector matches Soft-RoCE devices as it reads.
const (
	DriverRXE = "rdma_rxe"
	DriverSIW = "siw"
)

// DriverMLX4 is the PCI driver of ConnectX-3 (mlx4), whose ports have a
// VPI type (mlx4_port<N>).
const DriverMLX4 = "mlx4_core"

// SIWNodeDesc is what siw writes into node_desc (SIW_NODE_DESC_COMMON); no
// other driver uses it, and siw has no sysfs attribute of its own.
const SIWNodeDesc = "Software iWARP stack"

// softDriver tells the driver of a device without a parent device: rxe is
// the only driver with a "parent" attribute (its netdev); siw is told by its
// node description, or as the one iWARP RNIC (node type 4) without one.
func softDriver(nodeType, parent, nodeDesc string) string {
	switch {
	case nodeDesc == SIWNodeDesc || strings.HasPrefix(nodeType, "4"):
		return DriverSIW
	case parent != "":
		return DriverRXE
	}
	return ""
}
