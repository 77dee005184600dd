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
	for _, tool := range []string{"sh", "rm", "rmdir", "head"} {
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

// The .deb's purge deletes what rdmad wrote, its node_exporter textfile
// included (found by its first bytes, metrics.Header), and nothing of the
// operator's: another exporter's .prom, a symlink, a FIFO, their drop-ins.
// It runs the real postrm against a DPKG_ROOT.
func TestDebPurgeRemovesWhatRdmadWrote(t *testing.T) {
	root := t.TempDir()
	bin := removalTools(t)
	ours, theirs := textfiles(t, root)
	written := []string{
		"etc/rdma/rdmad.d/zz-rdmad-persist.toml", "etc/security/limits.d/90-rdmad-memlock.conf",
		"etc/systemd/system.conf.d/90-rdmad-memlock.conf", "etc/modprobe.d/rdmad-netns.conf",
		"var/lib/rdmad/last-good-config.json",
	}
	for _, f := range written {
		hosttest.Write(t, root, f, "# written by rdmad\n")
	}
	hosttest.Write(t, root, "etc/rdma/rdmad.d/50-site.toml", "[modules]\n")
	cmd := exec.Command(filepath.Join(bin, "sh"), filepath.Join(repo, "packaging/deb/postrm"), "purge")
	cmd.Env = []string{"PATH=" + bin, "DPKG_ROOT=" + root}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("postrm purge: %v\n%s", err, out)
	}
	checkRemoved(t, root, "postrm purge", append(ours, written...), append(theirs, "etc/rdma/rdmad.d/50-site.toml"))
}

// The .rpm's erase (postun 0) removes rdmad's textfiles as the .deb's
// purge does (the files under /etc are %ghost: rpm removes those), and an
// upgrade (postun 1) removes nothing. rpm has no DPKG_ROOT: the test runs
// the real script with its /var/lib/ paths moved under a temporary root.
func TestRPMEraseRemovesRdmadTextfiles(t *testing.T) {
	script, err := os.ReadFile(filepath.Join(repo, "packaging/rpm/postun"))
	if err != nil {
		t.Fatal(err)
	}
	bin := removalTools(t)
	for _, arg := range []string{"1", "0"} {
		root := t.TempDir()
		ours, theirs := textfiles(t, root)
		moved := strings.ReplaceAll(string(script), " /var/lib/", " "+root+"/var/lib/")
		if moved == string(script) {
			t.Fatal("postun names no /var/lib/ path")
		}
		name := filepath.Join(t.TempDir(), "postun")
		if err := os.WriteFile(name, []byte(moved), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(filepath.Join(bin, "sh"), name, arg)
		cmd.Env = []string{"PATH=" + bin}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("postun %s: %v\n%s", arg, err, out)
		}
		if arg == "1" {
			checkRemoved(t, root, "postun 1 (upgrade)", nil, append(ours, theirs...))
		} else {
			checkRemoved(t, root, "postun 0 (erase)", ours, theirs)
		}
	}
}
