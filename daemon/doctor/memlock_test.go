package doctor_test

import (
	"strings"
	"testing"

	"github.com/rdmad/rdmad/daemon/doctor"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
)

// rxe-ready declares [memlock] unlimited for group rdma and has the files
// rdmad renders; these break it the ways hosts break.
func TestDeclaredMemlockNotInForce(t *testing.T) {
	t.Run("limits.d file missing", func(t *testing.T) {
		root := hosttest.Copy(t, "rxe-ready")
		remove(t, root, "etc/security/limits.d/90-rdmad-memlock.conf")
		// Logins inherit from the login service: still unlimited.
		mustFix(t, diagnose(t, root), "memlock-login", "host", doctor.SeverityOK,
			"members of group rdma get memlock unlimited at login (DefaultLimitMEMLOCK=infinity at /etc/systemd/system.conf.d/90-rdmad-memlock.conf:4)", "")
		remove(t, root, "etc/systemd/system.conf.d/90-rdmad-memlock.conf")
		mustFix(t, diagnose(t, root), "memlock-login-low", "host", doctor.SeverityFail,
			"members of group rdma get memlock 8 MiB at login (the default of systemd and of Linux 5.16+), below the declared unlimited",
			"rdmactl status (rdmad writes /etc/security/limits.d/90-rdmad-memlock.conf)")
	})
	t.Run("a later file of the same rank wins", func(t *testing.T) {
		root := hosttest.Copy(t, "rxe-ready")
		hosttest.Write(t, root, "etc/security/limits.d/99-local.conf", "@rdma soft memlock 64G\n")
		mustFix(t, diagnose(t, root), "memlock-login-low", "host", doctor.SeverityFail,
			`get memlock 64 KiB at login (/etc/security/limits.d/99-local.conf:1); /etc/security/limits.d/99-local.conf:1: "64g" is read as 64 KiB`,
			"remove the memlock entry at /etc/security/limits.d/99-local.conf:1")
	})
	t.Run("an earlier file of the same rank loses", func(t *testing.T) {
		root := hosttest.Copy(t, "rxe-ready")
		hosttest.Write(t, root, "etc/security/limits.d/10-local.conf", "@rdma soft memlock 1024\n")
		mustFix(t, diagnose(t, root), "memlock-login", "host", doctor.SeverityOK, "unlimited", "")
	})
	t.Run("a user entry beats the group", func(t *testing.T) {
		root := hosttest.Copy(t, "rxe-ready")
		hosttest.Write(t, root, "etc/security/limits.conf", "alice - memlock 65536\n* hard memlock 1\n")
		mustFix(t, diagnose(t, root), "memlock-login-low", "host", doctor.SeverityFail,
			"user alice (in group rdma) gets memlock 64 MiB at login (/etc/security/limits.conf:1), below unlimited",
			"/etc/security/limits.conf:1")
	})
	t.Run("another group of a member", func(t *testing.T) {
		root := hosttest.Copy(t, "rxe-ready")
		hosttest.Write(t, root, "etc/group", "root:x:0:\nrdma:x:996:alice\nstudents:x:1001:alice\n")
		hosttest.Write(t, root, "etc/security/limits.d/95-students.conf", "@students soft memlock 1024\n")
		mustFix(t, diagnose(t, root), "memlock-login-low", "host", doctor.SeverityFail,
			"user alice (in group rdma) gets memlock 1 MiB", "95-students.conf:1")
	})
	t.Run("a group entry with - turns limits off", func(t *testing.T) {
		root := hosttest.Copy(t, "rxe-ready")
		hosttest.Write(t, root, "etc/security/limits.conf", "@rdma -\n")
		remove(t, root, "etc/systemd/system.conf.d/90-rdmad-memlock.conf")
		mustFix(t, diagnose(t, root), "memlock-login-low", "host", doctor.SeverityFail,
			`/etc/security/limits.conf:1 ("@rdma -") turns pam_limits off for them`, "")
	})
	t.Run("group missing", func(t *testing.T) {
		root := hosttest.Copy(t, "rxe-ready")
		hosttest.Write(t, root, "etc/group", "root:x:0:\nusers:x:100:\n")
		mustFix(t, diagnose(t, root), "memlock-group-missing", "host", doctor.SeverityFail,
			"group rdma of [memlock] is not in /etc/group", "groupadd --system rdma")
	})
	t.Run("systemd drop-in missing", func(t *testing.T) {
		root := hosttest.Copy(t, "rxe-ready")
		remove(t, root, "etc/systemd/system.conf.d/90-rdmad-memlock.conf")
		mustFix(t, diagnose(t, root), "memlock-services-low", "host", doctor.SeverityFail,
			"systemd services get memlock 8 MiB", "rdmad writes /etc/systemd/system.conf.d/90-rdmad-memlock.conf")
	})
	t.Run("a later systemd drop-in overrides rdmad's", func(t *testing.T) {
		root := hosttest.Copy(t, "rxe-ready")
		hosttest.Write(t, root, "usr/lib/systemd/system.conf.d/99-vendor.conf", "[Manager]\nDefaultLimitMEMLOCK=64M:1G\n")
		mustFix(t, diagnose(t, root), "memlock-services-low", "host", doctor.SeverityFail,
			"systemd services get memlock 64 MiB (DefaultLimitMEMLOCK=64M:1G at /usr/lib/systemd/system.conf.d/99-vendor.conf:2)",
			"remove DefaultLimitMEMLOCK= from the file named")
		// The same name in /etc hides the vendor file, as systemd does.
		hosttest.Write(t, root, "etc/systemd/system.conf.d/99-vendor.conf", "[Manager]\n")
		mustFix(t, diagnose(t, root), "memlock-services", "host", doctor.SeverityOK, "unlimited", "")
	})
	// rdmad's own files hold an old value (the declaration changed while
	// rdmad was stopped): the fix is rdmad's next pass, not removing them.
	t.Run("rdmad's own limits.d file is stale", func(t *testing.T) {
		root := hosttest.Copy(t, "rxe-ready")
		hosttest.Write(t, root, "etc/security/limits.d/90-rdmad-memlock.conf", "@rdma soft memlock 1024\n@rdma hard memlock 1024\n")
		mustFix(t, diagnose(t, root), "memlock-login-low", "host", doctor.SeverityFail,
			"members of group rdma get memlock 1 MiB at login (/etc/security/limits.d/90-rdmad-memlock.conf:1)",
			"rdmactl status (rdmad writes /etc/security/limits.d/90-rdmad-memlock.conf)")
	})
	t.Run("rdmad's own systemd drop-in is stale", func(t *testing.T) {
		root := hosttest.Copy(t, "rxe-ready")
		hosttest.Write(t, root, "etc/systemd/system.conf.d/90-rdmad-memlock.conf", "[Manager]\nDefaultLimitMEMLOCK=64M\n")
		mustFix(t, diagnose(t, root), "memlock-services-low", "host", doctor.SeverityFail,
			"systemd services get memlock 64 MiB (DefaultLimitMEMLOCK=64M at /etc/systemd/system.conf.d/90-rdmad-memlock.conf:2)",
			"rdmactl status (rdmad writes /etc/systemd/system.conf.d/90-rdmad-memlock.conf)")
	})
	t.Run("services = false", func(t *testing.T) {
		root := hosttest.Copy(t, "rxe-ready")
		remove(t, root, "etc/systemd/system.conf.d/90-rdmad-memlock.conf")
		pol := parsePolicy(t, "[memlock]\nservices = false\n")
		mustFix(t, diagnose(t, root, withPolicy(pol)), "memlock-services", "host", doctor.SeverityOK, "services = false leaves them alone", "")
	})
}

func TestUndeclaredMemlock(t *testing.T) {
	// The default is what nobody chose: a warning with the config key.
	fs := diagnose(t, hosttest.Copy(t, "rxe"))
	mustFix(t, fs, "memlock-login-low", "host", doctor.SeverityWarn, "RDMA users get memlock 8 MiB at login", `declare [memlock] in /etc/rdma/rdmad.toml`)
	mustFix(t, fs, "memlock-services-low", "host", doctor.SeverityWarn, "systemd services get memlock 8 MiB", `soft = "unlimited"`)

	// A value an administrator wrote is respected (ib-ready: RHEL's rdma.conf).
	root := readyIB(t)
	mustFix(t, diagnose(t, root), "memlock-login", "host", doctor.SeverityOK, "members of group rdma get memlock unlimited at login (/etc/security/limits.d/rdma.conf:5)", "")
	hosttest.Write(t, root, "etc/systemd/system.conf.d/50-memlock.conf", "[Manager]\nDefaultLimitMEMLOCK=64G\n")
	mustFix(t, diagnose(t, root), "memlock-services", "host", doctor.SeverityOK, "64 GiB (DefaultLimitMEMLOCK=64G at /etc/systemd/system.conf.d/50-memlock.conf:2)", "")
	// An empty assignment returns to the default.
	hosttest.Write(t, root, "etc/systemd/system.conf.d/60-reset.conf", "[Manager]\nDefaultLimitMEMLOCK=\n")
	mustFix(t, diagnose(t, root), "memlock-services-low", "host", doctor.SeverityWarn, "8 MiB", "[memlock]")
	// An assignment systemd cannot read is ignored, as systemd ignores it.
	hosttest.Write(t, root, "etc/systemd/system.conf.d/70-bad.conf", "[Manager]\nDefaultLimitMEMLOCK=lots\n")
	mustFix(t, diagnose(t, root), "memlock-services-low", "host", doctor.SeverityWarn, "8 MiB (the default", "[memlock]")
}

func TestBuiltinMemlockDependsOnKernelAndSystemd(t *testing.T) {
	root := hosttest.Copy(t, "rxe")
	hosttest.Write(t, root, "proc/sys/kernel/osrelease", "5.10.0-30-amd64\n")
	mustFix(t, diagnose(t, root), "memlock-services-low", "host", doctor.SeverityWarn, "64 KiB (the kernel's default before Linux 5.16)", "")
	// systemd before 253 (Debian 11's 247) keeps the kernel's.
	hosttest.Write(t, root, "usr/lib/x86_64-linux-gnu/systemd/libsystemd-shared-247.so", "")
	mustFix(t, diagnose(t, root), "memlock-services-low", "host", doctor.SeverityWarn, "64 KiB (the kernel's default before Linux 5.16)", "")
	remove(t, root, "usr/lib/x86_64-linux-gnu/systemd/libsystemd-shared-247.so")
	// systemd 253 raises it to 8 MiB on any kernel.
	hosttest.Write(t, root, "usr/lib/x86_64-linux-gnu/systemd/libsystemd-shared-254.5-1.so", "")
	mustFix(t, diagnose(t, root), "memlock-services-low", "host", doctor.SeverityWarn, "8 MiB", "")
	hosttest.Write(t, root, "proc/sys/kernel/osrelease", "5.16.0\n")
	remove(t, root, "usr/lib/x86_64-linux-gnu")
	mustFix(t, diagnose(t, root), "memlock-services-low", "host", doctor.SeverityWarn, "8 MiB", "")
}

func TestContainerRuntimeMemlock(t *testing.T) {
	const unit = "[Unit]\nDescription=containerd\n[Service]\nExecStart=/usr/bin/containerd\nLimitNOFILE=infinity\n"
	root := hosttest.Copy(t, "rxe-ready")
	hosttest.Write(t, root, "usr/lib/systemd/system/containerd.service", unit)
	// Declared unlimited with services = true: containerd inherits it.
	mustFix(t, diagnose(t, root), "memlock-container", "host", doctor.SeverityOK,
		"containers of containerd get memlock unlimited (DefaultLimitMEMLOCK=infinity", "")

	// Its own LimitMEMLOCK caps its containers.
	hosttest.Write(t, root, "run/systemd/system/containerd.service.d/limits.conf", "[Service]\nLimitMEMLOCK=8M\n")
	mustFix(t, diagnose(t, root), "memlock-container-low", "host", doctor.SeverityWarn,
		"containers of containerd get memlock 8 MiB (LimitMEMLOCK=8M at /run/systemd/system/containerd.service.d/limits.conf:2)",
		"drop-in /etc/systemd/system/containerd.service.d/memlock.conf with [Service] LimitMEMLOCK=infinity, then systemctl daemon-reload; systemctl restart containerd")
	remove(t, root, "run/systemd/system/containerd.service.d")

	// Undeclared host: the default caps containers too.
	bare := hosttest.Copy(t, "rxe")
	hosttest.Write(t, bare, "lib/systemd/system/docker.service", "[Service]\nExecStart=/usr/bin/dockerd\n")
	mustFix(t, diagnose(t, bare), "memlock-container-low", "host", doctor.SeverityWarn,
		"containers of docker get memlock 8 MiB", "LimitMEMLOCK=infinity")
	// docker's own default-ulimits decide for its containers.
	hosttest.Write(t, bare, "etc/docker/daemon.json", `{"default-ulimits": {"memlock": {"Name": "memlock", "Soft": -1, "Hard": -1}}}`)
	mustFix(t, diagnose(t, bare), "memlock-container", "host", doctor.SeverityOK,
		"containers of docker get memlock unlimited (default-ulimits in /etc/docker/daemon.json)", "")
	// A masked runtime does not run.
	remove(t, bare, "lib/systemd/system/docker.service")
	if err := symlink("/dev/null", bare, "etc/systemd/system/docker.service"); err != nil {
		t.Fatal(err)
	}
	hosttest.Write(t, bare, "lib/systemd/system/docker.service", "[Service]\nExecStart=/usr/bin/dockerd\n")
	for _, f := range diagnose(t, bare) {
		if strings.HasPrefix(f.ID, "memlock-container") {
			t.Errorf("masked docker.service judged: %+v", f)
		}
	}
}
