package pkgtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/daemon/memlock"
)

// debianRoot extracts the e2e guest's Debian rootfs (test/e2e/image.sh
// builds it with mmdebstrap, or finds it cached) without kernel modules and
// firmware: a real Debian root with dpkg, systemd, dbus and udev installed.
func debianRoot(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (chroot, dpkg in a foreign root)")
	}
	requireTool(t, "unshare")
	out, err := exec.Command("bash", filepath.Join(repo, "test/e2e/image.sh")).Output()
	if err != nil {
		t.Fatalf("test/e2e/image.sh: %v", err)
	}
	tarball := strings.TrimSpace(string(out))
	root := filepath.Join(t.TempDir(), "root")
	mustf(t, os.Mkdir(root, 0o755), "mkdir root")
	run(t, "tar", "-C", root, "--numeric-owner", "-xpf", tarball,
		"--exclude=./usr/lib/modules", "--exclude=./boot", "--exclude=./usr/lib/firmware")
	return root
}

// inRoot runs cmd (a host command line) in a private mount namespace in
// which root has /proc and /dev mounted, as image builders (mmdebstrap,
// debootstrap) provide them; the mounts vanish with the namespace. No
// systemd runs in the root: the maintainer scripts take their chroot path.
func inRoot(root string, cmd ...string) (string, error) {
	script := `mount -t proc proc "$1/proc" && mount --rbind /dev "$1/dev" && shift && exec "$@"`
	return runErr("unshare", append([]string{"--mount", "--fork", "--propagation", "private", "--", "sh", "-c", script, "sh", root}, cmd...)...)
}

// chroot runs a shell script inside root; a failure is fatal.
func chroot(t *testing.T, root, script string) string {
	t.Helper()
	out, err := inRoot(root, "chroot", root, "/bin/sh", "-c", script)
	if err != nil {
		t.Fatalf("in the Debian root: %s: %v\n%s", script, err, out)
	}
	return out
}

func rootHas(root, p string) bool { return fileExists(filepath.Join(root, p)) }

func readRoot(t *testing.T, root, p string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, p))
	mustf(t, err, "read "+p)
	return string(b)
}

func appendRoot(t *testing.T, root, p, text string) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(root, p), os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o644)
	mustf(t, err, p)
	_, err = f.WriteString(text)
	mustf(t, err, p)
	mustf(t, f.Close(), p)
}

const (
	wantsLink   = "etc/systemd/system/multi-user.target.wants/rdmad.service"
	aliasLink   = "etc/systemd/system/dbus-org.rdmad1.service"
	conffile    = "etc/rdma/rdmad.toml"
	persisted   = "etc/rdma/rdmad.d/zz-rdmad-persist.toml"
	operators   = "etc/rdma/rdmad.d/50-operator.toml"
	adminEdit   = "\n# edited by the administrator\n"
	handWritten = "etc/modprobe.d/rdmad-netns.conf"
)

// TestPackagesInDebianRoot installs, upgrades and removes the real packages
// with dpkg and rpm in a Debian root, where the maintainer scripts run for
// real (without a running systemd, as in an image build).
func TestPackagesInDebianRoot(t *testing.T) {
	root := debianRoot(t)
	p1, p2 := build(t, version1), build(t, version2)
	for name, src := range map[string]string{"v1.deb": p1.deb, "v2.deb": p2.deb, "v1.rpm": p1.rpm, "v2.rpm": p2.rpm} {
		run(t, "cp", src, filepath.Join(root, "tmp", name))
	}
	t.Run("deb", func(t *testing.T) { debLifecycle(t, root) })
	if t.Failed() {
		return
	}
	t.Run("rpm", func(t *testing.T) { rpmLifecycle(t, root) })
}

func debStatus(t *testing.T, root string) string {
	t.Helper()
	out, _ := inRoot(root, "chroot", root, "dpkg-query", "-W", "-f", "${Status} ${Version}", "rdmad")
	return strings.TrimSpace(out)
}

func debLifecycle(t *testing.T, root string) {
	chroot(t, root, "dpkg -i /tmp/v1.deb")
	if got := debStatus(t, root); got != "install ok installed "+version1 {
		t.Fatalf("after dpkg -i: status %q", got)
	}
	// postinst: sysusers, tmpfiles, enabled (deb-systemd-helper), as dh does.
	if out := chroot(t, root, "getent group rdma || echo missing"); strings.Contains(out, "missing") {
		t.Errorf("postinst did not create the rdma group")
	}
	for _, dir := range []string{"etc/rdma/rdmad.d", "etc/security/limits.d", "etc/systemd/system.conf.d", "etc/modprobe.d"} {
		must(t, rootHas(root, dir), "tmpfiles did not create /%s", dir)
	}
	must(t, rootHas(root, wantsLink), "rdmad.service not enabled on install (%s missing)", wantsLink)
	must(t, rootHas(root, aliasLink), "dbus-org.rdmad1.service alias missing after enable")

	// The installed unit as systemd of that root reads it.
	if out := chroot(t, root, "systemd-analyze verify --man=no /usr/lib/systemd/system/rdmad.service 2>&1"); strings.TrimSpace(out) != "" {
		t.Errorf("systemd-analyze verify of the installed unit:\n%s", out)
	}
	// The packaged binaries run there, and the shipped conffile is valid:
	// one pass on an empty root applies its memlock policy.
	if out := chroot(t, root, "rdmad --version"); strings.TrimSpace(out) != "rdmad "+treeVersion(t) {
		t.Errorf("installed rdmad --version = %q", out)
	}
	chroot(t, root, "mkdir -p /srv/empty && rdmad --config /etc/rdma/rdmad.toml --root /srv/empty --once")
	must(t, rootHas(root, "srv/empty/etc/security/limits.d/90-rdmad-memlock.conf"), "rdmad --once with the shipped config wrote no memlock file")
	chroot(t, root, "rdmactl --help >/dev/null 2>&1; [ $? -le 2 ]")

	// Upgrade over an edited conffile, after the administrator disabled the
	// unit: the edit and the choice both survive.
	appendRoot(t, root, conffile, adminEdit)
	chroot(t, root, "systemctl disable rdmad.service")
	// The host as an earlier version left it: rdmad's DefaultLimitMEMLOCK=
	// drop-in, and no file of the administrator's setting services. The
	// preinst keeps services on, and says so.
	hosttest.Write(t, root, memlock.SystemdFile, string(memlock.RenderSystemd(&config.Memlock{Group: "rdma", Soft: config.Limit{Unlimited: true}, Hard: config.Limit{Unlimited: true}, Services: true})))
	out := chroot(t, root, "dpkg -i /tmp/v2.deb 2>&1")
	must(t, strings.Contains(out, "wrote /etc/rdma/rdmad.d/00-upgrade-memlock.toml (services = true)"), "the upgrade did not say it kept services on:\n%s", out)
	must(t, strings.HasPrefix(readRoot(t, root, upgradeKeep), "# Managed by rdmad"), "upgrade did not write a headed /%s", upgradeKeep)
	// rdmad, with the files as the upgrade left them, keeps the drop-in.
	chroot(t, root, "mkdir -p /srv/up/etc && cp -a /etc/rdma /srv/up/etc/ && rdmad --config /srv/up/etc/rdma/rdmad.toml --root /srv/up --once")
	must(t, rootHas(root, "srv/up/"+memlock.SystemdFile), "rdmad after the upgrade does not write the services drop-in")
	chroot(t, root, "rm -rf /srv/up")
	if got := debStatus(t, root); got != "install ok installed "+version2 {
		t.Fatalf("after upgrade: status %q", got)
	}
	must(t, strings.HasSuffix(readRoot(t, root, conffile), adminEdit), "upgrade lost the edit of /%s", conffile)
	for _, leftover := range []string{conffile + ".dpkg-dist", conffile + ".dpkg-new", conffile + ".dpkg-old"} {
		must(t, !rootHas(root, leftover), "upgrade left /%s", leftover)
	}
	must(t, !rootHas(root, wantsLink), "upgrade re-enabled a unit the administrator disabled")
	chroot(t, root, "systemctl enable rdmad.service")

	// Remove keeps the configuration; purge takes what the package and rdmad
	// wrote, and leaves the operator's own drop-in.
	hosttest.Write(t, root, persisted, config.PersistedHeader+"[netns]\nmode = \"exclusive\"\n")
	appendRoot(t, root, operators, "# the operator's\n")
	// A file the administrator wrote by hand at a path rdmad writes: not
	// rdmad's (no header), kept by the purge as rdmad itself keeps it.
	hosttest.Write(t, root, handWritten, "options ib_core netns_mode=0\n")
	chroot(t, root, "dpkg -r rdmad")
	if got := debStatus(t, root); got != "deinstall ok config-files "+version2 {
		t.Errorf("after dpkg -r: status %q", got)
	}
	must(t, !rootHas(root, "usr/sbin/rdmad"), "dpkg -r left /usr/sbin/rdmad")
	must(t, rootHas(root, conffile), "dpkg -r removed the conffile")
	chroot(t, root, "dpkg -P rdmad")
	if got := debStatus(t, root); !strings.Contains(got, "no packages found") && !strings.HasPrefix(got, "unknown ok not-installed") {
		t.Errorf("after purge: status %q", got)
	}
	for _, gone := range []string{conffile, persisted, upgradeKeep, memlock.SystemdFile, wantsLink, aliasLink} {
		must(t, !rootHas(root, gone), "purge left /%s", gone)
	}
	must(t, rootHas(root, operators), "purge removed the operator's drop-in /%s", operators)
	must(t, rootHas(root, handWritten), "purge removed /%s, written by hand without rdmad's header", handWritten)
	mustf(t, os.Remove(filepath.Join(root, handWritten)), "remove the hand-written file")
	if out := chroot(t, root, "grep -rl rdmad /var/lib/systemd/deb-systemd-helper-enabled || true"); strings.TrimSpace(out) != "" {
		t.Errorf("purge left deb-systemd-helper state:\n%s", out)
	}
}

// rpm runs the host's rpm on root (rpm chroots into it for the scriptlets).
func rpm(t *testing.T, root string, args ...string) string {
	t.Helper()
	out, err := inRoot(root, append([]string{"rpm", "--root", root}, args...)...)
	if err != nil {
		t.Fatalf("rpm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func setPreset(t *testing.T, root, line string) {
	t.Helper()
	p := filepath.Join(root, "etc/systemd/system-preset/00-pkgtest.preset")
	mustf(t, os.MkdirAll(filepath.Dir(p), 0o755), "preset dir")
	mustf(t, os.WriteFile(p, []byte(line+"\n"), 0o644), "preset")
}

func rpmLifecycle(t *testing.T, root string) {
	requireTool(t, "rpm")
	mustf(t, os.Remove(filepath.Join(root, operators)), "remove drop-in")
	// %post presets on first install: the preset policy decides.
	setPreset(t, root, "enable rdmad.service")
	rpm(t, root, "-i", "--nodeps", filepath.Join(root, "tmp/v1.rpm"))
	must(t, rootHas(root, wantsLink), "%%post did not apply the preset (enable) on install")
	must(t, rootHas(root, "usr/sbin/rdmad"), "rpm -i did not install rdmad")

	// An upgrade neither presets again nor loses the edit (noreplace).
	setPreset(t, root, "disable rdmad.service")
	appendRoot(t, root, conffile, adminEdit)
	hosttest.Write(t, root, memlock.SystemdFile, string(memlock.RenderSystemd(&config.Memlock{Group: "rdma", Soft: config.Limit{Unlimited: true}, Hard: config.Limit{Unlimited: true}, Services: true})))
	out := rpm(t, root, "-U", "--nodeps", filepath.Join(root, "tmp/v2.rpm"))
	must(t, strings.Contains(out, "wrote /etc/rdma/rdmad.d/00-upgrade-memlock.toml (services = true)"), "rpm -U did not say it kept services on:\n%s", out)
	must(t, strings.HasPrefix(readRoot(t, root, upgradeKeep), "# Managed by rdmad"), "rpm -U did not write a headed /%s", upgradeKeep)
	if got := strings.TrimSpace(rpm(t, root, "-q", "--qf", "%{VERSION}", "rdmad")); got != version2 {
		t.Errorf("after rpm -U: version %q", got)
	}
	must(t, rootHas(root, wantsLink), "rpm -U changed the enablement (preset on upgrade)")
	must(t, strings.HasSuffix(readRoot(t, root, conffile), adminEdit), "rpm -U lost the edit of /%s", conffile)
	must(t, !rootHas(root, conffile+".rpmnew"), "rpm -U wrote %s.rpmnew for an unchanged default", conffile)

	// Erase: %preun disables, the edited config is saved, ghosts go.
	hosttest.Write(t, root, persisted, config.PersistedHeader+"[netns]\nmode = \"exclusive\"\n")
	hosttest.Write(t, root, handWritten, "options ib_core netns_mode=0\n")
	rpm(t, root, "-e", "rdmad")
	must(t, !rootHas(root, wantsLink), "%%preun did not disable rdmad.service")
	must(t, !rootHas(root, "usr/sbin/rdmad"), "rpm -e left /usr/sbin/rdmad")
	for _, gone := range []string{persisted, upgradeKeep, memlock.SystemdFile} {
		must(t, !rootHas(root, gone), "rpm -e left rdmad's /%s", gone)
	}
	must(t, rootHas(root, handWritten), "rpm -e removed /%s, written by hand without rdmad's header", handWritten)
	mustf(t, os.Remove(filepath.Join(root, handWritten)), "remove the hand-written file")
	must(t, rootHas(root, conffile+".rpmsave"), "rpm -e did not save the edited config as .rpmsave")

	// A first install under the RHEL default (disabled) stays disabled.
	rpm(t, root, "-i", "--nodeps", filepath.Join(root, "tmp/v1.rpm"))
	must(t, !rootHas(root, wantsLink), "%%post enabled rdmad.service against a disable preset")
	rpm(t, root, "-e", "rdmad")
}
