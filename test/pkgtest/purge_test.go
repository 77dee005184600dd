package pkgtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/daemon/metrics"
)

// removalTools links the tools the removal scripts may use into a fresh
// directory, the scripts' only PATH: no systemctl, so they run as on a
// host without systemd.
func removalTools(t *testing.T) string {
	t.Helper()
	bin := t.TempDir()
	for _, tool := range []string{"sh", "rm", "rmdir", "head", "grep", "mkdir", "mv", "cat"} {
		p, err := exec.LookPath(tool)
		if err != nil {
			t.Skipf("no %s", tool)
		}
		if err := os.Symlink(p, filepath.Join(bin, tool)); err != nil {
			t.Fatal(err)
		}
	}
	return bin
}

// textfiles lays out node_exporter textfile directories under root: the
// files rdmad wrote (metrics.Header first) and what is not rdmad's to
// remove: another exporter's file, a symlink to a file of rdmad's
// elsewhere, and a FIFO (which must not be opened: the script would hang).
func textfiles(t *testing.T, root string) (ours, theirs []string) {
	t.Helper()
	ours = []string{"var/lib/prometheus/node-exporter/rdmad.prom", "var/lib/node_exporter/textfile_collector/rdma.prom"}
	theirs = []string{"var/lib/prometheus/node-exporter/node.prom", "var/lib/prometheus/node-exporter/link.prom",
		"var/lib/prometheus/node-exporter/fifo.prom", "srv/rdmad-elsewhere.prom"}
	for _, f := range ours {
		hosttest.Write(t, root, f, metrics.Header+"rdmad_up 1\n")
	}
	hosttest.Write(t, root, theirs[0], "# HELP node_x other exporter\nnode_x 1\n")
	hosttest.Write(t, root, theirs[3], metrics.Header+"rdmad_up 1\n")
	if err := os.Symlink("../../../../srv/rdmad-elsewhere.prom", filepath.Join(root, theirs[1])); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(root, theirs[2]), 0o644); err != nil {
		t.Fatal(err)
	}
	return ours, theirs
}

func checkRemoved(t *testing.T, root, script string, ours, theirs []string) {
	t.Helper()
	for _, f := range ours {
		if _, err := os.Lstat(filepath.Join(root, f)); err == nil {
			t.Errorf("%s: /%s left", script, f)
		}
	}
	for _, f := range theirs {
		if _, err := os.Lstat(filepath.Join(root, f)); err != nil {
			t.Errorf("%s: /%s (not rdmad's) removed", script, f)
		}
	}
}

// rdmadWrites are the files rdmad (or the package's preinst/%pre) writes
// under /etc, each starting with rdmad's header ("# Managed by rdmad").
var rdmadWrites = []string{
	"etc/rdma/rdmad.d/zz-rdmad-persist.toml", "etc/rdma/rdmad.d/00-upgrade-memlock.toml",
	"etc/security/limits.d/90-rdmad-memlock.conf", "etc/systemd/system.conf.d/90-rdmad-memlock.conf",
	"etc/modprobe.d/rdmad-netns.conf", "etc/modprobe.d/rdmad-mlx4-pfc.conf",
}

// rdmadFiles lays out rdmadWrites under root, with rdmad's header when
// headed, else as an administrator would write them by hand (no header: not
// rdmad's, rdmad(8) promises never to touch them).
func rdmadFiles(t *testing.T, root string, headed bool) {
	t.Helper()
	for _, f := range rdmadWrites {
		if headed {
			hosttest.Write(t, root, f, "# Managed by rdmad from its configuration; local changes are overwritten.\n")
		} else {
			hosttest.Write(t, root, f, "# written by hand\n@hpc soft memlock unlimited\n")
		}
	}
	hosttest.Write(t, root, "etc/rdma/rdmad.d/50-site.toml", "[modules]\n")
}

// removal runs a removal script against root for both kinds of rdmad's
// files: headed ones go, hand-written ones at the same paths stay, as do
// the textfiles and drop-ins that are not rdmad's. script runs the real
// script on root with the given arguments.
func removal(t *testing.T, name string, script func(t *testing.T, root string)) {
	for _, headed := range []bool{true, false} {
		root := t.TempDir()
		ours, theirs := textfiles(t, root)
		rdmadFiles(t, root, headed)
		script(t, root)
		theirs = append(theirs, "etc/rdma/rdmad.d/50-site.toml")
		if headed {
			checkRemoved(t, root, name, append(ours, rdmadWrites...), theirs)
		} else {
			checkRemoved(t, root, name+" (hand-written files at rdmad's paths)", ours, append(theirs, rdmadWrites...))
		}
	}
}

// The .deb's purge deletes what rdmad wrote (its header first), its
// node_exporter textfile included (found by its first bytes,
// metrics.Header), and nothing of the operator's: another exporter's .prom,
// a symlink, a FIFO, their drop-ins, a hand-written file at one of rdmad's
// paths. It runs the real postrm against a DPKG_ROOT.
func TestDebPurgeRemovesWhatRdmadWrote(t *testing.T) {
	bin := removalTools(t)
	removal(t, "postrm purge", func(t *testing.T, root string) {
		hosttest.Write(t, root, "var/lib/rdmad/last-good-config.json", "{}\n")
		hosttest.Write(t, root, "var/lib/rdmad/found.json", "# rdmad\n{}\n")
		cmd := exec.Command(filepath.Join(bin, "sh"), filepath.Join(repo, "packaging/deb/postrm"), "purge")
		cmd.Env = []string{"PATH=" + bin, "DPKG_ROOT=" + root}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("postrm purge: %v\n%s", err, out)
		}
		if _, err := os.Lstat(filepath.Join(root, "var/lib/rdmad")); err == nil {
			t.Errorf("postrm purge left /var/lib/rdmad")
		}
	})
}

// rpmScript writes packaging/rpm/NAME with its root= set to root (rpm has
// no DPKG_ROOT: the scripts name their root once, empty).
func rpmScript(t *testing.T, name, root string) string {
	t.Helper()
	script, err := os.ReadFile(filepath.Join(repo, "packaging/rpm", name))
	if err != nil {
		t.Fatal(err)
	}
	moved := strings.Replace(string(script), "\nroot=\n", "\nroot='"+root+"'\n", 1)
	if moved == string(script) {
		t.Fatalf("packaging/rpm/%s has no root= line", name)
	}
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(moved), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// The .rpm's erase (postun 0) removes rdmad's files and textfiles as the
// .deb's purge does, only when they carry rdmad's header (they are not
// %ghost: rpm would remove those whatever they hold), and an upgrade
// (postun 1) removes nothing.
func TestRPMEraseRemovesRdmadFiles(t *testing.T) {
	bin := removalTools(t)
	removal(t, "postun 0 (erase)", func(t *testing.T, root string) {
		cmd := exec.Command(filepath.Join(bin, "sh"), rpmScript(t, "postun", root), "0")
		cmd.Env = []string{"PATH=" + bin}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("postun 0: %v\n%s", err, out)
		}
	})
	root := t.TempDir()
	ours, theirs := textfiles(t, root)
	rdmadFiles(t, root, true)
	cmd := exec.Command(filepath.Join(bin, "sh"), rpmScript(t, "postun", root), "1")
	cmd.Env = []string{"PATH=" + bin}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("postun 1: %v\n%s", err, out)
	}
	checkRemoved(t, root, "postun 1 (upgrade)", nil, append(append(ours, theirs...), rdmadWrites...))
}
