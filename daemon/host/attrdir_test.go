package host_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
)

// readInDir reads name through an AttrDir opened on dir.
func readInDir(dir, name string) error {
	h := host.New(filepath.Dir(dir))
	d, err := h.OpenAttrDir(filepath.Base(dir))
	if err != nil {
		return err
	}
	defer d.Close()
	var buf host.AttrBuf
	_, err = d.Read(host.NewAttrName(name), &buf)
	return err
}

// An AttrDir reads what ReadString reads, names the file in its errors,
// and reads a test's AttrIO (a kernel that answers EINVAL) when the host
// has one.
func TestAttrDirReads(t *testing.T) {
	root := hosttest.SynthRoot(t, 1)
	port := filepath.Join(root, "sys/class/infiniband/mlx5_0/ports/1")
	if err := os.WriteFile(filepath.Join(port, "counters/symbol_error"), []byte("42\n\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	h := host.New(root)
	d, err := h.OpenAttrDir(host.ClassInfiniband, "mlx5_0", "ports", "1")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var buf host.AttrBuf
	for name, want := range map[string]string{"counters/symbol_error": "42", "link_layer": "Ethernet", "hw_counters/lifespan": "10"} {
		got, err := d.Read(host.NewAttrName(name), &buf)
		if err != nil || string(got) != want {
			t.Errorf("%s: %q, %v; want %q", name, got, err, want)
		}
		if s, err := h.ReadString("sys/class/infiniband/mlx5_0/ports/1/" + name); err != nil || s != want {
			t.Errorf("ReadString %s: %q, %v", name, s, err)
		}
	}
	_, err = d.Read(host.NewAttrName("counters/none"), &buf)
	if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), filepath.Join(root, "sys/class/infiniband/mlx5_0/ports/1/counters/none")) {
		t.Errorf("missing: %v", err)
	}
	if _, err := h.OpenAttrDir(host.ClassInfiniband, "mlx5_9", "ports", "1"); !errors.Is(err, os.ErrNotExist) ||
		!strings.Contains(err.Error(), filepath.Join(root, "sys/class/infiniband/mlx5_9/ports/1")) {
		t.Errorf("missing directory: %v", err)
	}

	k := hosttest.NewKernel(root)
	k.FailReads("mlx5_0/ports/1/counters/symbol_error", syscall.EINVAL)
	kd, err := k.Host().OpenAttrDir(host.ClassInfiniband, "mlx5_0", "ports", "1")
	if err != nil {
		t.Fatal(err)
	}
	defer kd.Close()
	if _, err := kd.Read(host.NewAttrName("counters/symbol_error"), &buf); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("through the kernel's AttrIO: %v, want EINVAL", err)
	}
	if got, err := kd.Read(host.NewAttrName("link_layer"), &buf); err != nil || string(got) != "Ethernet" {
		t.Errorf("through the kernel's AttrIO: %q, %v", got, err)
	}
}

// Reading a port's counters costs no allocation: the health monitor reads
// 19 of them on each of thousands of ports every minute.
func TestAttrDirReadAllocatesNothing(t *testing.T) {
	root := hosttest.SynthRoot(t, 1)
	h := host.New(root)
	names := []host.AttrName{host.NewAttrName("counters/symbol_error"), host.NewAttrName("hw_counters/out_of_sequence")}
	var buf host.AttrBuf
	allocs := testing.AllocsPerRun(100, func() {
		d, err := h.OpenAttrDir(host.ClassInfiniband, "mlx5_0", "ports", "1")
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			if _, err := d.Read(n, &buf); err != nil {
				t.Fatal(err)
			}
		}
		d.Close()
	})
	if allocs != 0 {
		t.Errorf("%v allocations to open a port's directory and read two counters, want 0", allocs)
	}
}

// The zero AttrDir is not open: closing it closes no descriptor (0 is
// standard input), and a caller opens one at its first use.
func TestZeroAttrDirIsNotOpen(t *testing.T) {
	var d host.AttrDir
	before, err := syscall.Dup(0)
	if err != nil {
		t.Skip(err)
	}
	syscall.Close(before)
	d.Close()
	if d.Open() {
		t.Error("the zero AttrDir says it is open")
	}
	if after, err := syscall.Dup(0); err != nil {
		t.Errorf("descriptor 0 after closing the zero AttrDir: %v", err)
	} else {
		syscall.Close(after)
	}
}
