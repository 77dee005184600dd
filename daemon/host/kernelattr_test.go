package host_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rdmad/rdmad/daemon/host"
)

// modifies counts the IN_MODIFY events on dir while fn runs.
func modifies(t *testing.T, dir string, fn func()) int {
	t.Helper()
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		t.Skipf("inotify: %v", err)
	}
	defer unix.Close(fd)
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_MODIFY); err != nil {
		t.Fatal(err)
	}
	fn()
	time.Sleep(10 * time.Millisecond)
	buf := make([]byte, 4096)
	n, err := unix.Read(fd, buf)
	if err == unix.EAGAIN {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	count := 0
	for off := 0; off < n; {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
		count++
		off += unix.SizeofInotifyEvent + int(ev.Len)
	}
	return count
}

// A kernel attribute written without truncating: no change notification
// comes of the open itself (an O_TRUNC open is IN_MODIFY before any byte,
// also for a value the kernel then refuses), only of the write; a FIFO is
// refused.
func TestWriteKernelAttrDoesNotTruncate(t *testing.T) {
	dir := t.TempDir()
	name := filepath.Join(dir, "default_roce_tos")
	if err := os.WriteFile(name, []byte("106\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if n := modifies(t, dir, func() { _ = host.WriteAttr(name, nil) }); n != 1 {
		t.Fatalf("an O_TRUNC write of nothing made %d IN_MODIFY, want 1: the test cannot tell the two apart", n)
	}
	if err := os.WriteFile(name, []byte("106\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if n := modifies(t, dir, func() {
		if err := host.WriteKernelAttr(name, nil); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("writing nothing in place made %d IN_MODIFY", n)
	}
	if n := modifies(t, dir, func() {
		if err := host.WriteKernelAttr(name, []byte("72")); err != nil {
			t.Fatal(err)
		}
	}); n != 1 {
		t.Errorf("a write in place made %d IN_MODIFY, want 1", n)
	}
	if b, _ := os.ReadFile(name); string(b) != "726\n" {
		t.Errorf("a plain file after a write in place: %q (the tail is kept)", b)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := host.WriteKernelAttr(fifo, []byte("1")); err == nil {
		t.Error("a FIFO was written")
	}
}
