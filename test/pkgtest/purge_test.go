package pkgtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/daemon/metrics"
)

// The .deb's purge deletes what rdmad wrote, its node_exporter textfile
// included (found by its first line, metrics.Header), and nothing of the
// operator's: another exporter's .prom, a symlink, their drop-ins. It runs
// the real postrm against a DPKG_ROOT, with no systemd helpers in PATH.
func TestDebPurgeRemovesWhatRdmadWrote(t *testing.T) {
	root := t.TempDir()
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
	ours := []string{
		"etc/rdma/rdmad.d/zz-rdmad-persist.toml", "etc/security/limits.d/90-rdmad-memlock.conf",
		"etc/systemd/system.conf.d/90-rdmad-memlock.conf", "etc/modprobe.d/rdmad-netns.conf",
		"var/lib/prometheus/node-exporter/rdmad.prom", "var/lib/node_exporter/textfile_collector/rdma.prom",
	}
	theirs := []string{"etc/rdma/rdmad.d/50-site.toml", "var/lib/prometheus/node-exporter/node.prom"}
	for _, f := range ours {
		hosttest.Write(t, root, f, metrics.Header+"rdmad_up 1\n")
	}
	for _, f := range theirs {
		hosttest.Write(t, root, f, "# HELP node_x other exporter\nnode_x 1\n")
	}
	// A symlink to a file of rdmad's elsewhere, and a FIFO (which must not
	// be opened: the purge would hang), are not rdmad's to remove.
	hosttest.Write(t, root, "srv/rdmad-elsewhere.prom", metrics.Header+"rdmad_up 1\n")
	link := filepath.Join(root, "var/lib/prometheus/node-exporter/link.prom")
	if err := os.Symlink("../../../../srv/rdmad-elsewhere.prom", link); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(root, "var/lib/prometheus/node-exporter/fifo.prom"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(bin, "sh"), filepath.Join(repo, "packaging/deb/postrm"), "purge")
	cmd.Env = []string{"PATH=" + bin, "DPKG_ROOT=" + root}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("postrm purge: %v\n%s", err, out)
	}
	for _, f := range ours {
		if _, err := os.Lstat(filepath.Join(root, f)); err == nil {
			t.Errorf("/%s left after purge", f)
		}
	}
	for _, f := range append(theirs, "var/lib/prometheus/node-exporter/link.prom", "var/lib/prometheus/node-exporter/fifo.prom", "srv/rdmad-elsewhere.prom") {
		if _, err := os.Lstat(filepath.Join(root, f)); err != nil {
			t.Errorf("/%s (not rdmad's) removed by purge", f)
		}
	}
}
