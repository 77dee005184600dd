package service_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rdmad/rdmad/daemon/compose"
	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/config/value"
	"github.com/rdmad/rdmad/daemon/dcb/dcbtest"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/daemon/links/linkstest"
	"github.com/rdmad/rdmad/daemon/service"
)

// hostileName is what a VF driver or a container's `rdma dev set ... name`
// may give a device: the kernel refuses only '/' (and more than 63 bytes),
// so bytes that are not UTF-8, white space, a newline, glob and shell
// characters and dots all pass.
const hostileName = "vf\xff \n*[..]$x"

// A device with a hostile name is configured at exactly its own configfs
// directory (nothing is created elsewhere), and a runtime rule for it
// matches it alone, its glob characters taken literally.
func TestHostileDeviceNameStaysInItsConfigfsDirectory(t *testing.T) {
	e := newEnv(t, "\n[[roce]]\ndevice = \"*\"\ntos = 9\n", func(e *env) {
		hosttest.RenameDevice(t, e.root, "mlx5_1", hostileName)
	})
	if !strings.Contains(strings.Join(e.k.Mkdirs, "|"), host.ConfigfsRdmaCM+"/"+hostileName) || len(e.k.Mkdirs) != 1 {
		t.Errorf("configfs mkdirs %q, want only rdma_cm/<the name>", e.k.Mkdirs)
	}
	if got := e.port(t, hostileName, 1, "default_roce_tos"); got != "9" {
		t.Errorf("hostile device tos = %q", got)
	}
	ents, _ := os.ReadDir(filepath.Join(e.root, host.ConfigfsRdmaCM))
	if len(ents) != 2 {
		t.Errorf("rdma_cm holds %d entries, want mlx5_0 and the renamed device", len(ents))
	}
	if err := e.svc.SetRoCE(context.Background(), service.RoCEChange{Device: hostileName, TOS: 11}); err != nil {
		t.Fatalf("SetRoCE on the hostile name: %v", err)
	}
	if got := e.port(t, hostileName, 1, "default_roce_tos"); got != "11" {
		t.Errorf("hostile device tos after SetRoCE = %q", got)
	}
	if got := e.port(t, "mlx5_0", 1, "default_roce_tos"); got != "9" {
		t.Errorf("the runtime rule for %q also changed mlx5_0: tos %q", hostileName, got)
	}
}

// Names no device can have, from a uevent or a call: looked up nowhere,
// and no state (no D-Bus object) is made up for them.
func TestImpossibleDeviceNamesCreateNoState(t *testing.T) {
	e := newEnv(t, "", nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { _ = e.svc.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	names := []string{
		strings.Repeat("x", 64), strings.Repeat("y", 300), strings.Repeat("z", 5000),
		"..", ".", "../mlx5_0", "mlx5_0/ports", "a\x00b", "", "\xff\xfe",
	}
	for _, n := range names {
		e.svc.RequestDevice(n)
	}
	if err := e.svc.Idle(ctx); err != nil {
		t.Fatal(err)
	}
	if got := e.svc.Reconciler().Summary().Devices; strings.Join(got, ",") != "mlx5_0,mlx5_1" {
		for i := range got {
			got[i] = value.Quote(got[i])
		}
		t.Errorf("devices after impossible names: %s", strings.Join(got, ", "))
	}
	for _, n := range names {
		err := e.svc.SetRoCE(ctx, service.RoCEChange{Device: n, TOS: 5})
		var ae *service.ArgError
		var nf *service.NotFoundError // a name the kernel allows, of no device
		if !(errors.As(err, &ae) && ae.Arg == "device") && !(errors.As(err, &nf) && nf.What == service.MissingDevice) {
			t.Errorf("SetRoCE(%.20q): %v, want an ArgError or a NotFoundError on device", n, err)
			continue
		}
		if len(err.Error()) > 200 {
			t.Errorf("SetRoCE(%.20q): error of %d bytes echoes the whole name", n, len(err.Error()))
		}
	}
	for _, tc := range []struct {
		link config.Link
		arg  string
	}{
		{config.Link{Name: strings.Repeat("r", 64), Type: config.LinkRXE, Netdev: "eth1"}, "name"},
		{config.Link{Name: "rxe0", Type: config.LinkRXE, Netdev: strings.Repeat("e", 16)}, "netdev"},
		{config.Link{Name: "../rxe0", Type: config.LinkRXE, Netdev: "eth1"}, "name"},
		{config.Link{Name: "rxe0", Type: config.LinkRXE, Netdev: "../eth1"}, "netdev"},
	} {
		err := e.svc.AddLink(ctx, tc.link, false)
		var ae *service.ArgError
		if !errors.As(err, &ae) || ae.Arg != tc.arg {
			t.Errorf("AddLink(%.20q, %.20q): %v, want an ArgError on %s", tc.link.Name, tc.link.Netdev, err, tc.arg)
		}
	}
	err := e.svc.DeleteLink(ctx, strings.Repeat("d", 100000), false)
	var ae *service.ArgError
	if !errors.As(err, &ae) || ae.Arg != "name" || len(err.Error()) > 200 {
		t.Errorf("DeleteLink(100000 bytes): %.300v", err)
	}
}

// Callers cannot grow the runtime overlay without bound: repeated calls
// replace, and past the limit a runtime change is refused while persisted
// ones still work.
func TestRuntimeOverlayIsBounded(t *testing.T) {
	root := hosttest.Copy(t, "mlx5")
	hosttest.Write(t, root, mainFile, "[modules]\nenable = false\n")
	k := hosttest.NewKernel(root)
	svc, err := service.New(service.Options{Host: k.Host(), Parts: compose.Parts(compose.Kernel{Modules: &hosttest.Modprobe{}}), MaxRuntimeEntries: 2,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	svc.ReconcileNow(ctx)
	for i := 0; i < 200; i++ {
		if err := svc.SetRoCE(ctx, service.RoCEChange{Device: "mlx5_0", Port: i % 2, TOS: i % 256, Mode: []config.RoCEMode{"", config.RoCEv1}[i%2]}); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if n := len(svc.RuntimeOverlay().RoCE); n > 2 {
		t.Fatalf("200 calls on one device left %d runtime rules", n)
	}
	if err := svc.SetRoCE(ctx, service.RoCEChange{Device: "mlx5_1", TOS: 3}); err == nil || !strings.Contains(err.Error(), "at most 2 runtime") {
		t.Fatalf("a third runtime rule: %v, want refused", err)
	}
	if got := hosttest.Read(t, root, host.ConfigfsPortPath("mlx5_1", 1, "default_roce_tos")); got == "3" {
		t.Error("the refused runtime change reached the kernel")
	}
	if err := svc.SetRoCE(ctx, service.RoCEChange{Device: "mlx5_1", TOS: 3, Persist: true}); err != nil {
		t.Fatalf("persisting past the runtime limit: %v", err)
	}
	if got := hosttest.Read(t, root, host.ConfigfsPortPath("mlx5_1", 1, "default_roce_tos")); got != "3" {
		t.Errorf("persisted tos = %s", got)
	}
}

// The runtime overlay's QoS rules and links are bounded each on its own,
// as its RoCE rules are: one kind at its bound refuses a runtime change of
// that kind, whatever the others hold.
func TestRuntimeQoSAndLinksAreBoundedEachOnItsOwn(t *testing.T) {
	root := hosttest.Copy(t, "mlx5")
	hosttest.Write(t, root, mainFile, "[modules]\nenable = false\n")
	h := hosttest.NewKernel(root).Host()
	for _, n := range []string{"eth1", "eth2"} {
		if err := linkstest.AddNetdev(h, n); err != nil {
			t.Fatal(err)
		}
	}
	k := dcbtest.New()
	k.Add("ens1f0np0")
	k.Add("ens1f1np1")
	kernel := compose.Kernel{Modules: &hosttest.Modprobe{}, DCB: k.Kernel(), Links: &linkstest.Netlink{Host: h}}
	svc, err := service.New(service.Options{Host: h, Parts: compose.Parts(kernel), MaxRuntimeEntries: 1, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	svc.ReconcileNow(ctx)
	refused := func(what string, err error) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), "at most 1 runtime") {
			t.Errorf("%s past the bound: %v, want refused", what, err)
		}
	}
	if err := svc.SetQoS(ctx, service.QoSChange{Device: "mlx5_0", Port: 1, Trust: config.TrustDSCP}); err != nil {
		t.Fatalf("the first runtime QoS rule: %v", err)
	}
	refused("a second runtime QoS rule", svc.SetQoS(ctx, service.QoSChange{Device: "mlx5_1", Port: 1, Trust: config.TrustPCP}))
	if err := svc.AddLink(ctx, config.Link{Name: "rxe0", Type: config.LinkRXE, Netdev: "eth1"}, false); err != nil {
		t.Fatalf("the first runtime link: %v", err)
	}
	refused("a second runtime link", svc.AddLink(ctx, config.Link{Name: "rxe1", Type: config.LinkRXE, Netdev: "eth2"}, false))
	if ov := svc.RuntimeOverlay(); len(ov.QoS) != 1 || len(ov.Links) != 1 {
		t.Errorf("runtime overlay after the refusals: %d QoS rules, %d links; want 1 each", len(ov.QoS), len(ov.Links))
	}
}
