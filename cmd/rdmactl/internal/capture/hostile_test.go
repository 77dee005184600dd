package capture

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdmad/rdmad/daemon/host/hosttest"
)

// entries is the tarball's entries by name, each its header and content.
func entries(t *testing.T, tarball []byte) map[string]entry {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(tarball))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]entry{}
	tr := tar.NewReader(zr)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(tr)
		out[strings.TrimSuffix(hdr.Name, "/")] = entry{hdr, string(data)}
	}
}

type entry struct {
	hdr  *tar.Header
	data string
}

// Hostile sysfs and configuration: a FIFO, an endless device, a file far
// larger than its kind, symlink loops, a link out of the root. Each is
// skipped with why, the capture ends, and everything else is in it.
func TestHostileTreeIsCapturedAroundWhatIsNotAFile(t *testing.T) {
	root := hosttest.Copy(t, "demo")
	dev := filepath.Join(root, "sys/devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0/infiniband/mlx5_0")
	mkfifo := func(p string) {
		t.Helper()
		os.Remove(p)
		if err := syscall.Mkfifo(p, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	symlink := func(target, p string) {
		t.Helper()
		os.Remove(p)
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
	}
	mkfifo(filepath.Join(dev, "fw_ver"))                                                 // an attribute that is a FIFO
	hosttest.Write(t, root, "etc/rdma/rdmad.d/60-huge.toml", strings.Repeat("#", 4<<20)) // a drop-in of 4 MiB
	mkfifo(filepath.Join(root, "etc/rdma/rdmad.d/60-fifo.toml"))                         // a drop-in that is a FIFO
	hosttest.Write(t, root, "sys/class/net/veth0/mtu", strings.Repeat("9", 64<<10))      // an attribute of 64 KiB
	symlink("loop0", filepath.Join(root, "sys/class/infiniband/loop0"))                  // a link to itself
	symlink("b.conf", filepath.Join(root, "etc/rdma/modules/a.conf"))                    // a loop of two links
	symlink("a.conf", filepath.Join(root, "etc/rdma/modules/b.conf"))
	symlink(".", filepath.Join(root, "etc/rdma/modules/again"))                          // a directory that holds itself
	symlink("../ports", filepath.Join(dev, "ports/3"))                                   // a port that is its device's ports
	symlink("../../../../../../../../../../etc", filepath.Join(root, "etc/rdma/escape")) // out of the root
	symlink("../../../../../../../../../../etc/hostname", filepath.Join(root, "etc/rdma/modules/escape.conf"))
	hosttest.Write(t, root, "etc/hostname", "demo-host\n")
	// An endless device: /dev/zero's numbers where a drop-in is, and
	// a link to it (rdmad's reader refuses both at open).
	zero := filepath.Join(root, "dev/zero")
	endless := unix.Mknod(zero, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 5))) == nil
	if endless {
		symlink("/dev/zero", filepath.Join(root, "etc/rdma/rdmad.d/60-zero.toml"))
		symlink("../../../dev/zero", filepath.Join(root, "etc/libibverbs.d/zero.driver"))
	}

	done := make(chan struct{})
	var tarball []byte
	var res *Result
	go func() {
		defer close(done)
		var buf bytes.Buffer
		var err error
		res, err = Write(&buf, Options{Root: root, Dir: "host", Raw: true, Now: time.Now()})
		if err == nil {
			tarball = buf.Bytes()
		}
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Minute): // a hang, not a time limit: the capture never waits for a file
		t.Fatal("the capture did not end")
	}
	if tarball == nil {
		t.Fatal("no capture")
	}

	why := map[string]string{}
	for _, s := range res.Skipped {
		why[s.Path] = s.Why
	}
	devRel := "/sys/devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0/infiniband/mlx5_0"
	wantSkipped := map[string]string{
		devRel + "/fw_ver":                   "FIFO",
		"/etc/rdma/rdmad.d/60-huge.toml":     "size limit",
		"/etc/rdma/rdmad.d/60-fifo.toml":     "FIFO",
		"/sys/devices/virtual/net/veth0/mtu": "size limit",
		"/sys/class/infiniband/loop0":        "too many levels of symbolic links",
		"/etc/rdma/modules/a.conf":           "too many levels of symbolic links",
		"/etc/rdma/modules/b.conf":           "too many levels of symbolic links",
		"/etc/rdma/escape":                   "outside the host's root",
	}
	if endless {
		wantSkipped["/etc/rdma/rdmad.d/60-zero.toml"] = "character device"
		wantSkipped["/etc/libibverbs.d/zero.driver"] = "character device"
	}
	for p, w := range wantSkipped {
		if !strings.Contains(why[p], w) {
			t.Errorf("%s: skipped as %q, want a reason with %q", p, why[p], w)
		}
	}
	ents := entries(t, tarball)
	for p := range wantSkipped {
		if _, ok := ents["host"+p]; ok {
			t.Errorf("%s is in the capture", p)
		}
	}
	// The rest is there: the device's other attributes, its ports, the
	// directory link written as a link (not walked).
	for p, want := range map[string]string{
		"host" + devRel + "/node_guid":          "b859:9f03:00d4:2e7a\n",
		"host" + devRel + "/ports/1/link_layer": "Ethernet\n",
		"host/etc/rdma/modules/rdma.conf":       "",
	} {
		e, ok := ents[p]
		if !ok {
			t.Errorf("%s is not in the capture", p)
			continue
		}
		if want != "" && e.data != want {
			t.Errorf("%s = %q, want %q", p, e.data, want)
		}
	}
	if e := ents["host/etc/rdma/modules/again"]; e.hdr == nil || e.hdr.Typeflag != tar.TypeSymlink || e.hdr.Linkname != "." {
		t.Errorf("etc/rdma/modules/again: %+v, want the link to . as it is", e.hdr)
	}
	for name := range ents {
		if strings.Contains(name, "/again/") || strings.Contains(name, "ports/3/") {
			t.Errorf("%s: a loop was walked", name)
		}
	}
	// The manifest lists them too.
	var m struct {
		Skipped []Skip
	}
	if err := json.Unmarshal([]byte(ents["host/"+ManifestFile].data), &m); err != nil {
		t.Fatal(err)
	}
	if len(m.Skipped) != len(res.Skipped) {
		t.Errorf("the manifest lists %d skipped paths, the result %d", len(m.Skipped), len(res.Skipped))
	}
	if strings.Contains(ents["host/"+ManifestFile].data, root) {
		t.Errorf("the manifest names the machine's path of the root %s", root)
	}
}

// An absolute link is written relative, so the tree works wherever it is
// unpacked; a unit masked by a link to /dev/null keeps it.
func TestLinksAreRelative(t *testing.T) {
	root := hosttest.Copy(t, "demo")
	hosttest.Write(t, root, "etc/rdma/site.toml", "[[roce]]\ndevice = \"mlx5_0\"\ntos = 8\n")
	if err := os.MkdirAll(filepath.Join(root, "etc/rdma/rdmad.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/rdma/site.toml", filepath.Join(root, "etc/rdma/rdmad.d/50-site.toml")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "etc/systemd/system"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/null", filepath.Join(root, "etc/systemd/system/rdma-load-modules@rdma.service")); err != nil {
		t.Fatal(err)
	}
	// The tree's /dev/null is not a file, as a host's is not.
	if err := os.MkdirAll(filepath.Join(root, "dev"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(root, "dev/null"), 0o666); err != nil {
		t.Fatal(err)
	}
	tarball, _ := capture(t, Options{Root: root, Dir: "host"})
	ents := entries(t, tarball)
	if e := ents["host/etc/rdma/rdmad.d/50-site.toml"]; e.hdr == nil || e.hdr.Linkname != "../../../etc/rdma/site.toml" {
		t.Errorf("50-site.toml: %+v", e.hdr)
	}
	if e := ents["host/etc/systemd/system/rdma-load-modules@rdma.service"]; e.hdr == nil || e.hdr.Linkname != "/dev/null" {
		t.Errorf("the mask: %+v", e.hdr)
	}
	for name, e := range ents {
		if e.hdr.Typeflag == tar.TypeSymlink && e.hdr.Linkname != "/dev/null" && filepath.IsAbs(e.hdr.Linkname) {
			t.Errorf("%s -> %s is absolute", name, e.hdr.Linkname)
		}
	}
	dst := t.TempDir()
	unpack(t, tarball, dst)
	b, err := os.ReadFile(filepath.Join(dst, "host/etc/rdma/rdmad.d/50-site.toml"))
	if err != nil || !strings.Contains(string(b), "tos = 8") {
		t.Errorf("the unpacked link does not lead to the captured file: %q, %v", b, err)
	}
}

// On the host rdmactl runs on, a capture needs root, and says so: run as
// another user (the rdmactl binary as nobody when the test runs as root).
func TestCaptureOfThisHostNeedsRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		if _, err := Write(io.Discard, Options{Root: "/"}); !errors.Is(err, ErrNotRoot) {
			t.Errorf("err = %v, want ErrNotRoot", err)
		}
		return
	}
	dir, err := os.MkdirTemp("", "rdmactl-nobody-") // t.TempDir's parent is root's alone
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "rdmactl")
	b, err := os.ReadFile(rdmactlBin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "capture", "-o", filepath.Join(dir, "host.tar.gz"))
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(out), "capturing this host needs root") {
		t.Errorf("rdmactl capture as nobody: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "host.tar.gz")); err == nil {
		t.Error("a capture was written")
	}
}
