package pkgtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/daemon/memlock"
)

const upgradeKeep = "etc/rdma/rdmad.d/00-upgrade-memlock.toml"

// upgradeScript runs the .deb's preinst or the .rpm's %pre, for an upgrade
// (or not), on root; it returns the script's output.
type upgradeScript func(t *testing.T, root string, upgrade bool) string

func debPreinst(t *testing.T, root string, upgrade bool) string {
	bin := removalTools(t)
	args := []string{filepath.Join(repo, "packaging/deb/preinst"), "install"}
	if upgrade {
		args = []string{filepath.Join(repo, "packaging/deb/preinst"), "upgrade", "0.0~git1.gabc"}
	}
	cmd := exec.Command(filepath.Join(bin, "sh"), args...)
	cmd.Env = []string{"PATH=" + bin, "DPKG_ROOT=" + root}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("preinst %v: %v\n%s", args[1:], err, out)
	}
	return string(out)
}

func rpmPre(t *testing.T, root string, upgrade bool) string {
	bin := removalTools(t)
	arg := "1"
	if upgrade {
		arg = "2"
	}
	cmd := exec.Command(filepath.Join(bin, "sh"), rpmScript(t, "pre", root), arg)
	cmd.Env = []string{"PATH=" + bin}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%%pre %s: %v\n%s", arg, err, out)
	}
	return string(out)
}

// An upgrade from a version whose shipped default was services = true must
// not change a running host: when rdmad's DefaultLimitMEMLOCK= drop-in is
// there and no drop-in of the administrator's sets services, the .deb's
// preinst and the .rpm's %pre write a headed 00-upgrade-memlock.toml with
// services = true (which rdmad loads as such) and say so; in every other
// case they write nothing.
func TestUpgradeKeepsServicesMemlock(t *testing.T) {
	dropin := string(memlock.RenderSystemd(&config.Memlock{Group: "rdma", Soft: config.Limit{Unlimited: true}, Hard: config.Limit{Unlimited: true}, Services: true}))
	cases := []struct {
		name    string
		upgrade bool
		files   map[string]string
		keep    bool
	}{
		{"upgrade, rdmad's drop-in, no admin setting", true, map[string]string{memlock.SystemdFile: dropin, "etc/rdma/rdmad.d/50-roce.toml": "[[roce]]\ndevice = \"mlx5_*\"\ntos = 106\n"}, true},
		{"fresh install", false, map[string]string{memlock.SystemdFile: dropin}, false},
		{"upgrade, no drop-in (services was off)", true, nil, false},
		{"upgrade, the administrator's own drop-in (no header)", true, map[string]string{memlock.SystemdFile: "[Manager]\nDefaultLimitMEMLOCK=infinity\n"}, false},
		{"upgrade, a drop-in sets services = false", true, map[string]string{memlock.SystemdFile: dropin, "etc/rdma/rdmad.d/50-mem.toml": "[memlock]\nservices = false\n"}, false},
		{"upgrade, a drop-in sets memlock.services", true, map[string]string{memlock.SystemdFile: dropin, "etc/rdma/rdmad.d/50-mem.toml": "memlock.services = true\n"}, false},
		{"upgrade, already kept", true, map[string]string{memlock.SystemdFile: dropin, upgradeKeep: "# mine\n[memlock]\nservices = false\n"}, false},
	}
	for _, script := range []struct {
		name string
		run  upgradeScript
	}{{"deb preinst", debPreinst}, {"rpm %pre", rpmPre}} {
		for _, c := range cases {
			t.Run(script.name+"/"+c.name, func(t *testing.T) {
				root := t.TempDir()
				for f, text := range c.files {
					hosttest.Write(t, root, f, text)
				}
				before, _ := os.ReadFile(filepath.Join(root, upgradeKeep))
				out := script.run(t, root, c.upgrade)
				got, err := os.ReadFile(filepath.Join(root, upgradeKeep))
				if !c.keep {
					if string(got) != string(before) {
						t.Errorf("wrote /%s:\n%s", upgradeKeep, got)
					}
					if strings.TrimSpace(out) != "" {
						t.Errorf("said %q, wrote nothing", out)
					}
					return
				}
				if err != nil {
					t.Fatalf("no /%s: %v (output %q)", upgradeKeep, err, out)
				}
				if !strings.HasPrefix(string(got), "# Managed by rdmad") {
					t.Errorf("/%s lacks rdmad's header (purge would keep it):\n%s", upgradeKeep, got)
				}
				p, err := config.Parse("/"+upgradeKeep, got)
				if err != nil {
					t.Fatalf("rdmad does not load /%s: %v", upgradeKeep, err)
				}
				if p.Memlock == nil || !p.Memlock.Services {
					t.Errorf("/%s gives memlock %+v, want services = true", upgradeKeep, p.Memlock)
				}
				if !strings.Contains(out, "/etc/rdma/rdmad.d/00-upgrade-memlock.toml") || !strings.Contains(out, "services = true") {
					t.Errorf("the script did not say what it wrote: %q", out)
				}
				if _, err := os.Stat(filepath.Join(root, upgradeKeep+".tmp")); err == nil {
					t.Errorf("left %s.tmp", upgradeKeep)
				}
			})
		}
	}
}
