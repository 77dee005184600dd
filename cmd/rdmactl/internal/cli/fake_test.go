package cli

import (
	"bytes"
	"encoding/json"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/rdmad/rdmad/dbusapi"
	"github.com/rdmad/rdmad/test/bustest"
)

// fakeRdmad owns org.rdmad1 on a private dbus-daemon and serves what rdmad
// serves (Manager properties and methods, GetManagedObjects, Describe,
// Diagnose) from fixed data: the output rdmactl prints of a known state
// (the golden files), and of a hostile service. The real rdmad is behind
// rdmactl in daemon/bus's and cmd/rdmad's tests.
type fakeRdmad struct {
	mu       sync.Mutex
	manager  dbusapi.Manager
	devices  []dbusapi.Device // with their ports
	actions  []dbusapi.Action
	changes  []dbusapi.Change // Describe's changes over D-Bus
	findings []dbusapi.Finding
	reload   string
	failed   uint32
	plan     dbusapi.Plan // what Plan answers
	callErr  *dbus.Error  // what a change returns, when set
	readErr  *dbus.Error  // what ReadPorts returns, when set
	conn     *dbus.Conn   // the fake's connection (serveFake), to emit signals
	// objectsRead, when set, is told of each GetManagedObjects.
	objectsRead chan struct{}
	// live are ports ReadPorts answers in place of the published ones,
	// by device (the kernel changed since rdmad's last read).
	live  map[string]dbusapi.Port
	block chan struct{} // when set, read calls wait for it
	calls []string
}

func (f *fakeRdmad) wait() {
	f.mu.Lock()
	b := f.block
	f.mu.Unlock()
	if b != nil {
		<-b
	}
}

func (f *fakeRdmad) record(call string) *dbus.Error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call)
	return f.callErr
}

// fakeManager is org.rdmad1.Manager.
type fakeManager struct{ f *fakeRdmad }

func (m fakeManager) Describe() (string, *dbus.Error) {
	m.f.wait()
	d := dbusapi.Description{Manager: m.f.manager, Devices: m.f.devices, Actions: m.f.actions,
		Runtime: &dbusapi.RuntimeState{NetnsMode: m.f.manager.NetnsMode}, Changes: append([]dbusapi.Change{}, m.f.changes...)}
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return "", dbus.MakeFailedError(err)
	}
	return string(b), nil
}

func (m fakeManager) Diagnose() (string, *dbus.Error) {
	m.f.wait()
	doc, err := dbusapi.EncodeFindings(m.f.findings)
	if err != nil {
		return "", dbus.MakeFailedError(err)
	}
	return doc, nil
}

func (m fakeManager) SetRoCE(dev string, port uint32, mode string, tos int32, persist bool) *dbus.Error {
	b, _ := json.Marshal([]any{dev, port, mode, tos, persist})
	return m.f.record("SetRoCE " + string(b))
}

func (m fakeManager) SetQoS(dev string, port uint32, trust string, pfc []byte, persist bool) *dbus.Error {
	b, _ := json.Marshal([]any{dev, port, trust, dbusapi.Priorities(pfc), persist})
	return m.f.record("SetQoS " + string(b))
}

// SetQoSSettings records the settings with their D-Bus signatures, so the
// golden calls show the types rdmactl sends.
func (m fakeManager) SetQoSSettings(dev string, port uint32, settings map[string]dbus.Variant, persist bool) *dbus.Error {
	typed := map[string]string{}
	for k, v := range settings {
		typed[k] = v.Signature().String() + " " + v.String()
	}
	b, _ := json.Marshal([]any{dev, port, typed, persist})
	return m.f.record("SetQoSSettings " + string(b))
}

func (m fakeManager) AddLink(name, typ, netdev string, persist bool) *dbus.Error {
	b, _ := json.Marshal([]any{name, typ, netdev, persist})
	return m.f.record("AddLink " + string(b))
}

func (m fakeManager) DeleteLink(name string, persist bool) *dbus.Error {
	b, _ := json.Marshal([]any{name, persist})
	return m.f.record("DeleteLink " + string(b))
}

func (m fakeManager) SetNetnsMode(mode string, persist bool) *dbus.Error {
	b, _ := json.Marshal([]any{mode, persist})
	return m.f.record("SetNetnsMode " + string(b))
}

func (m fakeManager) Withdraw(kind, dev string, port uint32, persist bool) *dbus.Error {
	b, _ := json.Marshal([]any{kind, dev, port, persist})
	return m.f.record("Withdraw " + string(b))
}

// Plan records the candidate's bytes and name, and answers f.plan.
func (m fakeManager) Plan(candidate []byte, as string) (string, *dbus.Error) {
	m.f.wait()
	b, _ := json.Marshal([]any{string(candidate), as})
	if e := m.f.record("Plan " + string(b)); e != nil {
		return "", e
	}
	doc, err := dbusapi.EncodePlan(m.f.plan)
	if err != nil {
		return "", dbus.MakeFailedError(err)
	}
	return doc, nil
}

// ReadPorts answers the fixture's ports as read at fixtureRead, or
// f.readErr.
func (m fakeManager) ReadPorts(device string, port uint32) (uint64, map[dbus.ObjectPath]map[string]dbus.Variant, *dbus.Error) {
	m.f.wait()
	m.f.mu.Lock()
	defer m.f.mu.Unlock()
	if m.f.readErr != nil {
		return 0, nil, m.f.readErr
	}
	out := map[dbus.ObjectPath]map[string]dbus.Variant{}
	for _, d := range m.f.devices {
		for _, p := range d.Ports {
			if (device == "" || d.Name == device) && (port == 0 || p.Number == port) {
				if l, ok := m.f.live[p.Device]; ok {
					p = l
				}
				out[dbusapi.PortPath(d.Name, int(p.Number))] = dbusapi.ToProps(p)
			}
		}
	}
	return fixtureRead, out, nil
}

func (m fakeManager) Reload() (string, *dbus.Error) {
	return m.f.reload, m.f.record("Reload")
}

func (m fakeManager) Reconcile() (uint32, uint32, string, *dbus.Error) {
	return 2, m.f.failed, m.f.reload, m.f.record("Reconcile")
}

// fakeProps is org.freedesktop.DBus.Properties at the root.
type fakeProps struct{ f *fakeRdmad }

func (p fakeProps) GetAll(iface string) (map[string]dbus.Variant, *dbus.Error) {
	p.f.wait()
	if iface != dbusapi.ManagerIface {
		return nil, dbus.MakeFailedError(nil)
	}
	m := p.f.manager
	for _, d := range p.f.devices {
		m.Devices = append(m.Devices, dbusapi.DevicePath(d.Name))
	}
	return dbusapi.ToProps(m), nil
}

// fakeObjects is org.freedesktop.DBus.ObjectManager at the root.
type fakeObjects struct{ f *fakeRdmad }

func (o fakeObjects) GetManagedObjects() (map[dbus.ObjectPath]map[string]map[string]dbus.Variant, *dbus.Error) {
	o.f.wait()
	if o.f.objectsRead != nil {
		defer func() { o.f.objectsRead <- struct{}{} }()
	}
	objs := map[dbus.ObjectPath]map[string]map[string]dbus.Variant{}
	for _, d := range o.f.devices {
		for _, p := range d.Ports {
			d.PortPaths = append(d.PortPaths, dbusapi.PortPath(d.Name, int(p.Number)))
			objs[dbusapi.PortPath(d.Name, int(p.Number))] = map[string]map[string]dbus.Variant{dbusapi.PortIface: dbusapi.ToProps(p)}
		}
		ports := d.Ports
		d.Ports = nil
		objs[dbusapi.DevicePath(d.Name)] = map[string]map[string]dbus.Variant{dbusapi.DeviceIface: dbusapi.ToProps(d)}
		d.Ports = ports
	}
	return objs, nil
}

// serveFake owns org.rdmad1 on a new private bus with f behind it and
// returns the bus address.
func serveFake(t *testing.T, f *fakeRdmad) string {
	t.Helper()
	addr := bustest.Start(t)
	conn, err := dbus.Connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	for iface, obj := range map[string]any{dbusapi.ManagerIface: fakeManager{f}, "org.freedesktop.DBus.Properties": fakeProps{f},
		"org.freedesktop.DBus.ObjectManager": fakeObjects{f}} {
		if err := conn.Export(obj, dbusapi.RootPath, iface); err != nil {
			t.Fatal(err)
		}
	}
	if reply, err := conn.RequestName(dbusapi.BusName, dbus.NameFlagDoNotQueue); err != nil || reply != dbus.RequestNameReplyPrimaryOwner {
		t.Fatalf("own %s: %v %v", dbusapi.BusName, reply, err)
	}
	f.conn = conn
	return addr
}

// fixtureReconcile is the fixture's last reconcile: 2026-11-24 10:52:26 UTC.
var fixtureReconcile = uint64(time.Date(2026, 11, 24, 10, 52, 26, 0, time.UTC).UnixMicro())

// fixtureRead is when ReadPorts read the fixture's ports: 2026-11-24
// 11:02:03 UTC.
var fixtureRead = uint64(time.Date(2026, 11, 24, 11, 2, 3, 0, time.UTC).UnixMicro())

// fixture is a host with a dual-port ConnectX (RoCE), an mlx4 InfiniBand
// port and a Soft-RoCE link, the doctor's findings on it one of each
// severity.
func fixture() *fakeRdmad {
	return &fakeRdmad{
		manager: dbusapi.Manager{Version: "1.2.3", ConfigFiles: []string{"/etc/rdma/rdmad.toml", "/etc/rdma/rdmad.d/50-roce.toml"}, PolicyInForce: "files",
			LastReconcile: fixtureReconcile, LastResult: "ok", NetnsMode: "shared", APIChanges: "all", Modules: []string{"mlx5_ib", "rdma_rxe"},
			Links: []dbusapi.Link{{Name: "rxe0", Type: "rxe", Netdev: "eth1", Source: "/etc/rdma/rdmad.toml:12"},
				{Name: "rxe1", Type: "rxe", Netdev: "eth2", Source: "runtime"}},
			Disruptions: fixtureDisruptions,
			Holds: []dbusapi.Hold{{Device: "mlx5_0", Port: 1, Settings: []string{"qos_pfc", "qos_trust"}, Holder: ":1.42 (root (uid 0), pid 4242 rdmactl)",
				Since: fixtureReconcile + 60_000_000}}},
		devices: []dbusapi.Device{
			{Name: "mlx4_0", Transports: []string{"infiniband"}, NodeType: "1: CA", NodeGUID: "0002:c903:0010:a1b0", FirmwareVersion: "2.42.5000",
				HCAType: "MT4099", BoardID: "MT_1090120019", Driver: "mlx4_core", PCIAddress: "0000:04:00.0", Netdevs: []string{},
				Ports: []dbusapi.Port{{Device: "mlx4_0", Number: 1, Transport: "infiniband", State: "ACTIVE", PhysState: "LinkUp",
					Rate: "56 Gb/sec (4X FDR)", LinkLayer: "InfiniBand", LID: "0x5", SMLID: "0x1", RoCETOS: -1, DesiredRoCETOS: -1, VPIType: "ib",
					Drift:    map[string]bool{"vpi_type": false},
					Settings: []dbusapi.Setting{{Name: "vpi_type", Title: "VPI port type", Declared: "ib", Source: "/etc/rdma/rdmad.toml:14", Observed: "ib", State: "holds"}}}}},
			{Name: "mlx5_0", Transports: []string{"roce"}, NodeType: "1: CA", NodeGUID: "b859:9f03:00d4:26a0", FirmwareVersion: "16.35.2000",
				HCAType: "MT4119", BoardID: "MT_0000000008", Driver: "mlx5_core", PCIAddress: "0000:3b:00.0", Netdevs: []string{"ens1f0"}, RoCEConfigfs: true,
				Ports: []dbusapi.Port{{Device: "mlx5_0", Number: 1, Transport: "roce", State: "ACTIVE", PhysState: "LinkUp", Rate: "25 Gb/sec (1X EDR)",
					LinkLayer: "Ethernet", GIDTypes: []string{"IB/RoCE v1", "RoCE v2"}, Netdevs: []string{"ens1f0"}, RoCEMode: "RoCE v2", RoCETOS: 106,
					DesiredRoCEMode: "v2", DesiredRoCETOS: 106, DesiredRoCESource: "/etc/rdma/rdmad.d/50-roce.toml:3",
					QoSTrust: "dscp", QoSPFC: dbusapi.Priorities{3}, DesiredQoSTrust: "dscp", DesiredQoSPFC: dbusapi.Priorities{3}, DesiredQoSPFCSet: true,
					DesiredQoSSource: "/etc/rdma/rdmad.d/60-qos.toml:1",
					Drift:            map[string]bool{"roce_mode": false, "roce_tos": false, "qos_pfc": false, "qos_trust": false, "qos_cable_length": false, "qos_pause": true},
					Settings: []dbusapi.Setting{
						{Name: "roce_mode", Title: "RoCE mode", Declared: "RoCE v2", Source: "/etc/rdma/rdmad.d/50-roce.toml:3", Observed: "RoCE v2", State: "holds"},
						{Name: "roce_tos", Title: "RoCE TOS", Declared: "106", Source: "/etc/rdma/rdmad.d/50-roce.toml:3", Observed: "106", State: "holds"},
						{Name: "qos_pfc", Title: "PFC", Declared: "[3]", Source: "/etc/rdma/rdmad.d/60-qos.toml:1", Observed: "[3]", State: "holds"},
						{Name: "qos_trust", Title: "QoS trust", Declared: "dscp", Source: "/etc/rdma/rdmad.d/60-qos.toml:1", Observed: "dscp", State: "holds"},
						{Name: "qos_cable_length", Title: "cable length", Declared: "10 m", Source: "/etc/rdma/rdmad.d/60-qos.toml:1", Observed: "10 m", State: "holds"},
						{Name: "qos_pause", Title: "global pause", Declared: "off", Source: "/etc/rdma/rdmad.d/60-qos.toml:1", Observed: "on", State: "refused",
							Why: "set pause of ens1f0: operation not permitted"},
						{Name: "qos_ecn", Title: "ECN priorities", Observed: "[0, 1, 2, 3, 4, 5, 6, 7]", State: "undeclared"},
					}}}},
			{Name: "rxe0", Transports: []string{"roce"}, NodeType: "1: CA", NodeGUID: "5054:00ff:fe12:3456", Driver: "rdma_rxe", Netdevs: []string{"eth1"}, RoCEConfigfs: true,
				Ports: []dbusapi.Port{{Device: "rxe0", Number: 1, Transport: "roce", State: "DOWN", PhysState: "Disabled", LinkLayer: "Ethernet",
					GIDTypes: []string{"RoCE v2"}, Netdevs: []string{"eth1"}, RoCEMode: "RoCE v2", RoCETOS: 0, DesiredRoCEMode: "v1", DesiredRoCETOS: -1,
					DesiredRoCESource: "/etc/rdma/rdmad.toml:8",
					Error:             "roce mode: rxe0/1 does not support IB/RoCE v1 (EIO); qos pfc: eth1 does not support DCB: PFC and trust cannot be set (operation not supported)",
					DesiredQoSPFC:     dbusapi.Priorities{3}, DesiredQoSPFCSet: true, DesiredQoSSource: "/etc/rdma/rdmad.d/60-qos.toml:1",
					Drift: map[string]bool{"roce_mode": true, "qos_pfc": true},
					Settings: []dbusapi.Setting{
						{Name: "roce_mode", Title: "RoCE mode", Declared: "IB/RoCE v1", Source: "/etc/rdma/rdmad.toml:8", Observed: "RoCE v2", State: "refused",
							Why: "rxe0/1 does not support IB/RoCE v1 (EIO)"},
						{Name: "roce_tos", Title: "RoCE TOS", Observed: "0", State: "undeclared"},
						{Name: "qos_pfc", Title: "PFC", Declared: "[3]", Source: "/etc/rdma/rdmad.d/60-qos.toml:1", State: "refused",
							Why: "eth1 does not support DCB: PFC and trust cannot be set (operation not supported)"},
					}}}},
		},
		actions: []dbusapi.Action{
			{Subject: dbusapi.Subject{Kind: "port", Device: "mlx5_0", Port: 1}, Kind: "roce tos", From: "0", To: "106", Status: "changed", Source: "/etc/rdma/rdmad.d/50-roce.toml:3"},
			{Subject: dbusapi.Subject{Kind: "link", Link: "rxe1"}, Kind: "soft link", To: "rxe on eth2", Status: "failed", Error: "eth2: no such network interface"},
		},
		changes: []dbusapi.Change{
			{Kind: "roce", Target: "mlx5_0/1", Values: `mode = "v2"`, Source: "/etc/rdma/rdmad.d/zz-rdmad-persist.toml:4",
				By: "alice (uid 1000), pid 4242 rdmactl, session-3.scope", At: fixtureReconcile - 3600e6},
			{Kind: "qos", Target: "mlx5_0", Values: "pfc = [3], cable_length = 10", Source: "/etc/rdma/rdmad.d/zz-rdmad-persist.toml:9"},
			{Kind: "link", Target: "rxe1", Values: `type = "rxe", netdev = "eth2"`, Source: "runtime", By: "root (uid 0), pid 77 busctl", At: fixtureReconcile - 60e6},
		},
		findings: []dbusapi.Finding{
			{ID: "port-active", Subject: dbusapi.Subject{Kind: "port", Device: "mlx5_0", Port: 1}, Severity: dbusapi.SeverityOK, Finding: "mlx5_0/1: ACTIVE, LinkUp"},
			{ID: "memlock-login-low", Subject: dbusapi.Subject{Kind: "host"}, Severity: dbusapi.SeverityWarn,
				Finding: "RDMA users get memlock 8 MiB at login", Fix: "add [memlock] to /etc/rdma/rdmad.toml"},
			{ID: "port-disabled", Subject: dbusapi.Subject{Kind: "port", Device: "rxe0", Port: 1}, Severity: dbusapi.SeverityFail,
				Finding: "rxe0/1 is Disabled", Fix: "ip link set eth1 up"},
			{ID: "corrections-held", Subject: dbusapi.Subject{Kind: "port", Device: "mlx5_0", Port: 1}, Severity: dbusapi.SeverityWarn,
				Finding: "mlx5_0/1: rdmad does not correct qos_pfc, qos_trust: held by :1.42 (root (uid 0), pid 4242 rdmactl) since 2026-11-24 10:53:26",
				Fix:     "wait for the holder to finish (rdmactl qualify puts every value back and releases its hold); the hold ends when the holder leaves the bus, and rdmad then reads the port again"},
		},
		reload: "ok",
	}
}

// fixtureDisruptions is rdmad's table as the daemon publishes it (the
// rows rdmactl reads).
var fixtureDisruptions = []dbusapi.Disruption{
	{Driver: "mlx5_core", Setting: "qos_pfc", Key: "qos.pfc", Effect: dbusapi.DisruptsLink, When: "when the PFC priorities change", Follows: "mlx5e_dcbnl_ieee_setpfc"},
	{Driver: "mlx5_core", Setting: "qos_cable_length", Key: "qos.cable_length", Effect: "none", When: "the PFC delay only resizes the lossless headroom", Follows: "mlx5e_dcbnl_ieee_setpfc"},
	{Driver: "mlx5_core", Setting: "qos_trust", Key: "qos.trust", Effect: dbusapi.DisruptsQueues, When: "when the trust mode changes between pcp and dscp", Follows: "mlx5e_set_trust_state"},
}

// empty is a host with nothing: no device, no link, no finding.
func empty() *fakeRdmad {
	return &fakeRdmad{manager: dbusapi.Manager{Version: "1.2.3", LastResult: "ok", NetnsMode: "shared", APIChanges: "all", PolicyInForce: "files"}, reload: "ok"}
}

// run runs rdmactl in-process against addr, in a fixed time zone.
func runCLI(addr string, args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	e := newEnv(&out, &errb)
	e.loc = time.FixedZone("CET", 3600)
	e.now = func() time.Time { return time.UnixMicro(int64(fixtureRead)) }
	e.interactive, e.terminal = false, false
	code = e.run(append([]string{"--bus", addr}, args...))
	return code, out.String(), errb.String()
}

// runTerminal runs rdmactl as runCLI does, as if standard input were a
// terminal on which the user types answer.
func runTerminal(addr, answer string, args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	e := newEnv(&out, &errb)
	e.loc = time.FixedZone("CET", 3600)
	e.now = func() time.Time { return time.UnixMicro(int64(fixtureRead)) }
	e.interactive, e.terminal, e.stdin = false, true, strings.NewReader(answer)
	code = e.run(append([]string{"--bus", addr}, args...))
	return code, out.String(), errb.String()
}

func (f *fakeRdmad) callLog() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := append([]string(nil), f.calls...)
	sort.Strings(out)
	return out
}
