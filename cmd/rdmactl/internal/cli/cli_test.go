package cli

import (
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/godbus/dbus/v5"
	"github.com/rdmad/rdmad/dbusapi"
	"github.com/rdmad/rdmad/dbusapi/client"
)

// rdmactl reads the host only through rdmad: neither the CLI nor the
// client imports a daemon package (version, the build stamp, and
// config/value, the rules of the values a policy takes, aside). The
// commands that read the host themselves by nature live in packages of
// their own, listed in hostReaders: capture writes what rdmad and doctor
// read of a host, with their bounded readers and codecs, also where no
// rdmad runs; qualify measures the host itself. They link the kernel edge
// rdmad uses and nothing above it (no part, reconciler or service)
// (docs/architecture.md).
func TestRdmactlImportsNoDaemonCode(t *testing.T) {
	const mod = "github.com/rdmad/rdmad/"
	hostReaders := map[string]bool{
		mod + "cmd/rdmactl/internal/capture": true,
		mod + "cmd/rdmactl/internal/qualify": true,
	}
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}}: {{join .Imports \" \"}}",
		mod+"cmd/rdmactl/...", mod+"dbusapi/client").CombinedOutput()
	if err != nil {
		t.Skipf("go list: %v: %s", err, out)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, imports, _ := strings.Cut(line, ": ")
		if hostReaders[pkg] {
			continue
		}
		for _, imp := range strings.Fields(imports) {
			if strings.HasPrefix(imp, mod+"daemon/") && imp != mod+"daemon/version" && imp != mod+"daemon/config/value" {
				t.Errorf("%s imports %s", pkg, imp)
			}
		}
	}
	// The kernel edge qualify and capture read the host through, and the
	// policy parser capture reads the host's configuration with (which
	// memlock group and units to take).
	edge := map[string]bool{"config/value": true, "version": true, "dcb": true, "ethtool": true, "events": true,
		"fixturekernel": true, "host": true, "nlattr": true, "rdmares": true, "config": true}
	deps, err := exec.Command("go", "list", "-deps", mod+"cmd/rdmactl").CombinedOutput()
	if err != nil {
		t.Skipf("go list: %v: %s", err, deps)
	}
	for _, dep := range strings.Fields(string(deps)) {
		if d, ok := strings.CutPrefix(dep, mod+"daemon/"); ok && !edge[d] {
			t.Errorf("rdmactl links daemon/%s: only the kernel edge of qualify and capture (%v) may be linked", d, edge)
		}
	}
}

// Each error rdmad can return reads as a sentence; an unknown one keeps
// its D-Bus name; internal error text is not shown.
func TestDescribeError(t *testing.T) {
	cases := []struct {
		name, msg, want string
	}{
		{dbusapi.ErrAccessDenied, "not allowed", "access denied: not allowed (run it as root, or ask for the polkit action in rdmactl(8))"},
		{dbusapi.ErrInvalidArgs, "port 9: no such port", "port 9: no such port"},
		{"org.rdmad1.Error.NoSuchPort", "mlx5_0/9: no such port", "mlx5_0/9: no such port"},
		{dbusapi.ErrConfig, "x.toml:3: bad", "configuration error, the policy in force stays (rdmactl status says which):\n  x.toml:3: bad"},
		{dbusapi.ErrConfig, `a.toml:3: bad\x0ab.toml:1: worse` + "\nc.toml:2: \x1b[31m", "configuration error, the policy in force stays (rdmactl status says which):\n  a.toml:3: bad\n  b.toml:1: worse\n  c.toml:2: \\x1b[31m"},
		{"org.example.Other\x1b", "why\r", `org.example.Other\x1b: why\x0d`},
		{dbusapi.ErrNextBoot, "persisted; applies at the next boot", "persisted; applies at the next boot"},
		{dbusapi.ErrBusy, "Describe: 4 reports are being built and 64 calls wait for them; try again later", "rdmad is busy: Describe: 4 reports are being built and 64 calls wait for them; try again later"},
		{dbusapi.ErrBusy, "uid 1000 already has 2 authorization checks waiting for polkit (at most 2 a user); try again once they are answered: busy", "rdmad is busy: uid 1000 already has 2 authorization checks waiting for polkit (at most 2 a user); try again once they are answered: busy"},
		{dbusapi.ErrNotAllowed, `/etc/rdma/rdmad.d/50-site.toml:2: [api] changes = "none": this host takes no declarations over D-Bus; declare it in a configuration file and reload`, `not allowed on this host: /etc/rdma/rdmad.d/50-site.toml:2: [api] changes = "none": this host takes no declarations over D-Bus; declare it in a configuration file and reload (rdmactl ... unset still withdraws what was set over D-Bus)`},
		{"org.freedesktop.DBus.Error.UnknownMethod", "no Diagnose", "this rdmad does not have what rdmactl asked for (no Diagnose): it is older than rdmactl; upgrade rdmad and restart it"},
		{"org.example.Other", "why", "org.example.Other: why"},
	}
	for _, c := range cases {
		err := dbus.Error{Name: c.name, Body: []any{c.msg}}
		if got := describeError(err); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
	if got := describeError(errors.New(`exec: "dbus-launch": executable file not found in $PATH`)); strings.Contains(got, "dbus-launch") {
		t.Errorf("internal error text reaches the user: %q", got)
	}
	be := &client.BusError{Bus: "session", Reason: "DBUS_SESSION_BUS_ADDRESS is not set", Err: errors.New(`exec: "dbus-launch": executable file not found`)}
	if got := describeError(be); got != "cannot reach the session bus (DBUS_SESSION_BUS_ADDRESS is not set): rdmad runs on the system bus: leave out --bus session" {
		t.Errorf("bus error: %q", got)
	}
	if client.ErrorMessage(nil) != "" {
		t.Error("ErrorMessage(nil) is not empty")
	}
}
