package main_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/dbusapi"
	"github.com/rdmad/rdmad/dbusapi/client"
)

// These run the real binaries, so they also run against another build
// (RDMAD_TEST_BINDIR): each one fails on rdmad before the bounded reader,
// the published-string sanitiser and the signature check (8d99cd8).

// runBounded runs rdmad and kills it if it has not ended within limit.
func runBounded(t *testing.T, env []string, limit time.Duration, args ...string) (out string, code int, hung bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, rdmadBin, args...)
	cmd.Env = env
	b, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		return string(b), -1, true
	}
	if ee, ok := err.(*exec.ExitError); ok {
		return string(b), ee.ExitCode(), false
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(b), 0, false
}

// A FIFO, a character device or a huge file where rdmad expects a regular
// file (a drop-in, a modules list, a configfs attribute) is an error that
// names it, at once: `rdmad --once` used to hang on it forever, or read an
// endless device until memory ran out.
func TestFilesThatAreNotFilesDoNotWedgeRdmad(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, root string) string // returns the path the error must name
	}{
		{"FIFO drop-in", func(t *testing.T, root string) string {
			p := filepath.Join(root, "etc/rdma/rdmad.d/60-fifo.toml")
			if err := syscall.Mkfifo(p, 0o644); err != nil {
				t.Fatal(err)
			}
			return "60-fifo.toml"
		}},
		{"drop-in linked to /dev/zero", func(t *testing.T, root string) string {
			if err := os.Symlink("/dev/zero", filepath.Join(root, "etc/rdma/rdmad.d/60-zero.toml")); err != nil {
				t.Fatal(err)
			}
			return "60-zero.toml"
		}},
		{"huge drop-in", func(t *testing.T, root string) string {
			hosttest.Write(t, root, "etc/rdma/rdmad.d/60-huge.toml", "# "+strings.Repeat("x", 4<<20)+"\n")
			return "60-huge.toml"
		}},
		{"FIFO modules list", func(t *testing.T, root string) string {
			p := filepath.Join(root, "etc/rdma/modules/rdma.conf")
			os.Remove(p)
			if err := syscall.Mkfifo(p, 0o644); err != nil {
				t.Fatal(err)
			}
			return "rdma.conf"
		}},
		{"FIFO configfs attribute", func(t *testing.T, root string) string {
			p := filepath.Join(root, host.ConfigfsPortPath("mlx5_0", 1, "default_roce_tos"))
			os.Remove(p)
			if err := syscall.Mkfifo(p, 0o644); err != nil {
				t.Fatal(err)
			}
			return "mlx5_0"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, env, _ := demoHost(t)
			names := tc.setup(t, root)
			out, code, hung := runBounded(t, env, 15*time.Second, "--root", root, "--once")
			if hung {
				t.Fatalf("rdmad --once hung (killed after 15s):\n%.2000s", out)
			}
			if code != 1 || !strings.Contains(out, names) {
				t.Errorf("exit %d, want 1 with an error naming %s:\n%.2000s", code, names, out)
			}
		})
	}
}

// A FIFO dropped into rdmad.d while rdmad runs makes that reload fail with
// an error naming it; rdmad keeps answering, and once the FIFO is gone the
// next reload works. It used to wedge every later call, for good.
func TestFIFODroppedInWhileRunning(t *testing.T) {
	root, env, _ := demoHost(t)
	addr := privateBus(t)
	p := startRdmad(t, env, "--root", root, "--bus", addr)
	ctl := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, rdmactlBin, append([]string{"--bus", addr}, args...)...).CombinedOutput()
		if ctx.Err() != nil {
			t.Fatalf("rdmactl %v did not answer within 15s: rdmad is wedged", args)
		}
		return string(out), err
	}
	waitFor(t, p, "rdmad answers on the bus", func() bool { _, err := ctl("status"); return err == nil })
	fifo := filepath.Join(root, "etc/rdma/rdmad.d/60-fifo.toml")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := ctl("reload")
	if err == nil || !strings.Contains(out, "60-fifo.toml") {
		t.Errorf("reload with a FIFO drop-in: %v\n%s", err, out)
	}
	if _, err := ctl("status"); err != nil {
		t.Errorf("status after the FIFO: %v", err)
	}
	os.Remove(fifo)
	if out, err := ctl("reload"); err != nil {
		t.Errorf("reload after the FIFO was removed: %v\n%s", err, out)
	}
}

// A byte that is not UTF-8, or a NUL, in what rdmad reads from the host (a
// firmware version, a rate, a drop-in's file name) is published escaped:
// GetManagedObjects, Describe and rdmactl keep working for every client.
func TestBytesThatAreNotUTF8KeepEveryReaderWorking(t *testing.T) {
	root, env, _ := demoHost(t)
	hosttest.Write(t, root, "sys/class/infiniband/mlx5_0/fw_ver", "16.35\xff\n")
	hosttest.Write(t, root, "sys/class/infiniband/mlx5_0/ports/1/rate", "100 Gb/sec\x00(4X)\n")
	hosttest.Write(t, root, "etc/rdma/rdmad.d/70-\xfe.toml", "[[roce]]\ndevice = \"rxe0\"\ntos = 9\n")
	addr := privateBus(t)
	p := startRdmad(t, env, "--root", root, "--bus", addr)
	waitFor(t, p, "rdmad owns its name", func() bool {
		return exec.Command("busctl", "--address="+addr, "status", dbusapi.BusName).Run() == nil ||
			exec.Command(rdmactlBin, "--bus", addr, "-o", "json", "status").Run() == nil
	})
	c, err := client.Connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	snap, err := c.Snapshot(ctx)
	if err != nil {
		t.Fatalf("GetManagedObjects/GetAll with a non-UTF-8 byte on the host: %v", err)
	}
	if d := snap.Device("mlx5_0"); d == nil || d.FirmwareVersion != `16.35\xff` {
		t.Errorf("FirmwareVersion published as %+v", d)
	}
	if doc, err := c.Describe(ctx); err != nil || !json.Valid([]byte(doc)) {
		t.Errorf("Describe: %v", err)
	}
	for _, args := range [][]string{{"status"}, {"-o", "json", "status"}, {"device", "show", "mlx5_0"}} {
		if out, err := exec.Command(rdmactlBin, append([]string{"--bus", addr}, args...)...).CombinedOutput(); err != nil {
			t.Errorf("rdmactl %v: %v\n%s", args, err, out)
		}
	}
}

// A call whose arguments differ from the contract's signature is refused
// with InvalidArgs before anything happens: a 64-bit port of 2^32+1 used
// to be narrowed to port 1 and applied. Names longer than the kernel
// allows are InvalidArgs naming the argument.
func TestCallsOutsideTheContractChangeNothing(t *testing.T) {
	root, env, _ := demoHost(t)
	addr := privateBus(t)
	p := startRdmad(t, env, "--root", root, "--bus", addr)
	waitFor(t, p, "rdmad answers on the bus", func() bool {
		return exec.Command(rdmactlBin, "--bus", addr, "status").Run() == nil
	})
	time.Sleep(300 * time.Millisecond) // background module loads end
	before := snapshot(t, root)
	c, err := client.Connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	obj := c.Conn().Object(dbusapi.BusName, dbusapi.RootPath)
	for _, tc := range []struct {
		method string
		args   []any
		arg    string // "" for a signature refusal
	}{
		{"SetRoCE", []any{"mlx5_0", uint64(1<<32 + 1), "v1", int32(9), false}, ""},
		{"SetRoCE", []any{"mlx5_0", uint32(1), "v1", int64(1<<32 + 9), false}, ""},
		{"SetRoCE", []any{strings.Repeat("m", 64), uint32(1), "v1", int32(9), false}, "device"},
		{"SetRoCE", []any{strings.Repeat("m", 4096), uint32(1), "v1", int32(9), false}, "device"},
		{"AddLink", []any{strings.Repeat("r", 64), "rxe", "ens1f0np0", false}, "name"},
		{"AddLink", []any{"rxe9", "rxe", strings.Repeat("e", 16), false}, "netdev"},
	} {
		err := obj.Call(dbusapi.ManagerIface+"."+tc.method, 0, tc.args...).Err
		if client.ErrorName(err) != dbusapi.ErrInvalidArgs {
			t.Errorf("%s%.60v: %v, want InvalidArgs", tc.method, tc.args, err)
			continue
		}
		if tc.arg != "" && !strings.Contains(client.ErrorMessage(err), "argument "+tc.arg+":") {
			t.Errorf("%s: %.200q does not name argument %s", tc.method, client.ErrorMessage(err), tc.arg)
		}
	}
	if out, err := exec.Command(rdmactlBin, "--bus", addr, "roce", "set", "mlx5_0/4294967297", "--tos", "9").CombinedOutput(); err == nil {
		t.Errorf("rdmactl with port 2^32+1 succeeded:\n%s", out)
	}
	if after := snapshot(t, root); after != before {
		t.Error("calls outside the contract changed the host")
	}
}
