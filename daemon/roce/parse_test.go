package roce

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
)

// FuzzParse: the kernel's texts become typed values where they are read:
// a TOS is exactly an integer 0..255 (spaces trimmed), a mode one of the
// two modes or the trimmed text kept for display.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"106\n", "0", "255", "256", "-1", " 7 ", "RoCE v2\n", "IB/RoCE v1", "RoCE v1", "", "\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tos, err := parseTOS(s)
		v, aerr := strconv.Atoi(strings.TrimSpace(s))
		if want := aerr == nil && v >= 0 && v <= 255; (err == nil) != want || (want && int(tos) != v) {
			t.Fatalf("parseTOS(%q) = %d, %v", s, tos, err)
		}
		m := parseMode(s)
		switch k := strings.TrimSpace(s); k {
		case config.RoCEv1.Kernel(), config.RoCEv2.Kernel():
			if m.String() != k || m.Other != "" {
				t.Fatalf("parseMode(%q) = %+v", s, m)
			}
		default:
			if m.Mode != "" || m.String() != k {
				t.Fatalf("parseMode(%q) = %+v", s, m)
			}
		}
	})
}

// A FIFO where default_roce_tos should be reads as unknown at once: the
// part's read is bounded like every host read.
func TestFIFOAttributeDoesNotBlock(t *testing.T) {
	root := hosttest.Copy(t, "mlx5")
	tos := filepath.Join(root, host.ConfigfsPortPath("mlx5_0", 1, tosFile))
	os.Remove(tos)
	if err := syscall.Mkfifo(tos, 0o644); err != nil {
		t.Skip(err)
	}
	p := &Part{Host: host.New(root)}
	done := make(chan error, 1)
	go func() { _, err := p.readTOS(p.cm("mlx5_0"), 1); done <- err }()
	select {
	case err := <-done:
		if err == nil {
			t.Error("a FIFO read as a TOS")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("reading a FIFO default_roce_tos blocked")
	}
}
