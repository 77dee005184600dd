package initramfs_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/daemon/initramfs"
)

const (
	release    = "6.1.0-28-amd64"
	optionFile = "etc/modprobe.d/rdmad-netns.conf"
)

// ibCore is ib_core as the RDMA netns mode's option asks about it: a
// driver that needs it by modules.dep brings it, and so does dracut's
// rdma module.
func ibCore(h *host.Host) initramfs.Module {
	return initramfs.Module{Brings: initramfs.Needing(h, "ib_core"), RDMADracutModule: true}
}

// readyIB is the ib-ready fixture (initramfs-tools listing mlx4_ib) with
// the option file changed after the image was built.
func readyIB(t *testing.T) string {
	t.Helper()
	root := hosttest.Copy(t, "ib-ready")
	hosttest.Touch(t, root, "boot/initrd.img-"+release, time.Now().Add(-time.Hour))
	hosttest.Touch(t, root, optionFile, time.Now())
	return root
}

func TestInitramfsTools(t *testing.T) {
	root := readyIB(t)
	h := host.New(root)
	b := initramfs.Read(h, optionFile, ibCore(h))
	want := initramfs.Boot{
		Generator: initramfs.InitramfsTools, Image: "boot/initrd.img-" + release, Rebuild: "update-initramfs -u -k " + release,
		FromInitramfs: true, From: initramfs.Source{File: "etc/initramfs-tools/modules", Line: 2, Listed: "mlx4_ib"}, Stale: true,
	}
	if b != want {
		t.Fatalf("Read:\n got %+v\nwant %+v", b, want)
	}
	if got := b.From.String(); got != "/etc/initramfs-tools/modules lists mlx4_ib" {
		t.Errorf("source: %q", got)
	}

	// Rebuilt since: in the initramfs, not stale.
	hosttest.Touch(t, root, "boot/initrd.img-"+release, time.Now().Add(time.Hour))
	if b := initramfs.Read(h, optionFile, ibCore(h)); !b.FromInitramfs || b.Stale {
		t.Errorf("after the rebuild: %+v", b)
	}
	// No image, or no option file: nothing is older than the other.
	hosttest.Remove(t, root, "boot/initrd.img-"+release)
	if b := initramfs.Read(h, optionFile, ibCore(h)); !b.FromInitramfs || b.Stale {
		t.Errorf("without the image: %+v", b)
	}
}

func TestModuleThatDoesNotBringIt(t *testing.T) {
	root := readyIB(t)
	h := host.New(root)
	// mlx4_core does not need ib_core (modules.dep), and mlx4_en is not
	// listed: neither loads from the initramfs.
	hosttest.Write(t, root, "etc/initramfs-tools/modules", "# comment\n\nmlx4_core\n")
	if b := initramfs.Read(h, optionFile, ibCore(h)); b.FromInitramfs || b.Stale || b.Generator != initramfs.InitramfsTools {
		t.Errorf("ib_core is not in this initramfs: %+v", b)
	}
	if b := initramfs.Read(h, optionFile, initramfs.Module{Brings: initramfs.Named("mlx4_en")}); b.FromInitramfs || b.Stale {
		t.Errorf("mlx4_en is not in this initramfs: %+v", b)
	}
	// Named compares as the kernel does ('-' is '_'); a module that
	// needs mlx4_en does not bring it (Named reads no modules.dep).
	hosttest.Write(t, root, "etc/initramfs-tools/modules", "mlx4-en\n")
	if b := initramfs.Read(h, optionFile, initramfs.Module{Brings: initramfs.Named("mlx4_en")}); !b.Stale || b.From.Listed != "mlx4-en" {
		t.Errorf("mlx4-en is mlx4_en: %+v", b)
	}
	// Without modules.dep only ib_core's own name brings it.
	hosttest.Remove(t, root, "lib/modules/"+release+"/modules.dep")
	hosttest.Write(t, root, "etc/initramfs-tools/modules", "mlx4_ib\n")
	if b := initramfs.Read(h, optionFile, ibCore(h)); b.FromInitramfs {
		t.Errorf("without modules.dep mlx4_ib cannot be told to need ib_core: %+v", b)
	}
	hosttest.Write(t, root, "etc/initramfs-tools/modules", "ib_core\n")
	if b := initramfs.Read(h, optionFile, ibCore(h)); !b.Stale {
		t.Errorf("ib_core listed by name: %+v", b)
	}
}

func TestDracut(t *testing.T) {
	root := readyIB(t)
	h := host.New(root)
	hosttest.Remove(t, root, "etc/initramfs-tools")
	image := "boot/initramfs-" + release + ".img"
	hosttest.Write(t, root, image, "")
	hosttest.Touch(t, root, image, time.Now().Add(-time.Hour))
	for _, c := range []struct {
		name, file, text string
		src              initramfs.Source
		why              string
	}{
		{"add_drivers", "etc/dracut.conf.d/50-ib.conf", "# RDMA boot\nadd_drivers+=\" mlx4_ib \"\n",
			initramfs.Source{File: "etc/dracut.conf.d/50-ib.conf", Line: 2, Key: "add_drivers", Listed: "mlx4_ib"},
			"add_drivers at /etc/dracut.conf.d/50-ib.conf:2 adds mlx4_ib"},
		{"force_drivers", "etc/dracut.conf", "force_drivers=\"ib_core\"\n",
			initramfs.Source{File: "etc/dracut.conf", Line: 1, Key: "force_drivers", Listed: "ib_core"},
			"force_drivers at /etc/dracut.conf:1 adds ib_core"},
		{"rdma module", "usr/lib/dracut/dracut.conf.d/01-rdma.conf", "add_dracutmodules+=' rdma '\n",
			initramfs.Source{File: "usr/lib/dracut/dracut.conf.d/01-rdma.conf", Line: 1, Key: "add_dracutmodules"},
			"add_dracutmodules at /usr/lib/dracut/dracut.conf.d/01-rdma.conf:1 adds the rdma module"},
	} {
		t.Run(c.name, func(t *testing.T) {
			hosttest.Write(t, root, c.file, c.text)
			defer hosttest.Remove(t, root, c.file)
			b := initramfs.Read(h, optionFile, ibCore(h))
			want := initramfs.Boot{Generator: initramfs.Dracut, Image: image, Rebuild: "dracut -f --kver " + release, FromInitramfs: true, From: c.src, Stale: true}
			if b != want {
				t.Fatalf("Read:\n got %+v\nwant %+v", b, want)
			}
			if b.From.String() != c.why {
				t.Errorf("source: %q, want %q", b.From.String(), c.why)
			}
		})
	}
	// The rdma dracut module brings ib_core only: not mlx4_en.
	hosttest.Write(t, root, "etc/dracut.conf.d/50-ib.conf", "add_dracutmodules+=\" rdma \"\n#add_drivers+=\" mlx4_en \"\n")
	if b := initramfs.Read(h, optionFile, initramfs.Module{Brings: initramfs.Named("mlx4_en")}); b.FromInitramfs || b.Generator != initramfs.Dracut {
		t.Errorf("mlx4_en: %+v", b)
	}
	// A drop-in in /etc hides the one of the same name in /usr/lib.
	hosttest.Write(t, root, "usr/lib/dracut/dracut.conf.d/50-ib.conf", "add_drivers+=\" mlx4_en \"\n")
	if b := initramfs.Read(h, optionFile, initramfs.Module{Brings: initramfs.Named("mlx4_en")}); b.FromInitramfs {
		t.Errorf("the hidden drop-in was read: %+v", b)
	}
}

// A drop-in linked to an absolute path is read inside the root, never
// from the machine the test runs on; a file over the configuration bound
// is not read at all.
func TestReadsAreBoundedAndInsideTheRoot(t *testing.T) {
	root := readyIB(t)
	h := host.New(root)
	hosttest.Remove(t, root, "etc/initramfs-tools")
	hosttest.Write(t, root, "usr/share/rdma/ib.conf", "add_drivers+=\" mlx4_ib \"\n")
	if err := os.MkdirAll(filepath.Join(root, "etc/dracut.conf.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/usr/share/rdma/ib.conf", filepath.Join(root, "etc/dracut.conf.d/50-ib.conf")); err != nil {
		t.Fatal(err)
	}
	hosttest.Write(t, root, "boot/initramfs-"+release+".img", "")
	hosttest.Touch(t, root, "boot/initramfs-"+release+".img", time.Now().Add(-time.Hour))
	if b := initramfs.Read(h, optionFile, ibCore(h)); !b.Stale || b.From.File != "etc/dracut.conf.d/50-ib.conf" {
		t.Errorf("through the link inside the root: %+v", b)
	}
	huge := strings.Repeat("# padding\n", host.MaxConfigSize/10+1) + "add_drivers+=\" mlx4_ib \"\n"
	hosttest.Write(t, root, "usr/share/rdma/ib.conf", huge)
	if b := initramfs.Read(h, optionFile, ibCore(h)); b.FromInitramfs {
		t.Errorf("a drop-in over %d bytes was read: %+v", host.MaxConfigSize, b)
	}
}

func TestWithoutGeneratorOrRelease(t *testing.T) {
	root := readyIB(t)
	h := host.New(root)
	hosttest.Remove(t, root, host.ProcOSRelease)
	if b := initramfs.Read(h, optionFile, ibCore(h)); b != (initramfs.Boot{}) {
		t.Errorf("without a kernel release: %+v", b)
	}
	root = readyIB(t)
	h = host.New(root)
	hosttest.Remove(t, root, "etc/initramfs-tools")
	if b := initramfs.Read(h, optionFile, ibCore(h)); b != (initramfs.Boot{}) {
		t.Errorf("without a generator: %+v", b)
	}
}
