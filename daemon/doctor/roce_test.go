package doctor_test

import (
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/rdmad/rdmad/daemon/doctor"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
)

func TestDeclaredRoCEAppliedIsOK(t *testing.T) {
	root := hosttest.Copy(t, "mlx5")
	hosttest.Write(t, root, "sys/kernel/config/rdma_cm/mlx5_0/ports/1/default_roce_tos", "106\n")
	pol := parsePolicy(t, "[[roce]]\ndevice = \"mlx5_0\"\nmode = \"v2\"\ntos = 106\n")
	fs := diagnose(t, root, withPolicy(pol))
	mustFix(t, fs, "policy-applied", "mlx5_0/1", doctor.SeverityOK, "mlx5_0/1: as declared: RoCE mode RoCE v2 (/etc/rdma/rdmad.toml:1), RoCE TOS 106 (/etc/rdma/rdmad.toml:1)", "")
	if f := find(fs, "policy-applied", "mlx5_1/1"); f != nil {
		t.Errorf("a port without declaration is reported: %+v", f)
	}
}

func TestDeclaredRoCEModeTheKernelRefuses(t *testing.T) {
	// rxe supports only RoCE v2 (its GIDs are all v2): the fix is the
	// declaration, at its file and line.
	root := hosttest.Copy(t, "rxe-ready")
	k := hosttest.NewKernel(root)
	k.Refuse("rdma_cm/rxe0/ports/1/default_roce_mode", "IB/RoCE v1", syscall.EIO)
	pol := parsePolicy(t, "[[roce]]\ndevice = \"rxe*\"\nmode = \"v1\"\n")
	fs := diagnose(t, root, withPolicy(pol), afterPass{k})
	mustFix(t, fs, "roce-mode-differs", "rxe0/1", doctor.SeverityFail,
		`rxe0/1: RoCE mode is RoCE v2, declared IB/RoCE v1 at /etc/rdma/rdmad.toml:1: set rxe0 port 1 default_roce_mode to "IB/RoCE v1": the port does not support this value`,
		"rxe0/1 supports only RoCE v2: change mode at /etc/rdma/rdmad.toml:1")
}

func TestDeclaredTOSNotInKernel(t *testing.T) {
	root := hosttest.Copy(t, "mlx5")
	pol := parsePolicy(t, "[[roce]]\ndevice = \"*\"\ntos = 106\n")
	fs := diagnose(t, root, withPolicy(pol))
	for _, p := range []string{"mlx5_0/1", "mlx5_1/1"} {
		mustFix(t, fs, "roce-tos-differs", p, doctor.SeverityFail, "RoCE TOS is 0, declared 106 at /etc/rdma/rdmad.toml:1", "rdmactl reconcile")
	}
	// No rdma_cm directory for the device yet: rdmad creates it, the
	// values are unknown until then.
	remove(t, root, "sys/kernel/config/rdma_cm/mlx5_1")
	mustFix(t, diagnose(t, root, withPolicy(pol)), "roce-tos-differs", "mlx5_1/1", doctor.SeverityFail, "RoCE TOS is unknown", "rdmactl reconcile")
}

func TestConfigfsMissing(t *testing.T) {
	pol := parsePolicy(t, "[[roce]]\ndevice = \"*\"\nmode = \"v2\"\n")
	root := hosttest.Copy(t, "mlx5")
	remove(t, root, "sys/kernel/config")
	fs := diagnose(t, root, withPolicy(pol))
	mustFix(t, fs, "roce-configfs-missing", "host", doctor.SeverityFail,
		"RoCE policy declared for mlx5_0/1 mlx5_1/1 cannot apply: configfs is not mounted", "mount -t configfs none /sys/kernel/config")
	// Each declared setting says it does not hold, and why.
	mustFix(t, fs, "roce-mode-differs", "mlx5_0/1", doctor.SeverityFail, "RoCE mode is unknown, declared RoCE v2 at /etc/rdma/rdmad.toml:1: configfs rdma_cm has no directory", "")

	// Mounted, but rdma_cm has not registered its directory.
	hosttest.Write(t, root, "proc/mounts", "sysfs /sys sysfs rw 0 0\nconfigfs /sys/kernel/config configfs rw,nosuid,nodev,noexec,relatime 0 0\n")
	hosttest.Write(t, root, "sys/kernel/config/target/version", "x\n")
	mustFix(t, diagnose(t, root, withPolicy(pol)), "roce-configfs-missing", "host", doctor.SeverityFail,
		"no rdma_cm directory", "modprobe rdma_cm")

	// Nothing declared: the kernel defaults need no configfs.
	if f := find(diagnose(t, root, withPolicy(parsePolicy(t, ""))), "roce-configfs-missing", "host"); f != nil {
		t.Errorf("configfs reported without RoCE policy: %+v", f)
	}
}

func TestMixedRoCEModes(t *testing.T) {
	root := hosttest.Copy(t, "mlx5")
	hosttest.Write(t, root, "sys/kernel/config/rdma_cm/mlx5_1/ports/1/default_roce_mode", "IB/RoCE v1\n")
	mustFix(t, diagnose(t, root), "roce-modes-mixed", "host", doctor.SeverityWarn,
		"IB/RoCE v1 on mlx5_1/1, RoCE v2 on mlx5_0/1; an RDMA-CM client in RoCE v2 cannot connect to a server in RoCE v1",
		"rdmactl roce set mlx5_0/1 --mode v1 --persist")
	if f := must(t, diagnose(t, root), "roce-modes-mixed", "host"); strings.Contains(f.Fix, "mlx5_1/1") {
		t.Errorf("fix names the port already in v1: %q", f.Fix)
	}

	// A mix every port of which is declared is the operator's choice.
	pol := parsePolicy(t, "[[roce]]\ndevice = \"mlx5_0\"\nmode = \"v2\"\n[[roce]]\ndevice = \"mlx5_1\"\nmode = \"v1\"\n")
	if f := find(diagnose(t, root, withPolicy(pol)), "roce-modes-mixed", "host"); f != nil {
		t.Errorf("declared mix warned about: %+v", f)
	}

	// v2 ports that cannot do v1 (rxe): nothing to change on this host.
	demo := hosttest.Copy(t, "demo")
	for _, d := range []string{"mlx5_0", "mlx5_1"} {
		hosttest.Write(t, demo, "sys/kernel/config/rdma_cm/"+d+"/ports/1/default_roce_mode", "IB/RoCE v1\n")
	}
	mustFix(t, diagnose(t, demo), "roce-modes-mixed", "host", doctor.SeverityWarn,
		"RoCE v2 on rxe0/1", "no port can change")
}

// gidTable writes a GID table of entries entries for port 1 of dev: the
// given ones (index: type, GID) on netdev, the rest empty, as the kernel
// shows an unused entry.
func gidTable(t *testing.T, root, dev, netdev string, entries int, gids map[int][2]string) {
	t.Helper()
	port := "sys/class/infiniband/" + dev + "/ports/1/"
	for i := range entries {
		typ, ndev, gid := "", "", "0000:0000:0000:0000:0000:0000:0000:0000"
		if g, ok := gids[i]; ok {
			typ, ndev, gid = g[0], netdev, g[1]
		}
		n := strconv.Itoa(i)
		hosttest.Write(t, root, port+"gid_attrs/types/"+n, typ+"\n")
		hosttest.Write(t, root, port+"gid_attrs/ndevs/"+n, ndev+"\n")
		hosttest.Write(t, root, port+"gids/"+n, gid+"\n")
	}
}

const (
	linkLocalGID = "fe80:0000:0000:0000:ba59:9fff:fed4:2e70"
	ipv4GID      = "0000:0000:0000:0000:0000:ffff:c0a8:0105" // 192.168.1.5
	ipv6GID      = "2001:0db8:0000:0000:0000:0000:0000:0005"
)

// The GID table is read in index order, as the kernel fills it, not in
// the directory's name order: past ten entries the two differ ("10" comes
// before "2"), and the scan stops after eight empty entries in a row. In
// a table of 24 with the link-local GIDs at 0-1, an IPv4 address's at
// 2-3, a hole at 4-5 (an address removed: the kernel frees its entries)
// and an IPv6 address's at 6-7, name order would meet 10-17, empty, and
// stop before 2; the hole does not stop the scan.
func TestRoCEGIDsInIndexOrder(t *testing.T) {
	root := hosttest.Copy(t, "mlx5")
	const entries = 24
	gidTable(t, root, "mlx5_0", "ens1f0np0", entries, map[int][2]string{
		0: {"IB/RoCE v1", linkLocalGID}, 1: {"RoCE v2", linkLocalGID},
		2: {"IB/RoCE v1", ipv4GID}, 3: {"RoCE v2", ipv4GID},
		6: {"IB/RoCE v1", ipv6GID}, 7: {"RoCE v2", ipv6GID},
	})
	fs := diagnose(t, root, func(in *doctor.Input) {
		in.Addrs = addrs{"ens1f0np0": {"192.168.1.5", "2001:db8::5"}}
	})
	if f := find(fs, "roce-gid-missing", "mlx5_0/1"); f != nil {
		t.Fatalf("the RoCE v2 GIDs at indexes 3 and 7 of a table of %d not found: %s", entries, f.Finding)
	}
	mustFix(t, fs, "roce-gids", "mlx5_0/1", doctor.SeverityOK, "mlx5_0/1: a RoCE v2 GID for each of the 2 addresses of ens1f0np0", "")

	// A RoCE v1 GID of an address is not its RoCE v2 GID, though both
	// are the same bytes: an address with only the v1 one is missing.
	gidTable(t, root, "mlx5_0", "ens1f0np0", entries, map[int][2]string{
		0: {"IB/RoCE v1", linkLocalGID}, 1: {"RoCE v2", linkLocalGID},
		2: {"IB/RoCE v1", ipv4GID}, 3: {"RoCE v2", ipv4GID},
		4: {"IB/RoCE v1", ipv6GID},
	})
	mustFix(t, diagnose(t, root, func(in *doctor.Input) {
		in.Addrs = addrs{"ens1f0np0": {"192.168.1.5", "2001:db8::5"}}
	}), "roce-gid-missing", "mlx5_0/1", doctor.SeverityWarn, "mlx5_0/1: no RoCE v2 GID for 2001:db8::5 of ens1f0np0", "")
}
