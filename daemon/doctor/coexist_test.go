package doctor_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rdmad/rdmad/daemon/bus"
	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/doctor"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
)

const mlx4Conf = "# rdma-core: <pci> <port1> <port2>\n0000:02:00.0 ib eth\n"

// RHEL's /etc/rdma/mlx4.conf and rdmad's [[vpi]] both set mlx4 port
// types: a warning naming both and who should own them; without [[vpi]]
// it is noted, with no live lines it is not mentioned.
func TestCoexistMLX4Conf(t *testing.T) {
	root := hosttest.Copy(t, "demo")
	hosttest.Write(t, root, "etc/rdma/mlx4.conf", mlx4Conf)
	vpi := parsePolicy(t, "[[vpi]]\ndevice = \"mlx4_0\"\nport = 2\ntype = \"eth\"\n")
	fs := diagnose(t, root, withPolicy(vpi))
	mustFix(t, fs, "coexist-mlx4-conf", "host", doctor.SeverityWarn, "/etc/rdma/mlx4.conf (1 lines", "comment out the lines of /etc/rdma/mlx4.conf")
	if f := must(t, fs, "coexist-mlx4-conf", "host"); !strings.Contains(f.Finding, "/etc/rdma/rdmad.toml:1") || !strings.Contains(f.Fix, "remove the [[vpi]] rules") {
		t.Errorf("finding %q fix %q: want the [[vpi]] rule's file:line and both ways to hand over", f.Finding, f.Fix)
	}

	fs = diagnose(t, root, withPolicy(parsePolicy(t, "")))
	if f := must(t, fs, "coexist-mlx4-conf", "host"); f.Severity != doctor.SeverityOK {
		t.Errorf("mlx4.conf without [[vpi]]: %s %q, want ok", f.Severity, f.Finding)
	}
	hosttest.Write(t, root, "etc/rdma/mlx4.conf", "# only comments\n\n")
	if f := find(diagnose(t, root, withPolicy(vpi)), "coexist-mlx4-conf", "host"); f != nil {
		t.Errorf("a commented-out mlx4.conf reported: %+v", f)
	}
}

// rdma-core's rdma-load-modules@ loads the lists of /etc/rdma/modules when
// its unit is installed and the instance of a list that exists is not
// masked. Beside rdmad's [modules] reading the same directory that is
// harmless (ok: loading a loaded module is a no-op); masked instances or
// [modules] enable = false end the finding.
func TestCoexistRDMALoadModules(t *testing.T) {
	root := hosttest.Copy(t, "demo")
	for _, f := range []string{"rdma", "roce", "infiniband"} {
		hosttest.Write(t, root, "etc/rdma/modules/"+f+".conf", "ib_uverbs\n")
	}
	for _, f := range []string{"iwarp", "opa"} { // no list: no instance counts
		_ = os.Remove(filepath.Join(root, "etc/rdma/modules/"+f+".conf"))
	}
	if f := find(diagnose(t, root, withPolicy(parsePolicy(t, ""))), "coexist-rdma-load-modules", "host"); f != nil {
		t.Fatalf("no rdma-core unit installed, yet: %+v", f)
	}
	hosttest.Write(t, root, "usr/lib/systemd/system/rdma-load-modules@.service", "[Unit]\nDescription=Load RDMA modules from /etc/rdma/modules/%I.conf\n")
	fs := diagnose(t, root, withPolicy(parsePolicy(t, "")))
	f := mustFix(t, fs, "coexist-rdma-load-modules", "host", doctor.SeverityOK,
		"rdma-core's rdma-load-modules@infiniband.service, rdma-load-modules@rdma.service, rdma-load-modules@roce.service (/usr/lib/systemd/system/rdma-load-modules@.service) both load the lists of /etc/rdma/modules", "")
	if !strings.Contains(f.Finding, "harmless") || !strings.Contains(f.Finding, "systemctl mask rdma-load-modules@infiniband.service rdma-load-modules@rdma.service rdma-load-modules@roce.service") {
		t.Errorf("the same lists: %q, want harmless and how to keep one loader", f.Finding)
	}

	// Masking two: the third is still named.
	for _, u := range []string{"rdma", "roce"} {
		if err := os.MkdirAll(filepath.Join(root, "etc/systemd/system"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("/dev/null", filepath.Join(root, "etc/systemd/system/rdma-load-modules@"+u+".service")); err != nil {
			t.Fatal(err)
		}
	}
	f = must(t, diagnose(t, root, withPolicy(parsePolicy(t, ""))), "coexist-rdma-load-modules", "host")
	if f.Severity != doctor.SeverityOK || !strings.Contains(f.Finding, "rdma-core's rdma-load-modules@infiniband.service (") {
		t.Errorf("with two instances masked: %s %q", f.Severity, f.Finding)
	}
	if err := os.Symlink("/dev/null", filepath.Join(root, "etc/systemd/system/rdma-load-modules@infiniband.service")); err != nil {
		t.Fatal(err)
	}
	if f := must(t, diagnose(t, root, withPolicy(parsePolicy(t, ""))), "coexist-rdma-load-modules", "host"); f.Severity != doctor.SeverityOK || !strings.Contains(f.Finding, "masked") {
		t.Errorf("every instance masked: %s %q", f.Severity, f.Finding)
	}
	if err := os.Remove(filepath.Join(root, "etc/systemd/system/rdma-load-modules@infiniband.service")); err != nil {
		t.Fatal(err)
	}
	if f := find(diagnose(t, root, withPolicy(parsePolicy(t, "[modules]\nenable = false\n"))), "coexist-rdma-load-modules", "host"); f != nil {
		t.Errorf("[modules] enable = false, yet: %+v", f)
	}
	// The template masked in /etc: systemd starts no instance of it, even
	// with /usr/lib's file installed.
	if err := os.Symlink("/dev/null", filepath.Join(root, "etc/systemd/system/rdma-load-modules@.service")); err != nil {
		t.Fatal(err)
	}
	if f := find(diagnose(t, root, withPolicy(parsePolicy(t, ""))), "coexist-rdma-load-modules", "host"); f != nil {
		t.Errorf("the template is masked in /etc, yet: %+v", f)
	}
}

// rdmad reading another directory than rdma-core's /etc/rdma/modules: the
// same lists (module by module, whatever the comments and order) are ok;
// a list that differs is a warning naming it and both directories.
func TestCoexistRDMALoadModulesOtherDirectory(t *testing.T) {
	root := hosttest.Copy(t, "demo")
	for _, f := range []string{"rdma", "roce", "infiniband", "iwarp", "opa"} {
		_ = os.Remove(filepath.Join(root, "etc/rdma/modules/"+f+".conf"))
	}
	hosttest.Write(t, root, "usr/lib/systemd/system/rdma-load-modules@.service", "[Unit]\n")
	hosttest.Write(t, root, "etc/rdma/modules/rdma.conf", "ib_uverbs\nrdma_ucm\n")
	hosttest.Write(t, root, "etc/rdma/modules/roce.conf", "ib_umad\n")
	hosttest.Write(t, root, "etc/rdma/site-modules/rdma.conf", "# the site's copy\nrdma_ucm\nib_uverbs\n")
	hosttest.Write(t, root, "etc/rdma/site-modules/roce.conf", "ib_umad\n")
	pol := withPolicy(parsePolicy(t, "[modules]\ndirectory = \"/etc/rdma/site-modules\"\n"))
	mustFix(t, diagnose(t, root, pol), "coexist-rdma-load-modules", "host", doctor.SeverityOK, "harmless", "")

	hosttest.Write(t, root, "etc/rdma/site-modules/roce.conf", "ib_umad\nnvme_rdma\n")
	mustFix(t, diagnose(t, root, pol), "coexist-rdma-load-modules", "host", doctor.SeverityWarn,
		"rdmad loads /etc/rdma/site-modules/*.conf ([modules] directory) and rdma-core's rdma-load-modules@rdma.service, rdma-load-modules@roce.service (/usr/lib/systemd/system/rdma-load-modules@.service, started by its udev rules) loads /etc/rdma/modules/*.conf; roce.conf differ",
		`set [modules] directory = "/etc/rdma/modules"`)

	// A list only rdma-core has is loaded by it alone: it differs too.
	hosttest.Write(t, root, "etc/rdma/site-modules/roce.conf", "ib_umad\n")
	hosttest.Write(t, root, "etc/rdma/modules/infiniband.conf", "ib_ipoib\n")
	mustFix(t, diagnose(t, root, pol), "coexist-rdma-load-modules", "host", doctor.SeverityWarn, "infiniband.conf differ", "")
}

// MLNX_OFED's openibd (test/coexist/mlnx-ofed: its unit, enabled, ONBOOT=yes)
// loads its own driver stack at boot: beside rdmad's loading that is a
// warning, whether rdma-core's loader is there or not; openibd not enabled,
// masked or with ONBOOT=no loads nothing.
func TestCoexistRDMALoadModulesOpenibd(t *testing.T) {
	root := withCoexist(t, "mlnx-ofed")
	pol := withPolicy(parsePolicy(t, ""))
	mustFix(t, diagnose(t, root, pol), "coexist-rdma-load-modules", "host", doctor.SeverityWarn,
		"RDMA modules are loaded by rdmad ([modules] enable) and by MLNX_OFED's openibd (/usr/lib/systemd/system/openibd.service, enabled by /etc/systemd/system/sysinit.target.wants/openibd.service, ONBOOT=yes in /etc/infiniband/openib.conf)",
		"set [modules] enable = false; or rdmad: systemctl disable openibd.service and set ONBOOT=no in /etc/infiniband/openib.conf")

	hosttest.Write(t, root, "usr/lib/systemd/system/rdma-load-modules@.service", "[Unit]\n")
	mustFix(t, diagnose(t, root, pol), "coexist-rdma-load-modules", "host", doctor.SeverityWarn,
		"rdmad ([modules] enable), rdma-core's rdma-load-modules@",
		"set [modules] enable = false and systemctl mask rdma-load-modules@")
	if f := find(diagnose(t, root, withPolicy(parsePolicy(t, "[modules]\nenable = false\n"))), "coexist-rdma-load-modules", "host"); f != nil {
		t.Errorf("[modules] enable = false, yet: %+v", f)
	}

	hosttest.Write(t, root, "etc/infiniband/openib.conf", "ONBOOT=no\n")
	mustFix(t, diagnose(t, root, pol), "coexist-rdma-load-modules", "host", doctor.SeverityOK, "harmless", "")
	hosttest.Write(t, root, "etc/infiniband/openib.conf", "ONBOOT=\"yes\"\n")
	mustFix(t, diagnose(t, root, pol), "coexist-rdma-load-modules", "host", doctor.SeverityWarn, "openibd", "")

	if err := os.Remove(filepath.Join(root, "etc/systemd/system/sysinit.target.wants/openibd.service")); err != nil {
		t.Fatal(err)
	}
	mustFix(t, diagnose(t, root, pol), "coexist-rdma-load-modules", "host", doctor.SeverityOK, "harmless", "")
	if err := os.Symlink("/usr/lib/systemd/system/openibd.service", filepath.Join(root, "etc/systemd/system/sysinit.target.wants/openibd.service")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/null", filepath.Join(root, "etc/systemd/system/openibd.service")); err != nil {
		t.Fatal(err)
	}
	mustFix(t, diagnose(t, root, pol), "coexist-rdma-load-modules", "host", doctor.SeverityOK, "harmless", "")
}

// openibd without its systemd unit is its SysV script, enabled by a start
// link of a runlevel (systemd's generator runs it then); a systemd wants
// link, when there is one, is the one named.
func TestCoexistRDMALoadModulesOpenibdSysV(t *testing.T) {
	root := withCoexist(t, "mlnx-ofed")
	pol := withPolicy(parsePolicy(t, ""))
	for _, f := range []string{"usr/lib/systemd/system/openibd.service", "etc/systemd/system/sysinit.target.wants/openibd.service"} {
		if err := os.Remove(filepath.Join(root, f)); err != nil {
			t.Fatal(err)
		}
	}
	if f := find(diagnose(t, root, pol), "coexist-rdma-load-modules", "host"); f != nil && f.Severity != doctor.SeverityOK {
		t.Errorf("the SysV script without a start link: %+v, want nothing loading modules but rdmad", f)
	}
	if err := os.MkdirAll(filepath.Join(root, "etc/rc3.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../init.d/openibd", filepath.Join(root, "etc/rc3.d/S05openibd")); err != nil {
		t.Fatal(err)
	}
	mustFix(t, diagnose(t, root, pol), "coexist-rdma-load-modules", "host", doctor.SeverityWarn,
		"MLNX_OFED's openibd (/etc/init.d/openibd, enabled by /etc/rc3.d/S05openibd, ONBOOT=yes in /etc/infiniband/openib.conf)", "")
	if err := os.Symlink("/etc/init.d/openibd", filepath.Join(root, "etc/systemd/system/sysinit.target.wants/openibd.service")); err != nil {
		t.Fatal(err)
	}
	mustFix(t, diagnose(t, root, pol), "coexist-rdma-load-modules", "host", doctor.SeverityWarn,
		"enabled by /etc/systemd/system/sysinit.target.wants/openibd.service,", "")
}

// withCoexist lays test/coexist/<name> (the files another manager leaves
// on a node, as its sources write them) over a copy of the demo host.
func withCoexist(t *testing.T, names ...string) string {
	t.Helper()
	root := hosttest.Copy(t, "demo")
	for _, n := range names {
		if err := hosttest.CopyTree(filepath.Join(hosttest.RepoRoot(), "test", "coexist", n), root); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// The NVIDIA Network Operator's driver container loads its own modules:
// rdmad's [modules] loading the lists too is a warning naming both ways to
// hand over; [modules] enable = false, or no list, is ok.
func TestCoexistNVIDIADriver(t *testing.T) {
	if f := find(diagnose(t, withCoexist(t), withPolicy(parsePolicy(t, ""))), "coexist-nvidia-driver", "host"); f != nil {
		t.Fatalf("no driver container, yet: %+v", f)
	}
	root := withCoexist(t, "nvidia-driver")
	f := mustFix(t, diagnose(t, root, withPolicy(parsePolicy(t, ""))), "coexist-nvidia-driver", "host", doctor.SeverityWarn,
		"(/run/mellanox/drivers/.driver-ready), and rdmad's [modules] loads rdma.conf, infiniband.conf, roce.conf, iwarp.conf, opa.conf of /etc/rdma/modules",
		"the driver container: set [modules] enable = false")
	if !strings.Contains(f.Fix, "remove ofedDriver from the NicClusterPolicy") {
		t.Errorf("fix %q: want the operator's way to hand over too", f.Fix)
	}
	if f := must(t, diagnose(t, root, withPolicy(parsePolicy(t, "[modules]\nenable = false\n"))), "coexist-nvidia-driver", "host"); f.Severity != doctor.SeverityOK {
		t.Errorf("[modules] enable = false: %s %q", f.Severity, f.Finding)
	}

	// Loading (not ready yet): its blacklist file tells.
	remove(t, root, "run/mellanox/drivers/.driver-ready")
	if f := find(diagnose(t, root, withPolicy(parsePolicy(t, ""))), "coexist-nvidia-driver", "host"); f != nil {
		t.Fatalf("driver container gone, yet: %+v", f)
	}
	hosttest.Write(t, root, "etc/modprobe.d/blacklist-ofed-modules.conf", "# blacklist ofed-related modules on host to prevent inbox or host OFED driver loading\n\nblacklist mlx5_core\nblacklist ib_core\n")
	mustFix(t, diagnose(t, root, withPolicy(parsePolicy(t, ""))), "coexist-nvidia-driver", "host", doctor.SeverityWarn,
		"(/etc/modprobe.d/blacklist-ofed-modules.conf, written while it loads them)", "[modules] enable = false")

	remove(t, root, "etc/rdma/modules")
	if f := must(t, diagnose(t, root, withPolicy(parsePolicy(t, ""))), "coexist-nvidia-driver", "host"); f.Severity != doctor.SeverityOK || !strings.Contains(f.Finding, "no list") {
		t.Errorf("no module list: %s %q", f.Severity, f.Finding)
	}
}

// sriov-network-operator writes its SriovNetworkPoolConfig's rdmaMode to
// modprobe.d: with rdmad's [netns] too, a warning that names the file and
// line of both and both ways to hand over.
func TestCoexistSRIOVOperator(t *testing.T) {
	root := withCoexist(t, "sriov-operator")
	netns := parsePolicy(t, "[netns]\nmode = \"shared\"\n")
	f := mustFix(t, diagnose(t, root, withPolicy(netns)), "coexist-sriov-operator", "host", doctor.SeverityWarn,
		`by sriov-network-operator (exclusive at /etc/modprobe.d/sriov_network_operator_modules_config.conf:2, its SriovNetworkPoolConfig rdmaMode, also put on the kernel command line) and by rdmad's [netns] mode = "shared" (/etc/rdma/rdmad.toml:2)`,
		"leave [netns] mode undeclared in rdmad (remove it from /etc/rdma/rdmad.toml:2)")
	if !strings.Contains(f.Fix, "or rdmad: remove rdmaMode from the SriovNetworkPoolConfig") {
		t.Errorf("fix %q: want the operator's way to hand over too", f.Fix)
	}
	// rdmad's declaration loses at boot to the operator's file, which sorts
	// later: the netns finding says whose file it is, not "edit it".
	mustFix(t, diagnose(t, root, withPolicy(netns)), "netns-boot-differs", "host", doctor.SeverityFail,
		"ib_core starts exclusive at the next boot (/etc/modprobe.d/sriov_network_operator_modules_config.conf:2)",
		"is sriov-network-operator's (its SriovNetworkPoolConfig rdmaMode; it rewrites the file): remove rdmaMode there, or leave [netns] mode undeclared in rdmad")
	// The same mode on both sides is still two owners.
	mustFix(t, diagnose(t, root, withPolicy(parsePolicy(t, "[netns]\nmode = \"exclusive\"\n"))), "coexist-sriov-operator", "host", doctor.SeverityWarn,
		`[netns] mode = "exclusive"`, "remove rdmaMode")

	// Where rdmad's mode comes from decides how to withdraw it: a mode set
	// at runtime lasts until rdmad restarts (and the file's returns then),
	// rdmad's own drop-in is changed with rdmactl, not edited.
	runtime := parsePolicy(t, "")
	runtime.Netns.Runtime = config.NetnsShared
	f = mustFix(t, diagnose(t, root, withPolicy(runtime)), "coexist-sriov-operator", "host", doctor.SeverityWarn,
		`[netns] mode = "shared" (set at runtime with rdmactl netns set)`,
		"leave [netns] mode undeclared in rdmad (the mode set at runtime lasts until rdmad restarts: rdmactl netns unset withdraws it, or meanwhile rdmactl netns set exclusive to agree)")
	if strings.Contains(f.Fix, "remove it from set at runtime") {
		t.Errorf("fix %q", f.Fix)
	}
	netns.Netns.Runtime = config.NetnsExclusive
	mustFix(t, diagnose(t, root, withPolicy(netns)), "coexist-sriov-operator", "host", doctor.SeverityWarn,
		`[netns] mode = "exclusive" (set at runtime with rdmactl netns set)`,
		"rdmactl netns set exclusive to agree; then remove it from /etc/rdma/rdmad.toml:2)")
	netns.Netns.Runtime = config.NetnsUnmanaged
	mustFix(t, diagnose(t, root, withPolicy(persistedNetns(t, "shared"))), "coexist-sriov-operator", "host", doctor.SeverityWarn,
		`[netns] mode = "shared" (/etc/rdma/rdmad.d/zz-rdmad-persist.toml:2, written by rdmactl netns set --persist)`,
		"(it comes from rdmad's own drop-in /etc/rdma/rdmad.d/zz-rdmad-persist.toml:2: rdmactl netns unset --persist withdraws it, or rdmactl netns set exclusive --persist makes them agree)")

	if f := must(t, diagnose(t, root, withPolicy(parsePolicy(t, ""))), "coexist-sriov-operator", "host"); f.Severity != doctor.SeverityOK || !strings.Contains(f.Finding, "sets RDMA netns mode exclusive (/etc/modprobe.d/sriov_network_operator_modules_config.conf:2") {
		t.Errorf("rdmad declares no [netns]: %s %q", f.Severity, f.Finding)
	}

	// rdmaMode unset: the operator removes its file; rdmad's [netns] owns the mode.
	remove(t, root, "etc/modprobe.d/sriov_network_operator_modules_config.conf")
	if f := must(t, diagnose(t, root, withPolicy(netns)), "coexist-sriov-operator", "host"); f.Severity != doctor.SeverityOK || !strings.Contains(f.Finding, "/etc/sriov-operator, /etc/systemd/system/sriov-config.service) and sets no RDMA netns mode") {
		t.Errorf("operator without rdmaMode: %s %q", f.Severity, f.Finding)
	}
	if f := find(diagnose(t, root, withPolicy(parsePolicy(t, ""))), "coexist-sriov-operator", "host"); f != nil {
		t.Errorf("nobody sets the mode, yet: %+v", f)
	}
	remove(t, root, "etc/sriov-operator")
	remove(t, root, "etc/systemd/system/sriov-config.service")
	if f := find(diagnose(t, root, withPolicy(netns)), "coexist-sriov-operator", "host"); f != nil {
		t.Errorf("no operator, yet: %+v", f)
	}
}

// persistedNetns is a policy whose [netns] mode comes from rdmad's own
// drop-in, as rdmactl netns set --persist writes it.
func persistedNetns(t *testing.T, mode string) *config.Policy {
	t.Helper()
	p, err := config.Parse("/etc/rdma/rdmad.d/"+config.PersistedName, []byte("[netns]\nmode = \""+mode+"\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// The RDMA shared device plugin (resources rdma/*, seen in kubelet's
// checkpoint) needs netns mode shared: rdmad declaring exclusive is a
// warning; what the checkpoint names is escaped.
func TestCoexistRDMASharedDevicePlugin(t *testing.T) {
	root := withCoexist(t, "rdma-shared-dev-plugin")
	f := mustFix(t, diagnose(t, root, withPolicy(parsePolicy(t, "[netns]\nmode = \"exclusive\"\n"))), "coexist-rdma-shared-dev-plugin", "host", doctor.SeverityWarn,
		`serves rdma/rdma_shared_device_a on this node (/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint)`,
		`remove [netns] from /etc/rdma/rdmad.toml:2 or set mode = "shared"`)
	if strings.Contains(f.Finding, "nvidia.com/hostdev") || !strings.Contains(f.Finding, `[netns] mode = "exclusive" (/etc/rdma/rdmad.toml:2)`) {
		t.Errorf("finding %q: want only the shared plugin's resources and rdmad's declaration", f.Finding)
	}
	// Set at runtime, or in rdmad's own drop-in: the fix is the rdmactl
	// command that makes it shared, not an edit.
	runtime := parsePolicy(t, "")
	runtime.Netns.Runtime = config.NetnsExclusive
	mustFix(t, diagnose(t, root, withPolicy(runtime)), "coexist-rdma-shared-dev-plugin", "host", doctor.SeverityWarn,
		`[netns] mode = "exclusive" (set at runtime with rdmactl netns set)`, "with the shared device plugin, rdmactl netns set shared (it was set at runtime);")
	runtime = parsePolicy(t, "[netns]\nmode = \"exclusive\"\n")
	runtime.Netns.Runtime = config.NetnsExclusive
	mustFix(t, diagnose(t, root, withPolicy(runtime)), "coexist-rdma-shared-dev-plugin", "host", doctor.SeverityWarn,
		`(set at runtime with rdmactl netns set)`, "rdmactl netns set shared --persist (the mode set at runtime, and /etc/rdma/rdmad.toml:2 for the next boot)")
	f = mustFix(t, diagnose(t, root, withPolicy(persistedNetns(t, "exclusive"))), "coexist-rdma-shared-dev-plugin", "host", doctor.SeverityWarn,
		`(/etc/rdma/rdmad.d/zz-rdmad-persist.toml:2, written by rdmactl netns set --persist)`,
		"rdmactl netns set shared --persist (rdmad's own drop-in /etc/rdma/rdmad.d/zz-rdmad-persist.toml:2 declares it)")
	if strings.Contains(f.Fix, "remove [netns] from") {
		t.Errorf("fix %q asks to edit rdmad's own drop-in", f.Fix)
	}
	for _, pol := range []string{"", "[netns]\nmode = \"shared\"\n"} {
		if f := must(t, diagnose(t, root, withPolicy(parsePolicy(t, pol))), "coexist-rdma-shared-dev-plugin", "host"); f.Severity != doctor.SeverityOK {
			t.Errorf("policy %q: %s %q", pol, f.Severity, f.Finding)
		}
	}

	cp := "var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"
	hosttest.Write(t, root, cp, `{"Data":{"PodDeviceEntries":null,"RegisteredDevices":{"nvidia.com/hostdev":["0000:3b:00.2"]}},"Checksum":1}`)
	if f := find(diagnose(t, root, withPolicy(parsePolicy(t, "[netns]\nmode = \"exclusive\"\n"))), "coexist-rdma-shared-dev-plugin", "host"); f != nil {
		t.Errorf("only the SR-IOV device plugin, yet: %+v", f)
	}
	hosttest.Write(t, root, cp, `{"Data":{"RegisteredDevices":{"rdma/a\u001b[2Jb":["0"]}}}`)
	f = must(t, diagnose(t, root, withPolicy(parsePolicy(t, "[netns]\nmode = \"exclusive\"\n"))), "coexist-rdma-shared-dev-plugin", "host")
	if p := bus.Findings([]doctor.Finding{f})[0]; strings.Contains(p.Finding, "\x1b") || !strings.Contains(p.Finding, `rdma/a\x1b[2Jb`) {
		t.Errorf("a control character in a resource name is published: %q", p.Finding)
	}
	hosttest.Write(t, root, cp, `{"Data":`)
	if f := find(diagnose(t, root, withPolicy(parsePolicy(t, "[netns]\nmode = \"exclusive\"\n"))), "coexist-rdma-shared-dev-plugin", "host"); f != nil {
		t.Errorf("a truncated checkpoint, yet: %+v", f)
	}
}

// lldpad running (its pid file and process, or its socket) is reported
// once for the host: a warning with [[qos]], ok without; only the
// configuration's groups that are netdevs of the host are named.
func TestCoexistLLDPad(t *testing.T) {
	root := withCoexist(t, "lldpad")
	f := must(t, diagnose(t, root, withPolicy(parsePolicy(t, ""))), "coexist-lldpad", "host")
	want := "lldpad runs (pid 4242 in /run/lldpad.pid, its socket @/com/intel/lldpad in /proc/net/unix, from /usr/lib/systemd/system/lldpad.socket) and its /var/lib/lldpad/lldpad.conf configures ens1f0np0; rdmad declares no [[qos]]"
	if f.Severity != doctor.SeverityOK || !strings.HasPrefix(f.Finding, want) {
		t.Errorf("without [[qos]]: %s %q\nwant ok %q", f.Severity, f.Finding, want)
	}
	qosPol := parsePolicy(t, "[[qos]]\ndevice = \"mlx5_0\"\ntrust = \"dscp\"\npfc = [3]\n")
	mustFix(t, diagnose(t, root, withPolicy(qosPol)), "coexist-lldpad", "host", doctor.SeverityWarn,
		"DCB has two agents on this host: lldpad runs (pid 4242", "systemctl disable --now lldpad.service lldpad.socket")
	if f := must(t, diagnose(t, root, withPolicy(qosPol)), "coexist-lldpad", "host"); !strings.Contains(f.Finding, "[[qos]] at /etc/rdma/rdmad.toml:1") || !strings.Contains(f.Fix, "remove the [[qos]] rules from /etc/rdma/rdmad.toml and") {
		t.Errorf("finding %q fix %q: want the rule's file:line and both ways to hand over", f.Finding, f.Fix)
	}
	// Rules in several files: every file is named, each once.
	dropIn, err := config.Parse("/etc/rdma/rdmad.d/50-qos.toml", []byte("[[qos]]\ndevice = \"mlx5_1\"\npfc = [3]\n[[qos]]\ndevice = \"mlx5_2\"\npfc = [3]\n"))
	if err != nil {
		t.Fatal(err)
	}
	twoFiles := parsePolicy(t, "[[qos]]\ndevice = \"mlx5_0\"\ntrust = \"dscp\"\npfc = [3]\n")
	twoFiles.QoS = append(twoFiles.QoS, dropIn.QoS...)
	mustFix(t, diagnose(t, root, withPolicy(twoFiles)), "coexist-lldpad", "host", doctor.SeverityWarn,
		"rdmad's [[qos]] in /etc/rdma/rdmad.toml, /etc/rdma/rdmad.d/50-qos.toml sets PFC",
		"remove the [[qos]] rules from /etc/rdma/rdmad.toml, /etc/rdma/rdmad.d/50-qos.toml and set PFC")

	// The configuration cannot be read (in the DaemonSet /var/lib/lldpad
	// is not mounted): not the same as one naming no interface.
	conf := filepath.Join(root, "var/lib/lldpad/lldpad.conf")
	saved, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	remove(t, root, "var/lib/lldpad/lldpad.conf")
	f = must(t, diagnose(t, root, withPolicy(qosPol)), "coexist-lldpad", "host")
	if !strings.Contains(f.Finding, "its /var/lib/lldpad/lldpad.conf cannot be read here") || strings.Contains(f.Finding, "configures no interface") {
		t.Errorf("unreadable lldpad.conf: %q", f.Finding)
	}
	hosttest.Write(t, root, "var/lib/lldpad/lldpad.conf", "lldp :\n{\n  eth9 :\n  {\n  };\n};\n")
	if f := must(t, diagnose(t, root, withPolicy(qosPol)), "coexist-lldpad", "host"); !strings.Contains(f.Finding, "configures no interface of this host") {
		t.Errorf("lldpad.conf naming no netdev of the host: %q", f.Finding)
	}
	hosttest.Write(t, root, "var/lib/lldpad/lldpad.conf", string(saved))

	// A stale pid file (another process has the pid): the socket still tells.
	hosttest.Write(t, root, "proc/4242/comm", "bash\n")
	f = must(t, diagnose(t, root, withPolicy(qosPol)), "coexist-lldpad", "host")
	if strings.Contains(f.Finding, "pid 4242") || !strings.Contains(f.Finding, "lldpad runs (its socket @/com/intel/lldpad") {
		t.Errorf("stale pid file: %q", f.Finding)
	}
	// Anyone can bind an abstract socket: without a unit of lldpad to back
	// it (none installed, or masked), it is no evidence.
	if err := os.MkdirAll(filepath.Join(root, "etc/systemd/system"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/null", filepath.Join(root, "etc/systemd/system/lldpad.socket")); err != nil {
		t.Fatal(err)
	}
	f = must(t, diagnose(t, root, withPolicy(qosPol)), "coexist-lldpad", "host")
	if !strings.Contains(f.Finding, "its socket @/com/intel/lldpad in /proc/net/unix, from /usr/lib/systemd/system/lldpad.service") {
		t.Errorf("lldpad.socket masked, lldpad.service installed: %q", f.Finding)
	}
	if err := os.Symlink("/dev/null", filepath.Join(root, "etc/systemd/system/lldpad.service")); err != nil {
		t.Fatal(err)
	}
	if f := find(diagnose(t, root, withPolicy(qosPol)), "coexist-lldpad", "host"); f != nil {
		t.Errorf("socket bound while lldpad's units are masked, yet: %+v", f)
	}
	remove(t, root, "etc/systemd/system/lldpad.socket")
	remove(t, root, "etc/systemd/system/lldpad.service")
	remove(t, root, "usr/lib/systemd/system/lldpad.socket")
	remove(t, root, "usr/lib/systemd/system/lldpad.service")
	if f := find(diagnose(t, root, withPolicy(qosPol)), "coexist-lldpad", "host"); f != nil {
		t.Errorf("socket bound without lldpad installed, yet: %+v", f)
	}
	// A live lldpad (root-owned pid file) still counts without a unit.
	hosttest.Write(t, root, "proc/4242/comm", "lldpad\n")
	f = must(t, diagnose(t, root, withPolicy(qosPol)), "coexist-lldpad", "host")
	if !strings.Contains(f.Finding, "lldpad runs (pid 4242 in /run/lldpad.pid) and") {
		t.Errorf("live lldpad without a unit: %q", f.Finding)
	}
	hosttest.Write(t, root, "proc/4242/comm", "bash\n")

	hosttest.Write(t, root, "proc/net/unix", "Num       RefCount Protocol Flags    Type St Inode Path\n0000000000000000: 00000002 00000000 00010000 0001 01 18120 /run/systemd/private\n")
	if f := find(diagnose(t, root, withPolicy(qosPol)), "coexist-lldpad", "host"); f != nil {
		t.Errorf("lldpad not running, yet: %+v", f)
	}
}
