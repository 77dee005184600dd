package service_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/rdmad/rdmad/daemon/compose"
	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/daemon/service"
	"github.com/rdmad/rdmad/dbusapi"
)

// FuzzSetRoCE calls SetRoCE as the bus does, with any arguments, on one
// long-lived service (state carries over from call to call, as in the
// daemon). A call either fails with an ArgError naming one of its
// arguments, in a message of bounded size, before anything is written, or
// succeeds and the kernel holds exactly the requested values.
func FuzzSetRoCE(f *testing.F) {
	root := f.TempDir()
	if err := hosttest.CopyTree(hosttest.FixtureDir("mlx5"), root); err != nil {
		f.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "etc/rdma"), 0o755); err != nil {
		f.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, mainFile), []byte("[modules]\nenable = false\n[[roce]]\ndevice = \"*\"\ntos = 5\n"), 0o644); err != nil {
		f.Fatal(err)
	}
	k := hosttest.NewKernel(root)
	svc, err := service.New(service.Options{Host: k.Host(), Parts: compose.Parts(compose.Kernel{Modules: &hosttest.Modprobe{}}),
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		f.Fatal(err)
	}
	ctx := context.Background()
	svc.ReconcileNow(ctx)
	dropIn := filepath.Join(root, config.DropInDir, config.PersistedName)

	f.Add("mlx5_0", uint32(1), "v2", int32(106), false)
	f.Add("mlx5_1", uint32(0), "v1", int32(-1), true)
	f.Add("mlx5_0", uint32(0), "", int32(0), true)
	f.Add("mlx5_*", uint32(1), "v2", int32(-1), false)
	f.Add("../mlx5_0", uint32(1), "RoCE v2", int32(256), false)
	f.Add("mlx5_0", uint32(2), "v3", int32(-2), false)
	f.Add("", uint32(4294967295), "", int32(-1), false)
	var history []string // the calls before this one: the state they left matters
	f.Fuzz(func(t *testing.T, device string, port uint32, mode string, tos int32, persist bool) {
		if port > dbusapi.MaxPort {
			return // the bus refuses it before the service
		}
		call := fmt.Sprintf("SetRoCE(%.30q, %d, %.10q, %d, %v)", device, port, mode, tos, persist)
		defer func() {
			if t.Failed() {
				t.Logf("after %d calls, the last ones:\n%s\noverlay %+v\ndrop-in:\n%s", len(history), strings.Join(history[max(0, len(history)-20):], "\n"), svc.RuntimeOverlay(), readFile(dropIn))
			}
			history = append(history, call)
		}()
		writes := k.WriteCount()
		before, _ := os.ReadFile(dropIn)
		err := svc.SetRoCE(ctx, service.RoCEChange{Device: device, Port: int(port), Mode: config.RoCEMode(mode), TOS: int(tos), Persist: persist})
		var ae *service.ArgError
		var nf *service.NotFoundError
		switch {
		case errors.As(err, &ae), errors.As(err, &nf):
			arg := ""
			if ae != nil {
				arg = ae.Arg
			} else {
				arg = nf.Arg
			}
			switch arg {
			case "device", "port", "mode", "tos":
			default:
				t.Fatalf("argument error on unknown argument %q: %v", arg, err)
			}
			if len(err.Error()) > 400 {
				t.Fatalf("error message of %d bytes", len(err.Error()))
			}
			if k.WriteCount() != writes {
				t.Fatalf("a refused call wrote to configfs: %v", err)
			}
			if after, _ := os.ReadFile(dropIn); string(after) != string(before) {
				t.Fatalf("a refused call changed rdmad's drop-in: %v", err)
			}
		case err != nil:
			t.Fatalf("%s = %v; the fixture kernel refuses nothing", call, err)
		default:
			ports := []int{int(port)}
			if port == 0 {
				ports = []int{1}
			}
			for _, p := range ports {
				if tos >= 0 {
					if got := hosttest.Read(t, root, host.ConfigfsPortPath(device, p, "default_roce_tos")); got != strconv.Itoa(int(tos)) {
						t.Fatalf("after SetRoCE tos %d: configfs %q", tos, got)
					}
				}
				if mode != "" {
					if got := hosttest.Read(t, root, host.ConfigfsPortPath(device, p, "default_roce_mode")); got != config.RoCEMode(mode).Kernel() {
						t.Fatalf("after SetRoCE mode %q: configfs %q", mode, got)
					}
				}
			}
		}
	})
}

func readFile(name string) string {
	b, err := os.ReadFile(name)
	if err != nil {
		return err.Error()
	}
	return string(b)
}
