package units

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// runInstall runs the real `make install` of the repository into a scratch
// tree, building into a scratch bin/ so the work tree is left alone.
func runInstall(t *testing.T, vars ...string) string {
	t.Helper()
	makeBin := requireTool(t, "make")
	tmp := t.TempDir()
	args := append([]string{"-C", "..", "--no-print-directory", "install", "BIN=" + filepath.Join(tmp, "bin")}, vars...)
	cmd := exec.Command(makeBin, args...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return tmp
}

// listTree returns every file and directory under root, relative, with its
// permission bits.
func listTree(t *testing.T, root string) map[string]fs.FileMode {
	t.Helper()
	got := map[string]fs.FileMode{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if info.IsDir() {
			got[rel+"/"] = info.Mode().Perm()
		} else {
			got[rel] = info.Mode().Perm()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// expectedFiles is the install layout for PREFIX=/usr, given which optional
// files exist in the tree right now.
func expectedFiles(t *testing.T) map[string]fs.FileMode {
	want := map[string]fs.FileMode{
		"usr/sbin/rdmad":                       0o755,
		"usr/bin/rdmactl":                      0o755,
		"usr/lib/systemd/system/rdmad.service": 0o644,
		"usr/lib/udev/rules.d/90-rdmad.rules":  0o644,
		"usr/lib/sysusers.d/rdmad.conf":        0o644,
		"usr/lib/tmpfiles.d/rdmad.conf":        0o644,
		"etc/rdma/rdmad.d/":                    0o755,
		// The Cockpit page (package cockpit-rdmad).
		"usr/share/cockpit/rdmad/manifest.json": 0o644,
		"usr/share/cockpit/rdmad/index.html":    0o644,
		"usr/share/cockpit/rdmad/rdmad.js":      0o644,
		"usr/share/cockpit/rdmad/rdmad.css":     0o644,
		// The Prometheus rules and dashboard (docs/metrics.md).
		"usr/share/rdmad/prometheus/rdmad-alerts.rules.yml":     0o644,
		"usr/share/rdmad/prometheus/rdmad-fleet.rules.yml":      0o644,
		"usr/share/rdmad/prometheus/rdmad-fleet.dashboard.json": 0o644,
		// The health checks of a batch system and the fleet guide
		// (docs/fleet.md).
		"usr/libexec/rdmad/rdmad-healthcheck":          0o755,
		"usr/share/rdmad/slurm/slurm-healthcheck.conf": 0o644,
		"usr/share/rdmad/nhc/rdmad.nhc":                0o644,
		"usr/share/doc/rdmad/fleet.md":                 0o644,
	}
	optional := map[string]string{
		"org.rdmad1.conf":                    "usr/share/dbus-1/system.d/org.rdmad1.conf",
		"org.rdmad1.service":                 "usr/share/dbus-1/system-services/org.rdmad1.service",
		"org.rdmad1.policy":                  "usr/share/polkit-1/actions/org.rdmad1.policy",
		"50-rdmad-persist-as-runtime.rules":  "usr/share/rdmad/polkit/50-rdmad-persist-as-runtime.rules",
		"../contrib/completion/rdmactl.bash": "usr/share/bash-completion/completions/rdmactl",
		"../contrib/completion/_rdmactl":     "usr/share/zsh/vendor-completions/_rdmactl",
		"../contrib/completion/rdmactl.fish": "usr/share/fish/vendor_completions.d/rdmactl.fish",
		"../etc/rdma/rdmad.toml":             "etc/rdma/rdmad.toml",
	}
	for src, dst := range optional {
		if _, err := os.Stat(src); err == nil {
			want[dst] = 0o644
		}
	}
	for _, sect := range []string{"5", "8"} {
		pages, _ := filepath.Glob("../docs/*." + sect)
		for _, p := range pages {
			want["usr/share/man/man"+sect+"/"+filepath.Base(p)] = 0o644
		}
	}
	return want
}

// TestMakeInstallDestdir checks the exact file list of `make install
// DESTDIR=... PREFIX=/usr` and the modes of each file.
func TestMakeInstallDestdir(t *testing.T) {
	root := filepath.Join(t.TempDir(), "root")
	runInstall(t, "DESTDIR="+root, "PREFIX=/usr")
	got := listTree(t, root)
	want := expectedFiles(t)
	var problems []string
	for name, mode := range want {
		gotMode, ok := got[name]
		switch {
		case !ok:
			problems = append(problems, "missing "+name)
		case gotMode != mode:
			problems = append(problems, name+": mode "+gotMode.String()+", want "+mode.String())
		}
	}
	for name := range got {
		if strings.HasSuffix(name, "/") {
			if _, ok := want[name]; !ok && !isParentOfWanted(name, want) {
				problems = append(problems, "unexpected directory "+name)
			}
			continue
		}
		if _, ok := want[name]; !ok {
			problems = append(problems, "unexpected "+name)
		}
	}
	sort.Strings(problems)
	if len(problems) > 0 {
		t.Errorf("install layout:\n%s", strings.Join(problems, "\n"))
	}
	unit, err := os.ReadFile(filepath.Join(root, "usr/lib/systemd/system/rdmad.service"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(unit), "ExecStart=/usr/sbin/rdmad") {
		t.Errorf("installed unit does not start /usr/sbin/rdmad:\n%s", unit)
	}
}

func isParentOfWanted(dir string, want map[string]fs.FileMode) bool {
	for name := range want {
		if strings.HasPrefix(name, dir) {
			return true
		}
	}
	return false
}

// TestMakeInstallPrefixKeepsConfig installs with an empty DESTDIR into a
// scratch PREFIX and SYSCONFDIR: the unit must name the binary under PREFIX,
// and an existing rdmad.toml (the operator's) must be kept.
func TestMakeInstallPrefixKeepsConfig(t *testing.T) {
	if _, err := os.Stat("../etc/rdma/rdmad.toml"); err != nil {
		t.Skip("etc/rdma/rdmad.toml not in the tree yet")
	}
	base := t.TempDir()
	etc := filepath.Join(base, "etc")
	if err := os.MkdirAll(filepath.Join(etc, "rdma"), 0o755); err != nil {
		t.Fatal(err)
	}
	const operators = "# the operator's own policy\n"
	if err := os.WriteFile(filepath.Join(etc, "rdma/rdmad.toml"), []byte(operators), 0o644); err != nil {
		t.Fatal(err)
	}
	prefix := filepath.Join(base, "usr/local")
	runInstall(t, "DESTDIR=", "PREFIX="+prefix, "SYSCONFDIR="+etc)
	kept, err := os.ReadFile(filepath.Join(etc, "rdma/rdmad.toml"))
	if err != nil {
		t.Fatal(err)
	}
	if string(kept) != operators {
		t.Errorf("install overwrote the existing rdmad.toml:\n%s", kept)
	}
	unit, err := os.ReadFile(filepath.Join(prefix, "lib/systemd/system/rdmad.service"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(unit), "ExecStart="+prefix+"/sbin/rdmad") {
		t.Errorf("unit installed under PREFIX=%s does not start %s/sbin/rdmad", prefix, prefix)
	}
}
