package doctor_test

import (
	"strings"
	"testing"

	"github.com/rdmad/rdmad/daemon/doctor"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
)

const rxeReadyModules = "configfs 16384 0 - Live 0x0\nib_core 16384 0 - Live 0x0\nrdma_cm 16384 0 - Live 0x0\nrdma_rxe 16384 0 - Live 0x0\n"

func TestVerbsModulesMissing(t *testing.T) {
	root := hosttest.Copy(t, "rxe-ready")
	hosttest.Write(t, root, "proc/modules", rxeReadyModules)
	// rdma.conf lists both and [modules] is on: rdmad should have loaded them.
	mustFix(t, diagnose(t, root), "verbs-modules-missing", "host", doctor.SeverityFail,
		"ib_uverbs, rdma_ucm not loaded", "modprobe -a ib_uverbs rdma_ucm (rdmad loads them from /etc/rdma/modules/rdma.conf: rdmactl status says why it did not)")

	// Not listed: say where to list them.
	hosttest.Write(t, root, "etc/rdma/modules/rdma.conf", "ib_uverbs\n# rdma_ucm\n")
	mustFix(t, diagnose(t, root), "verbs-modules-missing", "host", doctor.SeverityFail,
		"not loaded", "modprobe -a ib_uverbs rdma_ucm; for every boot: add rdma_ucm to /etc/rdma/modules/rdma.conf")

	// Module loading off.
	pol := parsePolicy(t, "[modules]\nenable = false\n")
	mustFix(t, diagnose(t, root, withPolicy(pol)), "verbs-modules-missing", "host", doctor.SeverityFail,
		"not loaded", "[modules] enable = true")

	// Built into the kernel counts as loaded (modules.builtin).
	hosttest.Write(t, root, "lib/modules/6.12.48+deb13-amd64/modules.builtin",
		"kernel/drivers/infiniband/core/ib_uverbs.ko\nkernel/drivers/infiniband/core/rdma_ucm.ko\n")
	must(t, diagnose(t, root), "verbs-ready", "host")
}

func TestUverbsDeviceNodes(t *testing.T) {
	root := hosttest.Copy(t, "rxe-ready")
	remove(t, root, "dev/infiniband/uverbs0")
	mustFix(t, diagnose(t, root), "uverbs-device-missing", "rxe0", doctor.SeverityFail,
		"/dev/infiniband/uverbs0 of rxe0 is missing", "udevadm trigger --action=add --subsystem-match=infiniband_verbs")

	root = hosttest.Copy(t, "rxe-ready")
	remove(t, root, "sys/class/infiniband_verbs/uverbs0")
	mustFix(t, diagnose(t, root), "uverbs-device-missing", "rxe0", doctor.SeverityFail,
		"rxe0 has no user-verbs device", "journalctl -k")

	root = hosttest.Copy(t, "rxe-ready")
	remove(t, root, "dev/infiniband/rdma_cm")
	fs := diagnose(t, root)
	mustFix(t, fs, "rdma-cm-device-missing", "host", doctor.SeverityFail, "/dev/infiniband/rdma_cm is missing", "udevadm trigger")
	if f := find(fs, "verbs-ready", "host"); f != nil {
		t.Errorf("verbs-ready with a missing node: %+v", f)
	}
}

func TestProviders(t *testing.T) {
	root := hosttest.Copy(t, "rxe-ready")
	remove(t, root, "etc/libibverbs.d/rxe.driver")
	mustFix(t, diagnose(t, root), "verbs-providers-missing", "host", doctor.SeverityFail,
		"no user-space provider configuration in /etc/libibverbs.d", "apt-get install ibverbs-providers")

	// The package tool follows the distribution.
	hosttest.Write(t, root, "etc/os-release", "NAME=\"Rocky Linux\"\nID=\"rocky\"\nID_LIKE=\"rhel centos fedora\"\n")
	f := mustFix(t, diagnose(t, root), "verbs-providers-missing", "host", doctor.SeverityFail, "", "dnf install libibverbs")
	if strings.Contains(f.Fix, "apt-get") {
		t.Errorf("RHEL host told to use apt-get: %q", f.Fix)
	}

	// Providers, but not the device's.
	hosttest.Write(t, root, "etc/libibverbs.d/mlx5.driver", "driver mlx5\n")
	mustFix(t, diagnose(t, root), "verbs-provider-missing", "rxe0", doctor.SeverityFail,
		`no libibverbs provider "rxe" for rxe0 (driver rdma_rxe)`, "dnf install libibverbs")
	ib := diagnose(t, readyIB(t))
	mustFix(t, ib, "verbs-providers", "host", doctor.SeverityOK, "mlx4 mlx5 rxe", "")
}

// A modules list is read with the loader's parser: an inline comment makes
// the line no module name, so the module counts as unlisted, and the line
// is reported as the loader treats it (skipped), with file and line.
func TestModuleListInlineCommentIsNotAComment(t *testing.T) {
	root := hosttest.Copy(t, "demo")
	hosttest.Write(t, root, "etc/rdma/modules/rdma.conf", "# user space\nib_uverbs # verbs\nrdma_ucm\n")
	hosttest.Write(t, root, "proc/modules", "ib_core 1 0 - Live 0x0\n")
	fs := diagnose(t, root)
	mustFix(t, fs, "modules-list-invalid", "host", doctor.SeverityWarn,
		`/etc/rdma/modules/rdma.conf:2: "ib_uverbs # verbs" is not a module name: rdmad skips this line`,
		`write "ib_uverbs" on line 2 and move the comment to a line of its own`)
	mustFix(t, fs, "verbs-modules-missing", "host", doctor.SeverityFail,
		"not loaded", "for every boot: add ib_uverbs to /etc/rdma/modules/rdma.conf")
}
