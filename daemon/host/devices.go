package host

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
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

// Device is the observed state of one RDMA device.
type Device struct {
	Name         string
	NodeType     string // raw node_type, e.g. "1: CA", "4: RNIC"
	NodeGUID     string
	SysImageGUID string
	FWVersion    string
	HCAType      string
	BoardID      string
	Driver       string // kernel driver of the parent device (mlx5_core, hfi1, rdma_rxe...)
	PCIAddress   string // "" for soft devices
	Parent       string // rxe/siw: the netdev it sits on
	Netdevs      []string
	Ports        []Port
	RoCEConfig   bool // configfs rdma_cm/<dev> exists
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
	// Configfs rdma_cm values; empty/-1 when the directory does not exist.
	RoCEMode string // kernel string, e.g. "RoCE v2"
	RoCETOS  int    // -1 when unknown
}

// Path of a port in sysfs, relative to the root.
func portPath(dev string, port int, attr ...string) string {
	return path.Join(append([]string{ClassInfiniband, dev, "ports", strconv.Itoa(port)}, attr...)...)
}

// ConfigfsPortPath is the rdma_cm directory of a port, relative to the root.
func ConfigfsPortPath(dev string, port int, attr ...string) string {
	return path.Join(append([]string{ConfigfsRdmaCM, dev, "ports", strconv.Itoa(port)}, attr...)...)
}

// Transport of the port.
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
	seen := map[Transport]bool{}
	var out []Transport
	for i := range d.Ports {
		t := d.PortTransport(&d.Ports[i])
		if !seen[t] {
			seen[t] = true
			out = append(out, t)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
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

// DeviceNames lists the RDMA devices present, sorted. A host without the
// class directory (no RDMA stack loaded) has none; that is not an error.
func (h *Host) DeviceNames() ([]string, error) {
	names, err := h.ReadDirNames(ClassInfiniband)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("host: list RDMA devices: %w", err)
	}
	return names, nil
}

// Devices reads every RDMA device. A device that vanishes while being read is
// skipped; other read errors are returned with the devices that did read.
func (h *Host) Devices() ([]Device, error) {
	names, err := h.DeviceNames()
	if err != nil {
		return nil, err
	}
	var devs []Device
	var errs []error
	for _, n := range names {
		d, err := h.Device(n)
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

// Device reads one RDMA device. Optional attributes that are missing or
// unreadable (EINVAL is common) are left empty; only the device directory
// itself is required. ErrNoDevice (wrapped) when it does not exist.
func (h *Host) Device(name string) (Device, error) {
	if name == "" || strings.ContainsAny(name, "/\x00") || name == "." || name == ".." {
		return Device{}, fmt.Errorf("host: device %q: %w", name, ErrNoDevice)
	}
	base := path.Join(ClassInfiniband, name)
	if _, err := os.Stat(h.Path(base)); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return Device{}, fmt.Errorf("host: device %s: %w", name, ErrNoDevice)
		}
		return Device{}, fmt.Errorf("host: device %s: %w", name, err)
	}
	opt := func(attr string) string {
		s, _ := h.ReadString(path.Join(base, attr))
		return strings.TrimSpace(s)
	}
	d := Device{
		Name:         name,
		NodeType:     opt("node_type"),
		NodeGUID:     opt("node_guid"),
		SysImageGUID: opt("sys_image_guid"),
		FWVersion:    opt("fw_ver"),
		HCAType:      opt("hca_type"),
		BoardID:      opt("board_id"),
		Parent:       opt("parent"),
	}
	if drv, err := os.Readlink(h.Path(base, "device", "driver")); err == nil {
		d.Driver = filepath.Base(drv)
	}
	if dev, err := os.Readlink(h.Path(base, "device")); err == nil {
		if b := filepath.Base(dev); isPCIAddress(b) {
			d.PCIAddress = b
		}
	}
	netdevs := map[string]bool{}
	if d.Parent != "" {
		netdevs[d.Parent] = true
	}
	if names, err := h.ReadDirNames(path.Join(base, "device", "net")); err == nil {
		for _, n := range names {
			netdevs[n] = true
		}
	}
	portNames, err := h.ReadDirNames(path.Join(base, "ports"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return Device{}, fmt.Errorf("host: device %s: ports: %w", name, err)
	}
	d.RoCEConfig = h.Exists(path.Join(ConfigfsRdmaCM, name))
	for _, pn := range portNames {
		num, err := strconv.Atoi(pn)
		if err != nil || num <= 0 {
			continue // not a port directory; sysfs has none, but be tolerant
		}
		p := h.readPort(name, num)
		for _, n := range p.Netdevs {
			netdevs[n] = true
		}
		d.Ports = append(d.Ports, p)
	}
	sort.Slice(d.Ports, func(i, j int) bool { return d.Ports[i].Number < d.Ports[j].Number })
	for n := range netdevs {
		d.Netdevs = append(d.Netdevs, n)
	}
	sort.Strings(d.Netdevs)
	if !h.Exists(base) { // vanished while we read it: say so rather than return a half device
		return Device{}, fmt.Errorf("host: device %s: %w", name, ErrNoDevice)
	}
	return d, nil
}

// gidScanGap is how many unpopulated GID entries in a row end the scan.
const gidScanGap = 8

func (h *Host) readPort(dev string, num int) Port {
	opt := func(attr ...string) string {
		s, _ := h.ReadString(portPath(dev, num, attr...))
		return strings.TrimSpace(s)
	}
	p := Port{
		Number:    num,
		State:     stripCode(opt("state")),
		PhysState: stripCode(opt("phys_state")),
		Rate:      opt("rate"),
		LinkLayer: opt("link_layer"),
		LID:       opt("lid"),
		SMLID:     opt("sm_lid"),
		RoCETOS:   -1,
	}
	types, ndevs := map[string]bool{}, map[string]bool{}
	if names, err := h.ReadDirNames(portPath(dev, num, "gid_attrs", "types")); err == nil {
		// Tables are large (rxe has 1024 entries, mlx5 256) and filled from
		// the start; unpopulated entries answer EINVAL. Reading all of them
		// costs thousands of syscalls per pass, so the scan stops after a
		// run of empty entries.
		idx := make([]int, 0, len(names))
		for _, n := range names {
			if i, err := strconv.Atoi(n); err == nil {
				idx = append(idx, i)
			}
		}
		sort.Ints(idx)
		empty := 0
		for _, i := range idx {
			t := opt("gid_attrs", "types", strconv.Itoa(i))
			if t == "" {
				if empty++; empty >= gidScanGap {
					break
				}
				continue
			}
			empty = 0
			types[t] = true
			if n := opt("gid_attrs", "ndevs", strconv.Itoa(i)); n != "" {
				ndevs[n] = true
			}
		}
	}
	p.GIDTypes = sortedKeys(types)
	p.Netdevs = sortedKeys(ndevs)
	if s, err := h.ReadString(ConfigfsPortPath(dev, num, "default_roce_mode")); err == nil {
		p.RoCEMode = strings.TrimSpace(s)
	}
	if s, err := h.ReadString(ConfigfsPortPath(dev, num, "default_roce_tos")); err == nil {
		if v, err := strconv.Atoi(strings.TrimSpace(s)); err == nil {
			p.RoCETOS = v
		}
	}
	return p
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
