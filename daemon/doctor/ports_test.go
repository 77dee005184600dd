package doctor_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/rdmad/rdmad/daemon/doctor"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
)

func TestNoDevice(t *testing.T) {
	root := hosttest.Copy(t, "rxe-ready")
	remove(t, root, "sys/class/infiniband")
	fs := diagnose(t, root)
	mustFix(t, fs, "no-device", "host", doctor.SeverityFail, "no RDMA device", "rdmactl link add rxe0 --type rxe")
	// The declared Soft-RoCE link is gone while its netdev is there.
	mustFix(t, fs, "link-missing", "link rxe0", doctor.SeverityFail, "does not exist", "rdma link add rxe0 type rxe netdev veth0")
	// Nothing to reach: no user-space findings on top.
	if f := find(fs, "verbs-ready", "host"); f != nil {
		t.Errorf("verbs checked without devices: %+v", f)
	}
}

func TestDeclaredLinkWaitsForItsNetdev(t *testing.T) {
	root := hosttest.Copy(t, "rxe-ready")
	remove(t, root, "sys/class/infiniband")
	remove(t, root, "sys/class/net/veth0")
	mustFix(t, diagnose(t, root), "link-waiting", "link rxe0", doctor.SeverityWarn, "waits for network interface veth0", "create veth0")
}

func TestSiwLinkOnAKernelWithoutSiw(t *testing.T) {
	root := readyIB(t)
	hosttest.Write(t, root, "sys/class/net/eth0/operstate", "up\n")
	pol := parsePolicy(t, "[[link]]\nname = \"siw0\"\ntype = \"siw\"\nnetdev = \"eth0\"\n")
	mustFix(t, diagnose(t, root, withPolicy(pol)), "link-missing", "link siw0", doctor.SeverityFail,
		"no siw module", `type = "rxe"`)
	// Where the kernel has siw, the usual fix: create the link.
	hosttest.Write(t, root, "lib/modules/6.1.0-28-amd64/modules.dep", "kernel/drivers/infiniband/sw/siw/siw.ko.xz: kernel/drivers/infiniband/core/ib_core.ko.xz\n")
	mustFix(t, diagnose(t, root, withPolicy(pol)), "link-missing", "link siw0", doctor.SeverityFail,
		"does not exist", "rdma link add siw0 type siw netdev eth0")
}

// Without an expectation a port that is down, uncabled or polling is a
// warning (a port left unused is common); a port without a subnet
// manager fails when no history says since when its link is up.
func TestPortStates(t *testing.T) {
	for _, tc := range []struct {
		name      string
		host, dev string
		port      int
		attrs     map[string]string
		netdev    map[string]string // sys/class/net/<netdev>/... of the port
		id        string
		sev       doctor.Severity
		inFinding string
		inFix     string
	}{
		{name: "Soft-RoCE netdev down", host: "rxe-ready", dev: "rxe0", port: 1,
			attrs: map[string]string{"state": "1: DOWN", "phys_state": "3: Disabled"}, netdev: map[string]string{"veth0/flags": "0x1002"},
			id: "port-admin-down", sev: doctor.SeverityWarn, inFinding: "veth0 is administratively down (state DOWN, physical state Disabled)", inFix: "ip link set dev veth0 up"},
		// mlx5 says Disabled for both; the netdev's flags tell.
		{name: "RoCE netdev down", host: "mlx5", dev: "mlx5_0", port: 1,
			attrs: map[string]string{"state": "1: DOWN", "phys_state": "3: Disabled"}, netdev: map[string]string{"ens1f0np0/flags": "0x1002"},
			id: "port-admin-down", sev: doctor.SeverityWarn, inFinding: "ens1f0np0 is administratively down", inFix: "ip link set dev ens1f0np0 up"},
		{name: "RoCE no carrier", host: "mlx5", dev: "mlx5_0", port: 1,
			attrs: map[string]string{"state": "1: DOWN", "phys_state": "3: Disabled"}, netdev: map[string]string{"ens1f0np0/carrier": "0"},
			id: "port-no-carrier", sev: doctor.SeverityWarn, inFinding: "ens1f0np0 is up but has no carrier", inFix: "ethtool ens1f0np0"},
		{name: "InfiniBand port disabled", host: "ib-ready", dev: "mlx4_0", port: 2,
			attrs: map[string]string{"state": "1: DOWN", "phys_state": "3: Disabled"},
			id:    "port-disabled", sev: doctor.SeverityWarn, inFinding: "administratively disabled", inFix: "ibportstate -C mlx4_0 -P 2"},
		{name: "no cable", host: "ib-ready", dev: "mlx4_0", port: 1,
			attrs: map[string]string{"state": "1: DOWN", "phys_state": "2: Polling"},
			id:    "port-link-down", sev: doctor.SeverityWarn, inFinding: "no physical link (uncabled, or the peer is down): state DOWN, physical state Polling", inFix: "ibstat mlx4_0 1"},
		{name: "Ethernet polling, netdev unknown", host: "mlx5", dev: "mlx5_0", port: 1,
			attrs: map[string]string{"state": "1: DOWN", "phys_state": "2: Polling"}, netdev: map[string]string{"ens1f0np0/flags": "garbage"},
			id: "port-link-down", sev: doctor.SeverityWarn, inFinding: "no physical link", inFix: "ethtool ens1f0np0"},
		{name: "IB INIT: no subnet manager", host: "ib-ready", dev: "mlx4_0", port: 1,
			attrs: map[string]string{"state": "2: INIT", "sm_lid": "0x0", "lid": "0x0"},
			id:    "port-no-sm", sev: doctor.SeverityFail, inFinding: "no subnet manager", inFix: "systemctl enable --now opensm"},
		{name: "IB ARMED", host: "ib-ready", dev: "mlx4_0", port: 2,
			attrs: map[string]string{"state": "3: ARMED"},
			id:    "port-no-sm", sev: doctor.SeverityFail, inFinding: "state ARMED", inFix: "opensm"},
		{name: "IB ACTIVE without SM LID", host: "mlx4", dev: "mlx4_0", port: 1,
			attrs: map[string]string{"sm_lid": "0x0000"},
			id:    "port-no-sm", sev: doctor.SeverityFail, inFinding: "sm_lid 0x0000", inFix: "opensm"},
		{name: "Omni-Path without fabric manager", host: "hfi1", dev: "hfi1_0", port: 1,
			attrs: map[string]string{"state": "2: INIT", "sm_lid": "0x0"},
			id:    "port-no-sm", sev: doctor.SeverityFail, inFinding: "no subnet manager", inFix: "systemctl enable --now opafm"},
		{name: "RoCE port DOWN with link", host: "mlx5", dev: "mlx5_1", port: 1,
			attrs: map[string]string{"state": "1: DOWN"},
			id:    "port-not-active", sev: doctor.SeverityWarn, inFinding: "is not ACTIVE: state DOWN, physical state LinkUp", inFix: "rdma link show mlx5_1/1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := hosttest.Copy(t, tc.host)
			if tc.host == "ib-ready" {
				root = readyIB(t)
			}
			setPort(t, root, tc.dev, tc.port, tc.attrs)
			for k, v := range tc.netdev {
				hosttest.Write(t, root, "sys/class/net/"+k, v+"\n")
			}
			fs := diagnose(t, root)
			subject := fmt.Sprintf("%s/%d", tc.dev, tc.port)
			mustFix(t, fs, tc.id, subject, tc.sev, tc.inFinding, tc.inFix)
			if f := find(fs, "port-active", subject); f != nil {
				t.Errorf("a faulty port is also reported active: %+v", f)
			}
		})
	}
}

func TestLastReconcileErrorIsQuotedNotRepeated(t *testing.T) {
	root := hosttest.Copy(t, "rxe-ready")
	setPort(t, root, "rxe0", 1, map[string]string{"state": "1: DOWN"})
	fs := diagnose(t, root, func(in *doctor.Input) {
		in.Errors = map[doctor.PortRef]string{{Device: "rxe0", Port: 1}: "roce: set rxe0 port 1: write: input/output error\nsecond line"}
	})
	f := mustFix(t, fs, "port-not-active", "rxe0/1", doctor.SeverityWarn, "(last pass: roce: set rxe0 port 1: write: input/output error)", "")
	if strings.Contains(f.Finding, "second line") {
		t.Errorf("finding is not one line: %q", f.Finding)
	}
	for _, f := range fs {
		if strings.Contains(f.ID, "reconcile") {
			t.Errorf("last-pass errors repeated as a finding of their own: %+v", f)
		}
	}
}

// The daemon passes the devices it observed; doctor reads the host only
// when it is given none.
func TestDevicesFromInputAreUsed(t *testing.T) {
	root := hosttest.Copy(t, "rxe-ready")
	devs, err := host.New(root).Devices()
	if err != nil {
		t.Fatal(err)
	}
	devs[0].Ports[0].State = "DOWN"
	fs := diagnose(t, root, func(in *doctor.Input) { in.Devices = devs })
	must(t, fs, "port-not-active", "rxe0/1")
	clean(t, diagnose(t, root))
}

func TestUnreadableDevices(t *testing.T) {
	root := hosttest.Copy(t, "rxe-ready")
	// A ports entry that is not a directory makes Host.Devices fail.
	remove(t, root, "sys/class/infiniband/rxe0")
	hosttest.Write(t, root, "sys/class/infiniband/rxe0/ports", "not a directory\n")
	fs := diagnose(t, root, bare{})
	mustFix(t, fs, "devices-unreadable", "host", doctor.SeverityFail, "rxe0", "journalctl -k")
}
