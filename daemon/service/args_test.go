package service_test

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/daemon/links/linkstest"
	"github.com/rdmad/rdmad/daemon/service"
)

// A device or port argument no device can have is refused as an invalid
// argument saying what is wrong with it (not merely that no device has
// that name or port): an empty name, a name longer than the kernel
// allows, a negative port, a name with a slash.
func TestImpossibleDeviceArgumentsSayWhatIsWrong(t *testing.T) {
	e := newEnv(t, "", nil)
	long := strings.Repeat("m", 64)
	for _, tc := range []struct {
		c        service.RoCEChange
		arg, msg string
	}{
		{service.RoCEChange{Device: "", TOS: 5}, "device", "empty device name"},
		{service.RoCEChange{Device: long, TOS: 5}, "device", `"` + long + `" is 64 bytes long; RDMA device names have at most 63`},
		{service.RoCEChange{Device: "mlx5_0", Port: -1, TOS: 5}, "port", "-1 is not a port number"},
		{service.RoCEChange{Device: "no/such", TOS: 5}, "device", `"no/such" cannot be an RDMA device name`},
	} {
		err := e.svc.CheckSetRoCE(tc.c)
		var ae *service.ArgError
		if !errors.As(err, &ae) || ae.Arg != tc.arg || ae.Msg != tc.msg {
			t.Errorf("CheckSetRoCE(%.20q port %d): %v, want invalid argument %s: %s", tc.c.Device, tc.c.Port, err, tc.arg, tc.msg)
		}
	}
}

// SetRoCE's mode and TOS apply to Ethernet ports: a named InfiniBand (or OPA) port
// is refused naming the port, a device with no Ethernet port naming the
// device, and a mixed VPI device's every port (0) is its Ethernet ones;
// a port the device does not have is NoSuchPort, listing the ports it has.
func TestSetRoCEArgumentsNeedAnEthernetPort(t *testing.T) {
	for _, tc := range []struct {
		fixture, device string
		port            int
		arg, msg        string // "": accepted
	}{
		{"mlx4", "mlx4_0", 0, "", ""}, // port 1 InfiniBand, port 2 Ethernet
		{"mlx4", "mlx4_0", 1, "port", "mlx4_0 port 1 is infiniband, not RoCE: mode and TOS apply to Ethernet ports"},
		{"mlx4", "mlx4_0", 2, "", ""},
		{"hfi1", "hfi1_0", 0, "port", "hfi1_0 port 1 is opa, not RoCE: mode and TOS apply to Ethernet ports"},
		{"ib-ready", "mlx4_0", 0, "device", "mlx4_0 has no RoCE (Ethernet) port"},
	} {
		e := newEnvOn(t, tc.fixture, "", nil)
		err := e.svc.CheckSetRoCE(service.RoCEChange{Device: tc.device, Port: tc.port, TOS: 5})
		var ae *service.ArgError
		switch {
		case tc.arg == "" && err != nil:
			t.Errorf("%s: %s port %d: %v, want it accepted", tc.fixture, tc.device, tc.port, err)
		case tc.arg != "" && (!errors.As(err, &ae) || ae.Arg != tc.arg || ae.Msg != tc.msg):
			t.Errorf("%s: %s port %d: %v, want invalid argument %s: %s", tc.fixture, tc.device, tc.port, err, tc.arg, tc.msg)
		}
	}
	e := newEnv(t, "", nil)
	err := e.svc.CheckSetRoCE(service.RoCEChange{Device: "mlx5_0", Port: 7, TOS: 5})
	var nf *service.NotFoundError
	if !errors.As(err, &nf) || nf.What != service.MissingPort || !strings.Contains(err.Error(), "mlx5_0 has no port 7 (ports: 1)") {
		t.Errorf("mlx5_0 port 7: %v, want NoSuchPort listing the device's ports", err)
	}
	// A device whose ports are gone (it is going away).
	e = newEnv(t, "", func(e *env) {
		if err := os.RemoveAll(filepath.Join(e.root, "sys/class/infiniband/mlx5_1/ports")); err != nil {
			t.Fatal(err)
		}
	})
	err = e.svc.CheckSetRoCE(service.RoCEChange{Device: "mlx5_1", Port: 1, TOS: 5})
	if !errors.As(err, &nf) || nf.What != service.MissingPort || !strings.Contains(err.Error(), "mlx5_1 has no port 1 (ports: none)") {
		t.Errorf("mlx5_1 without ports, port 1: %v, want NoSuchPort saying it has none", err)
	}
}

// A call's device is the one the last pass observed, not read again for
// each call: a device whose sysfs entry went away before its uevent is
// handled is still the device the pass knows (the pass that follows the
// call finds it gone), and a name no pass has seen is read now.
func TestCallsCheckTheDeviceAsLastObserved(t *testing.T) {
	e := newEnv(t, "", nil)
	if err := os.Remove(filepath.Join(e.root, "sys/class/infiniband/mlx5_0")); err != nil {
		t.Fatal(err)
	}
	if err := e.svc.CheckSetRoCE(service.RoCEChange{Device: "mlx5_0", Port: 1, TOS: 5}); err != nil {
		t.Errorf("mlx5_0 as last observed: %v", err)
	}
	var nf *service.NotFoundError
	if err := e.svc.CheckSetRoCE(service.RoCEChange{Device: "mlx5_7", Port: 1, TOS: 5}); !errors.As(err, &nf) || nf.What != service.MissingDevice {
		t.Errorf("mlx5_7, never observed: %v, want NoSuchDevice", err)
	}
	// A device that appeared since the last pass is read now: found, or
	// the read's error.
	class := filepath.Join(e.root, "sys/class/infiniband")
	target, err := os.Readlink(filepath.Join(class, "mlx5_1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(class, "mlx5_9")); err != nil {
		t.Fatal(err)
	}
	if err := e.svc.CheckSetRoCE(service.RoCEChange{Device: "mlx5_9", Port: 1, TOS: 5}); err != nil {
		t.Errorf("mlx5_9, not observed yet: %v", err)
	}
	// mlx5_8's ports are not a directory: the read fails.
	odd := filepath.Join(e.root, "sys/devices/virtual/infiniband/mlx5_8")
	if err := os.MkdirAll(odd, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(odd, "ports"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(odd, filepath.Join(class, "mlx5_8")); err != nil {
		t.Fatal(err)
	}
	var ae *service.ArgError
	if err := e.svc.CheckSetRoCE(service.RoCEChange{Device: "mlx5_8", Port: 1, TOS: 5}); err == nil || errors.As(err, &nf) || errors.As(err, &ae) ||
		!strings.Contains(err.Error(), "read device mlx5_8") || !errors.Is(err, syscall.ENOTDIR) {
		t.Errorf("mlx5_8 unreadable: %v, want the read's error", err)
	}
}

// AddLink's arguments against the host and the policy in force: its
// netdev must exist, hold no other link of its type (one per netdev, as
// the kernel allows; the link itself again is fine), its name be no other
// RDMA device's, and this rdmad must manage links at all. DeleteLink's
// link must be declared, and with persist the files must load to say
// who declares it; SetNetnsMode's mode must be one, and this rdmad
// manage the netns mode.
func TestLinkAndNetnsChecks(t *testing.T) {
	e := newEnv(t, "\n[[link]]\nname = \"rxe0\"\ntype = \"rxe\"\nnetdev = \"eth1\"\n", nil)
	var nf *service.NotFoundError
	if err := e.svc.CheckAddLink(config.Link{Name: "rxe9", Type: config.LinkRXE, Netdev: "nosuch0"}, false); !errors.As(err, &nf) || nf.What != service.MissingDevice || nf.Arg != "netdev" {
		t.Errorf("a netdev that does not exist: %v, want NoSuchDevice on netdev", err)
	}
	var ae *service.ArgError
	if err := e.svc.CheckAddLink(config.Link{Name: "rxe9", Type: config.LinkRXE, Netdev: "eth1"}, false); !errors.As(err, &ae) || ae.Arg != "netdev" ||
		!strings.Contains(ae.Msg, `eth1 already has rxe link "rxe0"`) {
		t.Errorf("a second rxe link on eth1: %v, want invalid argument netdev naming rxe0", err)
	}
	if err := e.svc.CheckAddLink(config.Link{Name: "rxe0", Type: config.LinkRXE, Netdev: "eth1"}, false); err != nil {
		t.Errorf("rxe0 on eth1 again: %v", err)
	}
	if err := e.svc.CheckAddLink(config.Link{Name: "siw9", Type: config.LinkSIW, Netdev: "eth1"}, false); err != nil {
		t.Errorf("a siw link beside eth1's rxe one: %v", err)
	}
	if err := e.svc.CheckAddLink(config.Link{Name: "mlx5_0", Type: config.LinkSIW, Netdev: "eth1"}, false); !errors.As(err, &ae) || ae.Arg != "name" ||
		!strings.Contains(ae.Msg, `an RDMA device "mlx5_0" already exists`) {
		t.Errorf("a link named as an RDMA device rdmad does not manage: %v, want invalid argument name", err)
	}

	if err := e.svc.CheckDeleteLink("rxe7", false); !errors.As(err, &nf) || nf.What != service.MissingLink {
		t.Errorf("DeleteLink of a link nothing declares: %v, want NoSuchLink", err)
	}
	if err := e.svc.CheckDeleteLink("rxe0", false); err != nil {
		t.Errorf("DeleteLink of the declared rxe0: %v", err)
	}
	var ae2 *service.ArgError
	if err := e.svc.CheckSetNetnsMode("private", false); !errors.As(err, &ae2) || ae2.Arg != "mode" {
		t.Errorf("SetNetnsMode private: %v, want invalid argument mode", err)
	}
	hosttest.Write(t, e.root, mainFile, brokenMain)
	var ce *service.ConfigError
	if err := e.svc.CheckDeleteLink("rxe0", true); !errors.As(err, &ce) || !strings.Contains(err.Error(), "rdmad.toml") {
		t.Errorf("persisted DeleteLink while rdmad.toml does not load: %v, want a ConfigError naming it", err)
	}

	h := hosttest.NewKernel(hosttest.Copy(t, "mlx5")).Host()
	if err := linkstest.AddNetdev(h, "eth1"); err != nil {
		t.Fatal(err)
	}
	svc, err := service.New(service.Options{Host: h, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.CheckAddLink(config.Link{Name: "rxe9", Type: config.LinkRXE, Netdev: "eth1"}, false); err == nil || !strings.Contains(err.Error(), "this rdmad does not manage soft links") {
		t.Errorf("without a links part: %v, want it refused", err)
	}
	if err := svc.CheckSetNetnsMode("exclusive", false); err == nil || !strings.Contains(err.Error(), "this rdmad does not manage the RDMA netns mode") {
		t.Errorf("SetNetnsMode without a netns part: %v, want it refused", err)
	}
}

// CheckSetQoS says what SetQoS would refuse: a bad trust, a device that
// does not exist; and accepts a request SetQoS takes.
func TestCheckSetQoS(t *testing.T) {
	e := newEnv(t, "", nil)
	var ae *service.ArgError
	if err := e.svc.CheckSetQoS(service.QoSChange{Device: "mlx5_0", Port: 1, Trust: "ip"}); !errors.As(err, &ae) {
		t.Errorf("trust ip: %v, want an invalid argument", err)
	}
	var nf *service.NotFoundError
	if err := e.svc.CheckSetQoS(service.QoSChange{Device: "mlx5_9", Port: 1, Trust: config.TrustDSCP}); !errors.As(err, &nf) || nf.What != service.MissingDevice {
		t.Errorf("mlx5_9: %v, want NoSuchDevice", err)
	}
	if err := e.svc.CheckSetQoS(service.QoSChange{Device: "mlx5_0", Port: 1, Trust: config.TrustDSCP}); err != nil {
		t.Errorf("trust dscp on mlx5_0: %v", err)
	}
}
