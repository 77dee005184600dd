package doctor_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/doctor"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
)

// The site's files declare a TOS, a link and the netns mode; rdmad's drop-in
// and a runtime change beat each: one override per subject, naming both
// places and the unset command, persisted or not.
func TestOverrideNamesBothPlacesAndTheWithdrawal(t *testing.T) {
	root := hosttest.Copy(t, "mlx5")
	site := filepath.Join(config.DropInDir, "50-ansible.toml")
	hosttest.Write(t, root, config.MainFile, "[modules]\nenable = false\n")
	hosttest.Write(t, root, site, `[[roce]]
driver = "mlx5_core"
mode = "v2"
tos = 106

[[link]]
name = "rxe0"
type = "rxe"
netdev = "ens1f0np0"

[[link]]
name = "rxe1"
type = "rxe"
netdev = "ens1f1np1"

[netns]
mode = "exclusive"
`)
	hosttest.Write(t, root, filepath.Join(config.DropInDir, config.PersistedName), config.PersistedHeader+`
[netns]
mode = "shared"

[[roce]]
device = "mlx5_0"
port = 1
mode = "v1"
tos = 0

[[link]]
name = "rxe0"
type = "siw"
netdev = "ens1f0np0"
`)
	pol := policyOf(t, root)
	// A runtime TOS on mlx5_1 (every port), and rxe1 deleted at runtime, as
	// the service's overlay puts them in force.
	tos := 7
	pol.RoCE = append(pol.RoCE, config.RoCERule{Source: config.Position{File: config.RuntimeFile}, Selector: config.Selector{Device: config.Exact("mlx5_1")}, TOS: &tos})
	for i, l := range pol.Links {
		if l.Name == "rxe1" {
			pol.ShadowedLinks = append(pol.ShadowedLinks, config.ShadowedLink{Link: l, By: config.Position{File: config.RuntimeFile}, Deleted: true})
			pol.Links = append(pol.Links[:i:i], pol.Links[i+1:]...)
			break
		}
	}
	fs := diagnose(t, root, withPolicy(pol))
	siteFile := filepath.Join(root, site)
	dropIn := filepath.Join(root, config.DropInDir, config.PersistedName)

	f := must(t, fs, "override", "mlx5_0/1")
	for _, want := range []string{
		// A rule's place is its table's line.
		"RoCE TOS 0 (persisted at " + dropIn + ":6) overrides 106 declared at " + siteFile + ":1",
		"RoCE mode v1 (persisted at " + dropIn + ":6) overrides v2 declared at " + siteFile + ":1",
	} {
		if !strings.Contains(f.Finding, want) {
			t.Errorf("mlx5_0/1: %q lacks %q", f.Finding, want)
		}
	}
	if f.Severity != doctor.SeverityWarn || f.Fix != "rdmactl roce unset mlx5_0/1 --persist" || f.Scope != doctor.ScopePolicy {
		t.Errorf("mlx5_0/1: %+v", f)
	}
	f = must(t, fs, "override", "mlx5_1/1")
	if !strings.Contains(f.Finding, "RoCE TOS 7 (set at runtime) overrides 106 declared at "+siteFile+":1") || f.Fix != "rdmactl roce unset mlx5_1" {
		t.Errorf("mlx5_1/1: %+v", f)
	}
	f = must(t, fs, "override", "link rxe0")
	if !strings.Contains(f.Finding, "link rxe0 declared at "+siteFile+":6 (rxe on ens1f0np0) is redeclared (persisted at "+dropIn+":12) as siw on ens1f0np0") || f.Fix != "rdmactl link unset rxe0 --persist" {
		t.Errorf("rxe0: %+v", f)
	}
	f = must(t, fs, "override", "link rxe1")
	if !strings.Contains(f.Finding, "is deleted at runtime") || f.Fix != "rdmactl link unset rxe1" {
		t.Errorf("rxe1: %+v", f)
	}
	f = must(t, fs, "override", "host")
	if !strings.Contains(f.Finding, "netns mode shared (persisted at "+dropIn+":4) overrides the mode declared at "+siteFile+":17") || f.Fix != "rdmactl netns unset --persist" {
		t.Errorf("netns: %+v", f)
	}
	if find(fs, "no-override", "host") != nil {
		t.Error("no-override beside overrides")
	}

	// Without the drop-in and the runtime changes, the files decide.
	fs = diagnose(t, root, withPolicy(parsePolicy(t, "[[roce]]\ndriver = \"mlx5_core\"\ntos = 106\n")))
	must(t, fs, "no-override", "host")
	for _, f := range fs {
		if f.ID == "override" {
			t.Errorf("override without a declaration over D-Bus: %+v", f)
		}
	}
}

// A declaration over D-Bus that nothing in the files declares is no
// override, until [api] changes no longer allows it: a persisted one
// under "runtime", any under "none".
func TestOverrideOfWhatAPINoLongerAllows(t *testing.T) {
	root := hosttest.Copy(t, "mlx5")
	hosttest.Write(t, root, config.MainFile, "[modules]\nenable = false\n")
	hosttest.Write(t, root, filepath.Join(config.DropInDir, config.PersistedName), config.PersistedHeader+"\n[[qos]]\ndevice = \"mlx5_0\"\nport = 1\ntrust = \"dscp\"\n")
	runtime := func(pol *config.Policy) *config.Policy {
		pol.QoS = append(pol.QoS, config.QoSRule{Source: config.Position{File: config.RuntimeFile}, Selector: config.Selector{Device: config.Exact("mlx5_1")}, Port: 1, HasPFC: true, PFC: []uint8{3}})
		return pol
	}
	fs := diagnose(t, root, withPolicy(runtime(policyOf(t, root))))
	must(t, fs, "no-override", "host")

	hosttest.Write(t, root, filepath.Join(config.DropInDir, "10-site.toml"), "[api]\nchanges = \"runtime\"\n")
	fs = diagnose(t, root, withPolicy(runtime(policyOf(t, root))))
	f := must(t, fs, "override", "mlx5_0/1")
	if !strings.Contains(f.Finding, `QoS trust dscp (persisted at`) || !strings.Contains(f.Finding, `[api] changes = "runtime" (`+filepath.Join(root, config.DropInDir, "10-site.toml")+`:2) no longer allows`) ||
		f.Fix != "rdmactl qos unset mlx5_0/1 --persist" {
		t.Errorf("persisted under runtime: %+v", f)
	}
	if find(fs, "override", "mlx5_1/1") != nil {
		t.Errorf("a runtime declaration under [api] changes = runtime is allowed: %+v", find(fs, "override", "mlx5_1/1"))
	}

	// Two files with [api]: the later wins, doctor names both.
	hosttest.Write(t, root, filepath.Join(config.DropInDir, "20-site.toml"), "[api]\nchanges = \"none\"\n")
	fs = diagnose(t, root, withPolicy(runtime(policyOf(t, root))))
	f = must(t, fs, "override", "mlx5_1/1")
	if !strings.Contains(f.Finding, "QoS pfc [3] (set at runtime) is declared over D-Bus, which [api] changes = \"none\"") || f.Fix != "rdmactl qos unset mlx5_1/1" {
		t.Errorf("runtime under none: %+v", f)
	}
	// A runtime rule for every port of a device is withdrawn for the device.
	fs = diagnose(t, root, withPolicy(func(pol *config.Policy) *config.Policy {
		pol.QoS = append(pol.QoS, config.QoSRule{Source: config.Position{File: config.RuntimeFile}, Selector: config.Selector{Device: config.Exact("mlx5_1")}, HasPFC: true, PFC: []uint8{3}})
		return pol
	}(policyOf(t, root))))
	if f := must(t, fs, "override", "mlx5_1/1"); f.Fix != "rdmactl qos unset mlx5_1" {
		t.Errorf("a runtime rule for every port of mlx5_1 under none: fix %q, want rdmactl qos unset mlx5_1", f.Fix)
	}
	f = must(t, fs, "api-tables", "host")
	if !strings.Contains(f.Finding, "[api] is declared in 2 files") || !strings.Contains(f.Finding, "10-site.toml:1") || !strings.Contains(f.Finding, `changes = "none" (`+filepath.Join(root, config.DropInDir, "20-site.toml")+":2)") {
		t.Errorf("api-tables: %+v", f)
	}
}
