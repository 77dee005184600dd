package doctor

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/rdmad/rdmad/daemon/host"
)

func TestBoundedReads(t *testing.T) {
	root := t.TempDir()
	h := host.New(root)
	write := func(rel, data string) {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a", "12345")
	if b, err := boundedRead(h, "a", 5); err != nil || string(b) != "12345" {
		t.Errorf("at the cap: %q, %v", b, err)
	}
	if _, err := boundedRead(h, "a", 4); !errors.Is(err, host.ErrTooLarge) {
		t.Errorf("over the cap: %v", err)
	}
	if err := syscall.Mkfifo(filepath.Join(root, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := boundedRead(h, "fifo", 5); !errors.Is(err, host.ErrNotRegular) {
		t.Errorf("FIFO: %v", err)
	}
	if err := boundedLines(h, "fifo", 5, func(string) bool { return true }); !errors.Is(err, host.ErrNotRegular) {
		t.Errorf("FIFO lines: %v", err)
	}
	if _, err := boundedRead(h, ".", 5); !errors.Is(err, host.ErrNotRegular) {
		t.Errorf("directory: %v", err)
	}
	// A file of known size over the cap yields no line at all.
	write("conf", "line1\nline2\n")
	n := 0
	if err := boundedLines(h, "conf", 8, func(string) bool { n++; return true }); !errors.Is(err, host.ErrTooLarge) || n != 0 {
		t.Errorf("oversized config: %d lines, %v", n, err)
	}
	// A procfs file, whose size reads as 0, is read to its end and capped too.
	n = 0
	err := boundedLines(host.New("/"), "proc/self/maps", 64, func(string) bool { n++; return true })
	if !errors.Is(err, host.ErrTooLarge) || n != 0 {
		t.Errorf("procfs over the cap: %d lines, %v", n, err)
	}
	if err := boundedLines(host.New("/"), "proc/self/maps", capIndex, func(string) bool { n++; return true }); err != nil || n == 0 {
		t.Errorf("procfs within the cap: %d lines, %v", n, err)
	}
	// An absolute link is followed inside the root, not on this machine.
	write("usr/lib/x.conf", "inside")
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/usr/lib/x.conf", filepath.Join(root, "etc/x.conf")); err != nil {
		t.Fatal(err)
	}
	if b, err := boundedRead(h, "etc/x.conf", 100); err != nil || string(b) != "inside" {
		t.Errorf("absolute link: %q, %v", b, err)
	}
}
