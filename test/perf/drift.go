package perf

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdmad/rdmad/daemon/host"
)

// FloorVerify reads what a verify read-back of the benchmark policy must
// read (each port's mode and TOS in configfs; the link layer is known
// from the device's last read) with bare open/fstat/read/close system
// calls: the fstat is the file-type check every read of a host file makes
// (a FIFO or a device must not wedge the daemon), so no compliant read is
// cheaper.
func (h *Host) FloorVerify() error {
	var buf [64]byte
	for i := 0; i < h.N; i++ {
		dev := fmt.Sprintf("mlx5_%d", i)
		for port := 1; port <= 2; port++ {
			for _, rel := range []string{
				host.ConfigfsPortPath(dev, port, "default_roce_mode"),
				host.ConfigfsPortPath(dev, port, "default_roce_tos"),
			} {
				fd, err := unix.Open(h.path(rel), unix.O_RDONLY, 0)
				if err != nil {
					return err
				}
				var st unix.Stat_t
				if err = unix.Fstat(fd, &st); err == nil {
					_, err = unix.Read(fd, buf[:])
				}
				unix.Close(fd)
				if err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// MakeInfiniBand turns every port of the host into an InfiniBand port
// (and Reset no longer restores Ethernet): the host whose port states
// rdmad polls every 10 s. RoCE rules do not apply to its ports.
func (h *Host) MakeInfiniBand() error {
	for _, tree := range []string{h.Root, h.clean} {
		for i := 0; i < h.N; i++ {
			for port := 1; port <= 2; port++ {
				p := filepath.Join(tree, fmt.Sprintf("sys/class/infiniband/mlx5_%d/ports/%d/link_layer", i, port))
				if err := os.WriteFile(p, []byte("InfiniBand\n"), 0o644); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// Running is the rdmad binary running as a daemon on a host.
type Running struct {
	Cmd  *exec.Cmd
	host *Host
}

// StartBinary starts the rdmad binary as a daemon on h and the bus at
// addr, and returns once its first pass holds the benchmark policy on
// every port (or, when ib is set, once it has run 2 s: IB ports take no
// RoCE setting).
func StartBinary(bin, addr string, h *Host, ib bool) (*Running, error) {
	cmd := exec.Command(bin, "--root", h.Root, "--bus", addr)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	r := &Running{Cmd: cmd, host: h}
	if ib {
		time.Sleep(2 * time.Second)
		return r, nil
	}
	deadline := time.Now().Add(60 * time.Second)
	for h.Verify() != nil {
		if time.Now().After(deadline) {
			r.Stop()
			return nil, fmt.Errorf("rdmad did not apply the policy within 60 s: %w", h.Verify())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return r, nil
}

// Stop kills the daemon.
func (r *Running) Stop() {
	r.Cmd.Process.Kill()
	r.Cmd.Wait()
}

// CPU is the daemon's user plus system time so far.
func (r *Running) CPU() (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", r.Cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	// The fields after the command name, which is in parentheses.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("short /proc/%d/stat", r.Cmd.Process.Pid)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: utime %q stime %q", r.Cmd.Process.Pid, f[11], f[12])
	}
	const clkTck = 100 // USER_HZ on Linux
	return time.Duration(utime+stime) * time.Second / clkTck, nil
}

// Idle is the daemon's CPU time over d while nothing happens, as a share
// of one core.
func (r *Running) Idle(d time.Duration) (float64, error) {
	c0, err := r.CPU()
	if err != nil {
		return 0, err
	}
	time.Sleep(d)
	c1, err := r.CPU()
	if err != nil {
		return 0, err
	}
	return float64(c1-c0) / float64(d), nil
}

// Correct writes 0 to the TOS of a port, as another process would, and
// returns how long until the daemon has put the declared 106 back.
func (r *Running) Correct(dev string, port int) (time.Duration, error) {
	p := r.host.path(host.ConfigfsPortPath(dev, port, "default_roce_tos"))
	if err := os.WriteFile(p, []byte("0\n"), 0o644); err != nil {
		return 0, err
	}
	t0 := time.Now()
	for {
		b, err := os.ReadFile(p)
		if err != nil {
			return 0, err
		}
		if strings.TrimSpace(string(b)) == "106" {
			return time.Since(t0), nil
		}
		if time.Since(t0) > 10*time.Second {
			return 0, fmt.Errorf("%s/%d: TOS %q 10 s after another process wrote 0", dev, port, bytes.TrimSpace(b))
		}
		time.Sleep(time.Millisecond)
	}
}
