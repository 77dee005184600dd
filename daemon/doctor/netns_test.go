package doctor_test

import (
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/doctor"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
)

// fakeNetns stands in for netns.RDMANetlink (tested against the real
// kernel in the VM test).
type fakeNetns struct {
	mode  config.NetnsMode
	err   error
	calls int
}

func (f *fakeNetns) Mode() (config.NetnsMode, error) {
	f.calls++
	return f.mode, f.err
}

func (f *fakeNetns) SetMode(config.NetnsMode) error { return syscall.EBUSY }

func TestNetnsMode(t *testing.T) {
	t.Run("declared, persisted, running", func(t *testing.T) {
		mustFix(t, diagnose(t, readyIB(t)), "netns-mode", "host", doctor.SeverityOK,
			"RDMA netns mode exclusive as declared, at boot too (/etc/modprobe.d/rdmad-netns.conf:3)", "")
	})
	t.Run("persisted mode waits for a reboot", func(t *testing.T) {
		// The running kernel refuses the switch (EBUSY: other network
		// namespaces exist); the boot takes it.
		root := readyIB(t)
		hosttest.Write(t, root, "sys/module/ib_core/parameters/netns_mode", "Y\n")
		fs := diagnose(t, root, withNetns{&fakeNetns{mode: config.NetnsShared}}, afterPass{hosttest.NewKernel(root)})
		mustFix(t, fs, "netns-mode-differs", "host", doctor.SeverityWarn,
			"RDMA netns mode is shared, declared exclusive", "reboot, or delete the other network namespaces")
		mustFix(t, fs, "netns-mode-differs", "host", doctor.SeverityWarn, "EBUSY", "")
	})
	t.Run("modprobe.d file missing", func(t *testing.T) {
		root := readyIB(t)
		remove(t, root, "etc/modprobe.d/rdmad-netns.conf")
		mustFix(t, diagnose(t, root), "netns-boot-differs", "host", doctor.SeverityFail,
			`[netns] mode = "exclusive" is declared, but ib_core starts shared at the next boot (ib_core's default)`, "rdmactl reconcile")
	})
	t.Run("a later modprobe.d file overrides rdmad's", func(t *testing.T) {
		root := readyIB(t)
		hosttest.Write(t, root, "usr/lib/modprobe.d/zz-ib.conf", "options ib-core netns_mode=1 other=2\n")
		mustFix(t, diagnose(t, root), "netns-boot-differs", "host", doctor.SeverityFail,
			"starts shared at the next boot (/usr/lib/modprobe.d/zz-ib.conf:1)", "remove netns_mode from /usr/lib/modprobe.d/zz-ib.conf:1")
	})
	t.Run("kernel command line", func(t *testing.T) {
		root := readyIB(t)
		hosttest.Write(t, root, "proc/cmdline", "BOOT_IMAGE=/vmlinuz root=/dev/sda1 ib_core.netns_mode=1\n")
		mustFix(t, diagnose(t, root), "netns-boot-differs", "host", doctor.SeverityFail,
			"on the kernel command line", "remove ib_core.netns_mode= from the kernel command line")
	})
	t.Run("switched by hand, not declared", func(t *testing.T) {
		root := hosttest.Copy(t, "rxe-ready")
		hosttest.Write(t, root, "sys/module/ib_core/parameters/netns_mode", "N\n")
		mustFix(t, diagnose(t, root), "netns-not-persistent", "host", doctor.SeverityWarn,
			"RDMA netns mode is exclusive, but ib_core starts shared at the next boot", `rdmactl netns set exclusive --persist ([netns] mode = "exclusive" in /etc/rdma/rdmad.toml)`)
	})
	t.Run("runtime change without persist", func(t *testing.T) {
		root := hosttest.Copy(t, "rxe-ready")
		hosttest.Write(t, root, "sys/module/ib_core/parameters/netns_mode", "N\n")
		pol := policyOf(t, root)
		pol.Netns.Runtime = config.NetnsExclusive
		mustFix(t, diagnose(t, root, withPolicy(pol)), "netns-mode", "host", doctor.SeverityOK,
			"exclusive, set at runtime without persist (at boot: shared", "")
		hosttest.Write(t, root, "sys/module/ib_core/parameters/netns_mode", "Y\n")
		mustFix(t, diagnose(t, root, withPolicy(pol), withNetns{&fakeNetns{mode: config.NetnsShared}}, afterPass{hosttest.NewKernel(root)}),
			"netns-mode-differs", "host", doctor.SeverityFail,
			"RDMA netns mode is shared, declared exclusive at runtime", "delete the other network namespaces (ip netns list), then: rdmactl reconcile")
	})
	t.Run("reader asked only without sysfs, and only with ib_core", func(t *testing.T) {
		root := hosttest.Copy(t, "rxe-ready")
		remove(t, root, "sys/module/ib_core/parameters")
		reader := &fakeNetns{mode: config.NetnsExclusive}
		mustFix(t, diagnose(t, root, withNetns{reader}), "netns-not-persistent", "host", doctor.SeverityWarn, "is exclusive", "")
		if reader.calls != 1 {
			t.Errorf("reader called %d times", reader.calls)
		}
		reader.err, reader.mode = errors.New("netlink: no"), ""
		mustFix(t, diagnose(t, root, withNetns{reader}), "netns-mode", "host", doctor.SeverityOK, "mode unknown, not declared", "")
		// Without ib_core, RDMA netlink would load it: not asked.
		reader.calls = 0
		hosttest.Write(t, root, "proc/modules", "configfs 1 0 - Live 0x0\n")
		remove(t, root, "sys/module/ib_core")
		mustFix(t, diagnose(t, root, withNetns{reader}), "netns-mode", "host", doctor.SeverityOK, "unknown (ib_core not loaded)", "")
		if reader.calls != 0 {
			t.Errorf("reader asked without ib_core: %d calls", reader.calls)
		}
	})
}

func TestInitramfsOlderThanNetnsOption(t *testing.T) {
	root := readyIB(t)
	touch(t, root, "etc/modprobe.d/rdmad-netns.conf", time.Now().Add(time.Minute))
	mustFix(t, diagnose(t, root), "netns-initramfs-stale", "host", doctor.SeverityWarn,
		"ib_core loads from the initramfs (/etc/initramfs-tools/modules lists mlx4_ib)", "update-initramfs -u -k 6.1.0-28-amd64")

	// A module without ib_core in its dependencies keeps ib_core out.
	hosttest.Write(t, root, "etc/initramfs-tools/modules", "mlx4_core\n")
	if f := find(diagnose(t, root), "netns-initramfs-stale", "host"); f != nil {
		t.Errorf("ib_core is not in this initramfs: %+v", f)
	}

	// dracut (RHEL): add_drivers or the rdma dracut module.
	remove(t, root, "etc/initramfs-tools")
	hosttest.Write(t, root, "etc/dracut.conf.d/50-ib.conf", "# RDMA boot\nadd_drivers+=\" mlx4_ib \"\n")
	hosttest.Write(t, root, "boot/initramfs-6.1.0-28-amd64.img", "")
	touch(t, root, "boot/initramfs-6.1.0-28-amd64.img", time.Now().Add(-time.Hour))
	mustFix(t, diagnose(t, root), "netns-initramfs-stale", "host", doctor.SeverityWarn,
		"add_drivers at /etc/dracut.conf.d/50-ib.conf:2 adds mlx4_ib", "dracut -f --kver 6.1.0-28-amd64")
	hosttest.Write(t, root, "etc/dracut.conf.d/50-ib.conf", "add_dracutmodules+=\" rdma \"\n")
	mustFix(t, diagnose(t, root), "netns-initramfs-stale", "host", doctor.SeverityWarn, "adds the rdma module", "dracut -f")
	// Rebuilt: fine.
	touch(t, root, "boot/initramfs-6.1.0-28-amd64.img", time.Now().Add(time.Hour))
	clean(t, diagnose(t, root))
}

func TestConfigError(t *testing.T) {
	root := hosttest.Copy(t, "rxe-ready")
	fs := diagnose(t, root, func(in *doctor.Input) {
		in.ConfigError = errors.New("/etc/rdma/rdmad.d/50-x.toml:3: roce[0].mode: \"v3\" is not v1 or v2\nsecond problem")
	})
	mustFix(t, fs, "config-error", "host", doctor.SeverityFail,
		`the configuration does not load; rdmad applies the last one that loaded (nothing declared if none ever did): /etc/rdma/rdmad.d/50-x.toml:3: roce[0].mode: "v3" is not v1 or v2; second problem`,
		"rdmactl reload")
	if f := find(fs, "config-loaded", "host"); f != nil {
		t.Errorf("config-loaded beside config-error: %+v", f)
	}
}
