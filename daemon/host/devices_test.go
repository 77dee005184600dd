package host_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"syscall"
	"testing"

	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
)

func TestDevicesMLX5(t *testing.T) {
	h := host.New(hosttest.FixtureDir("mlx5"))
	devs, err := h.Devices()
	if err != nil {
		t.Fatal(err)
	}
	if len(devs) != 2 || devs[0].Name != "mlx5_0" || devs[1].Name != "mlx5_1" {
		t.Fatalf("devices = %+v", devs)
	}
	d := devs[1]
	want := host.Device{
		Name: "mlx5_1", NodeType: "1: CA", NodeGUID: "b859:9f03:00d4:2e7b", SysImageGUID: "b859:9f03:00d4:2e7a",
		FWVersion: "16.35.2000", HCAType: "MT4119", BoardID: "MT_0000000080", Driver: "mlx5_core",
		PCIAddress: "0000:3b:00.1", Netdevs: []string{"ens1f1np1"}, RoCEConfig: true, Detail: host.DetailFull,
		Ports: []host.Port{{
			Number: 1, State: "ACTIVE", PhysState: "LinkUp", Rate: "100 Gb/sec (4X EDR)", LinkLayer: "Ethernet",
			LID: "0x0000", SMLID: "0x0000", GIDTypes: []string{"IB/RoCE v1", "RoCE v2"}, Netdevs: []string{"ens1f1np1"},
		}},
	}
	if !reflect.DeepEqual(d, want) {
		t.Errorf("mlx5_1 =\n%+v\nwant\n%+v", d, want)
	}
	// What policy needs, and nothing it does not: identity, driver,
	// netdevs and link layer; no firmware, state, GIDs or configfs.
	p, err := h.ReadDevice("mlx5_1", host.DetailPolicy)
	if err != nil {
		t.Fatal(err)
	}
	wantPolicy := host.Device{
		Name: "mlx5_1", NodeType: "1: CA", NodeGUID: "b859:9f03:00d4:2e7b", Driver: "mlx5_core",
		PCIAddress: "0000:3b:00.1", Netdevs: []string{"ens1f1np1"}, Detail: host.DetailPolicy,
		Ports: []host.Port{{Number: 1, LinkLayer: "Ethernet"}},
	}
	if !reflect.DeepEqual(p, wantPolicy) {
		t.Errorf("policy read of mlx5_1 =\n%+v\nwant\n%+v", p, wantPolicy)
	}
	if got := d.Transports(); !reflect.DeepEqual(got, []host.Transport{host.TransportRoCE}) {
		t.Errorf("transports = %v", got)
	}
}

func TestDevicesMLX4VPI(t *testing.T) {
	d, err := host.New(hosttest.FixtureDir("mlx4")).Device("mlx4_0")
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Ports) != 2 {
		t.Fatalf("ports = %+v", d.Ports)
	}
	if tr := d.PortTransport(&d.Ports[0]); tr != host.TransportInfiniBand {
		t.Errorf("port 1 transport = %s", tr)
	}
	if tr := d.PortTransport(&d.Ports[1]); tr != host.TransportRoCE {
		t.Errorf("port 2 transport = %s", tr)
	}
	if d.Ports[0].LID != "0x0003" || d.Ports[0].SMLID != "0x0001" || d.Ports[0].Netdevs != nil {
		t.Errorf("IB port = %+v", d.Ports[0])
	}
	if !reflect.DeepEqual(d.Netdevs, []string{"ens2"}) {
		t.Errorf("netdevs = %v", d.Netdevs)
	}
	if got := d.Transports(); !reflect.DeepEqual(got, []host.Transport{host.TransportInfiniBand, host.TransportRoCE}) {
		t.Errorf("transports = %v", got)
	}
}

func TestDevicesOPAAndSoftRoCE(t *testing.T) {
	d, err := host.New(hosttest.FixtureDir("hfi1")).Device("hfi1_0")
	if err != nil {
		t.Fatal(err)
	}
	if d.Driver != "hfi1" || d.PortTransport(&d.Ports[0]) != host.TransportOPA {
		t.Errorf("hfi1: driver %q transport %s", d.Driver, d.PortTransport(&d.Ports[0]))
	}
	r, err := host.New(hosttest.FixtureDir("rxe")).Device("rxe0")
	if err != nil {
		t.Fatal(err)
	}
	if r.PCIAddress != "" || r.Driver != host.DriverRXE || r.Parent != "veth0" || !reflect.DeepEqual(r.Netdevs, []string{"veth0"}) {
		t.Errorf("rxe0 = %+v", r)
	}
	if !reflect.DeepEqual(r.Ports[0].GIDTypes, []string{"RoCE v2"}) {
		t.Errorf("rxe0 port = %+v", r.Ports[0])
	}
}

func TestDeviceWithMissingOptionalFiles(t *testing.T) {
	d, err := host.New(hosttest.FixtureDir("sparse")).Device("bnxt_re0")
	if err != nil {
		t.Fatal(err)
	}
	if d.FWVersion != "" || d.NodeGUID != "" || len(d.Ports) != 1 {
		t.Fatalf("sparse = %+v", d)
	}
	p := d.Ports[0]
	if p.State != "DOWN" || p.LinkLayer != "" || p.GIDTypes != nil {
		t.Errorf("sparse port = %+v", p)
	}
	if tr := d.PortTransport(&p); tr != host.TransportUnknown {
		t.Errorf("transport = %s", tr)
	}
}

// einvalIO answers EINVAL for attributes the kernel refuses to show, as
// gid_attrs of an unpopulated GID or an InfiniBand port's ndevs do.
type einvalIO struct {
	host.OSAttrIO
	bad string
}

func (e einvalIO) ReadFile(name string) ([]byte, error) {
	if filepath.Base(name) == e.bad || filepath.Base(filepath.Dir(name)) == e.bad {
		return nil, &os.PathError{Op: "read", Path: name, Err: syscall.EINVAL}
	}
	return os.ReadFile(name)
}

func TestEINVALAttributesAreOptional(t *testing.T) {
	for _, bad := range []string{"fw_ver", "rate", "ndevs", "types", "default_roce_tos"} {
		h := host.NewWithIO(hosttest.FixtureDir("mlx5"), einvalIO{bad: bad})
		d, err := h.Device("mlx5_0")
		if err != nil {
			t.Fatalf("%s: %v", bad, err)
		}
		if d.Name != "mlx5_0" || len(d.Ports) != 1 {
			t.Errorf("%s: %+v", bad, d)
		}
	}
}

func TestVanishedAndBogusDevices(t *testing.T) {
	h := host.New(hosttest.FixtureDir("mlx5"))
	for _, name := range []string{"mlx5_9", "", "..", "../mlx5_0", "a/b"} {
		if _, err := h.Device(name); !errors.Is(err, host.ErrNoDevice) {
			t.Errorf("Device(%q) err = %v, want ErrNoDevice", name, err)
		}
	}
	empty := host.New(t.TempDir())
	devs, err := empty.Devices()
	if err != nil || len(devs) != 0 {
		t.Errorf("host without RDMA: %v %v", devs, err)
	}
}

func TestLoadedModules(t *testing.T) {
	m, err := host.New(hosttest.FixtureDir("rxe")).LoadedModules()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"rdma_rxe", "rdma_cm", "ib_core", "configfs"} {
		if !m[want] {
			t.Errorf("%s not loaded in %v", want, m)
		}
	}
	if m["mlx5_ib"] {
		t.Error("mlx5_ib should not be loaded")
	}
}

func TestWriteFileAtomic(t *testing.T) {
	root := t.TempDir()
	h := host.New(root)
	if err := h.WriteFileAtomic("etc/x/y.conf", []byte("one\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := hosttest.Read(t, root, "etc/x/y.conf"); got != "one" {
		t.Errorf("content %q", got)
	}
	if err := h.WriteFileAtomic("etc/x/y.conf", []byte("two\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(root, "etc/x/y.conf"))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("mode = %v, %v", st.Mode(), err)
	}
	ents, _ := os.ReadDir(filepath.Join(root, "etc/x"))
	if len(ents) != 1 {
		t.Errorf("temp files left behind: %v", ents)
	}
	// A directory where the file should be: the error surfaces, nothing is half-written.
	os.MkdirAll(filepath.Join(root, "etc/dir.conf"), 0o755)
	if err := h.WriteFileAtomic("etc/dir.conf", []byte("x"), 0o644); err == nil {
		t.Error("rename over a directory succeeded")
	}
}

func BenchmarkDevices(b *testing.B) {
	h := host.New(hosttest.FixtureDir("demo"))
	for i := 0; i < b.N; i++ {
		if _, err := h.Devices(); err != nil {
			b.Fatal(err)
		}
	}
}

// countingIO counts attribute reads, to keep the cost of a device read in view.
type countingIO struct {
	host.OSAttrIO
	reads int
}

func (c *countingIO) ReadAttr(name string) ([]byte, error) {
	c.reads++
	return c.OSAttrIO.ReadAttr(name)
}

// A 1024-entry GID table (rxe) with three populated entries is not read
// entry by entry to the end.
func TestLargeGIDTableScanStops(t *testing.T) {
	root := hosttest.Copy(t, "rxe")
	ports := filepath.Join(root, host.ClassInfiniband, "rxe0", "ports", "1", "gid_attrs")
	for i := 1; i < 1024; i++ {
		for _, attr := range []string{"types", "ndevs"} {
			if err := os.WriteFile(filepath.Join(ports, attr, strconv.Itoa(i)), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	// entry 2 populated after a hole of one: still found
	os.WriteFile(filepath.Join(ports, "types", "2"), []byte("RoCE v2\n"), 0o644)
	os.WriteFile(filepath.Join(ports, "ndevs", "2"), []byte("veth0\n"), 0o644)
	io := &countingIO{}
	d, err := host.NewWithIO(root, io).Device("rxe0")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(d.Ports[0].GIDTypes, []string{"RoCE v2"}) {
		t.Errorf("gid types %v", d.Ports[0].GIDTypes)
	}
	if io.reads > 100 {
		t.Errorf("reading rxe0 took %d attribute reads; the GID scan should stop after a run of empty entries", io.reads)
	}
}

// Under the unit's UMask=0077, directories rdmad creates for files others
// read are 0755 all the same; a directory that exists keeps its mode.
func TestWriteFileAtomicCreatesPublicDirsUnderUmask(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	root := t.TempDir()
	h := host.New(root)
	if err := os.Mkdir(filepath.Join(root, "etc"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := h.WriteFileAtomic("etc/security/limits.d/90-rdmad-memlock.conf", []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for dir, want := range map[string]fs.FileMode{"etc": 0o700, "etc/security": 0o755, "etc/security/limits.d": 0o755} {
		if st, err := os.Stat(filepath.Join(root, dir)); err != nil || st.Mode().Perm() != want {
			t.Errorf("%s: mode %v (%v), want %v", dir, st.Mode().Perm(), err, want)
		}
	}
	if st, _ := os.Stat(filepath.Join(root, "etc/security/limits.d/90-rdmad-memlock.conf")); st.Mode().Perm() != 0o644 {
		t.Errorf("file mode %v", st.Mode().Perm())
	}
	hosttest.Write(t, root, "etc/file", "")
	if err := host.MkdirAllPublic(filepath.Join(root, "etc/file/sub")); err == nil {
		t.Error("a directory under a regular file: no error")
	}
}

// Soft devices have no device link: host names their driver from what
// each driver shows (rxe its parent netdev, siw its node description); a
// device with a device link but no driver link is not taken for one.
func TestSoftDevicesNameTheirDriver(t *testing.T) {
	root := t.TempDir()
	virtual := func(name string, files map[string]string) {
		for rel, data := range files {
			hosttest.Write(t, root, "sys/devices/virtual/infiniband/"+name+"/"+rel, data)
		}
		hosttest.Write(t, root, "sys/devices/virtual/infiniband/"+name+"/ports/1/link_layer", "Ethernet\n")
		if err := os.MkdirAll(filepath.Join(root, host.ClassInfiniband), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("../../devices/virtual/infiniband/"+name, filepath.Join(root, host.ClassInfiniband, name)); err != nil {
			t.Fatal(err)
		}
	}
	virtual("rxe0", map[string]string{"node_type": "1: CA\n", "parent": "eth0\n", "node_desc": "rxe\n"})
	virtual("siw0", map[string]string{"node_type": "4: RNIC\n", "node_desc": "Software iWARP stack\n"})
	virtual("odd0", map[string]string{"node_type": "1: CA\n"})
	// A hardware iWARP RNIC on an auxiliary bus, its driver being unbound:
	// it has a device link, so it is not siw whatever it looks like.
	virtual("iwp0", map[string]string{"node_type": "4: RNIC\n"})
	hosttest.Write(t, root, "sys/devices/aux/irdma.iwarp.0/uevent", "")
	if err := os.Symlink("../../../aux/irdma.iwarp.0", filepath.Join(root, "sys/devices/virtual/infiniband/iwp0/device")); err != nil {
		t.Fatal(err)
	}
	h := host.New(root)
	for name, want := range map[string]string{"rxe0": host.DriverRXE, "siw0": host.DriverSIW, "odd0": "", "iwp0": ""} {
		d, err := h.Device(name)
		if err != nil {
			t.Fatal(err)
		}
		if d.Driver != want {
			t.Errorf("%s: driver %q, want %q", name, d.Driver, want)
		}
	}
}

// DCB belongs to the PCI function's netdev: a bond (or VLAN, bridge) on the
// port shares its GID table and may sort first, but is never the answer.
// The mlx4 function has one netdev per port (dev_port), a soft device
// names its netdev through its GID table.
func TestPortNetdevIsTheFunctionsOwn(t *testing.T) {
	root := hosttest.Copy(t, "demo")
	hosttest.Write(t, root, "sys/class/infiniband/mlx5_0/ports/1/gid_attrs/ndevs/1", "bond0\n")
	h := host.New(root)
	for _, c := range []struct {
		dev  string
		port int
		want string
	}{
		{"mlx5_0", 1, "ens1f0np0"},
		{"mlx5_1", 1, "ens1f1np1"},
		{"mlx4_0", 2, "ens2"},
		{"rxe0", 1, "veth0"},
	} {
		d, err := h.ReadDevice(c.dev, host.DetailFull)
		if err != nil {
			t.Fatal(err)
		}
		if got := h.PortNetdev(&d, d.Port(c.port)); got != c.want {
			t.Errorf("%s/%d: PortNetdev = %q, want %q (GID table %q)", c.dev, c.port, got, c.want, d.Port(c.port).Netdevs)
		}
	}
}
