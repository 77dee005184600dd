package host_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
)

// Each read must return at once with an error naming the problem: a FIFO
// (no writer: a plain open would block for good), a character device that
// never ends, a file over the limit, a directory.
func TestBoundedReadsRefuseWhatIsNotARegularFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, []byte(strings.Repeat("x", host.MaxConfigSize+1)), 0o644); err != nil {
		t.Fatal(err)
	}
	bigAttr := filepath.Join(dir, "bigattr")
	if err := os.WriteFile(bigAttr, []byte(strings.Repeat("x", host.MaxAttrSize+1)), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		read func() error
		want error
	}{
		{"fifo attr", func() error { _, err := host.ReadAttr(fifo); return err }, host.ErrNotRegular},
		{"fifo config", func() error { _, err := host.ReadConfigFile(fifo); return err }, host.ErrNotRegular},
		{"fifo write", func() error { return host.WriteAttr(fifo, []byte("1")) }, syscall.ENXIO}, // no reader: the open fails at once
		{"zero device", func() error { _, err := host.ReadConfigFile("/dev/zero"); return err }, host.ErrNotRegular},
		{"directory", func() error { _, err := host.ReadAttr(dir); return err }, host.ErrNotRegular},
		{"big config", func() error { _, err := host.ReadConfigFile(big); return err }, host.ErrTooLarge},
		{"big attr", func() error { _, err := host.ReadAttr(bigAttr); return err }, host.ErrTooLarge},
		{"missing", func() error { _, err := host.ReadAttr(filepath.Join(dir, "none")); return err }, os.ErrNotExist},
		// Host.ReadString reads the real file system without ReadAttr's copy.
		{"fifo string", func() error { _, err := host.New(dir).ReadString("fifo"); return err }, host.ErrNotRegular},
		{"directory string", func() error { _, err := host.New("/").ReadString(strings.TrimPrefix(dir, "/")); return err }, host.ErrNotRegular},
		{"big string", func() error { _, err := host.New(dir).ReadString("bigattr"); return err }, host.ErrTooLarge},
		{"missing string", func() error { _, err := host.New(dir).ReadString("none"); return err }, os.ErrNotExist},
		// AttrDir reads relative to a directory it opened once.
		{"fifo in dir", func() error { return readInDir(dir, "fifo") }, host.ErrNotRegular},
		{"big in dir", func() error { return readInDir(dir, "bigattr") }, host.ErrTooLarge},
		{"missing in dir", func() error { return readInDir(dir, "none") }, os.ErrNotExist},
		{"directory in dir", func() error { return readInDir(filepath.Dir(dir), filepath.Base(dir)) }, host.ErrNotRegular},
	}
	for _, c := range cases {
		done := make(chan error, 1)
		go func() { done <- c.read() }()
		select {
		case err := <-done:
			if !errors.Is(err, c.want) {
				t.Errorf("%s: err = %v, want %v", c.name, err, c.want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: the read blocked", c.name)
		}
	}
}

// ReadString trims the attribute's trailing newlines, whichever reader it
// takes: the real file system's or a substituted AttrIO's.
func TestReadStringTrimsNewlines(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "tos"), []byte("106\n\n"), 0o644)
	for _, h := range []*host.Host{host.New(dir), host.NewWithIO(dir, copyingIO{})} {
		if s, err := h.ReadString("tos"); s != "106" || err != nil {
			t.Errorf("ReadString = %q, %v; want \"106\"", s, err)
		}
	}
}

// copyingIO is the real AttrIO behind another type, so Host takes the
// interface's way.
type copyingIO struct{ host.OSAttrIO }

func TestReadFileLimitReadsFilesWithoutASize(t *testing.T) {
	// /proc files report size 0 and must still be read whole.
	b, err := host.ReadConfigFile("/proc/self/status")
	if err != nil || !strings.Contains(string(b), "Name:") {
		t.Fatalf("read /proc/self/status: %q, %v", b, err)
	}
	dir := t.TempDir()
	want := strings.Repeat("line of a list\n", 10000) // larger than one read
	os.WriteFile(filepath.Join(dir, "f"), []byte(want), 0o644)
	b, err = host.ReadConfigFile(filepath.Join(dir, "f"))
	if err != nil || string(b) != want {
		t.Fatalf("read %d bytes, %v; want %d", len(b), err, len(want))
	}
}

// A FIFO where a device directory or an attribute should be does not block
// a device read.
func TestDeviceReadWithFIFOs(t *testing.T) {
	root := hosttest.Copy(t, "mlx5")
	attr := filepath.Join(root, host.ClassInfiniband, "mlx5_0", "fw_ver")
	os.Remove(attr)
	syscall.Mkfifo(attr, 0o644)
	tos := filepath.Join(root, host.ConfigfsPortPath("mlx5_0", 1, "default_roce_tos"))
	os.Remove(tos)
	syscall.Mkfifo(tos, 0o644)
	done := make(chan struct{})
	var d host.Device
	var err error
	go func() { d, err = host.New(root).Device("mlx5_0"); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("reading a device with FIFO attributes blocked")
	}
	if err != nil || d.FWVersion != "" {
		t.Errorf("device %+v, %v", d, err)
	}
	names, err := host.ReadDirNames(attr)
	if err == nil {
		t.Errorf("listing a FIFO as a directory gave %v", names)
	}
}
