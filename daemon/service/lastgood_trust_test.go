package service_test

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rdmad/rdmad/daemon/compose"
	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/daemon/service"
)

// The last good configuration is trusted as the files it stands for: a
// copy another user can change, a symlink, one in a directory another user
// can change, one that names another main file, or one holding a file
// larger than a configuration file may be is not applied. rdmad starts with
// nothing declared instead and says why at error priority.
func TestLastGoodIsTrustedAsTheFilesAre(t *testing.T) {
	const dropin = "etc/rdma/rdmad.d/50-memlock.toml"
	stateDir := filepath.Dir(config.LastGoodFile)
	for _, c := range []struct {
		what   string
		root   bool // needs root (chown)
		tamper func(t *testing.T, root, saved string)
		why    string // in the logged error
	}{
		{what: "writable by others", tamper: func(t *testing.T, root, saved string) {
			chmod(t, filepath.Join(root, config.LastGoodFile), 0o666)
		}, why: "writable by others"},
		{what: "owned by another user", root: true, tamper: func(t *testing.T, root, saved string) {
			chown(t, filepath.Join(root, config.LastGoodFile), 1000)
		}, why: "owned by uid 1000"},
		{what: "a symlink to a user's file", tamper: func(t *testing.T, root, saved string) {
			other := filepath.Join(t.TempDir(), "mine.json")
			if err := os.WriteFile(other, []byte(saved), 0o644); err != nil {
				t.Fatal(err)
			}
			name := filepath.Join(root, config.LastGoodFile)
			if err := os.Remove(name); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(other, name); err != nil {
				t.Fatal(err)
			}
		}, why: "symlink"},
		{what: "in a directory writable by others", tamper: func(t *testing.T, root, saved string) {
			chmod(t, filepath.Join(root, stateDir), 0o777)
		}, why: "writable by others"},
		{what: "in a directory owned by another user", root: true, tamper: func(t *testing.T, root, saved string) {
			chown(t, filepath.Join(root, stateDir), 1000)
		}, why: "owned by uid 1000"},
		{what: "naming another main file", tamper: func(t *testing.T, root, saved string) {
			other := filepath.Join(root, "home/user/rdmad.toml")
			snap := &config.Snapshot{MainFile: other, Files: []config.SnapshotFile{
				{Name: other, Data: []byte("[memlock]\ngroup = \"users\"\n")}}}
			hosttest.Write(t, root, config.LastGoodFile, string(snap.Marshal()))
		}, why: "not the configured main file"},
		{what: "holding a file over the configuration size bound", tamper: func(t *testing.T, root, saved string) {
			main := filepath.Join(root, "etc/rdma/rdmad.toml")
			big := append([]byte("[memlock]\ngroup = \"users\"\n#"), bytes.Repeat([]byte("x"), host.MaxConfigSize)...)
			snap := &config.Snapshot{MainFile: main, Files: []config.SnapshotFile{{Name: main, Data: big}}}
			hosttest.Write(t, root, config.LastGoodFile, string(snap.Marshal()))
		}, why: "larger than"},
	} {
		t.Run(c.what, func(t *testing.T) {
			if c.root && os.Geteuid() != 0 {
				t.Skip("needs root to give files to other users")
			}
			root := hosttest.Copy(t, "mlx5")
			hosttest.Write(t, root, mainFile, "[modules]\nenable = false\n")
			hosttest.Write(t, root, dropin, "[memlock]\ngroup = \"rdma\"\n")
			boot(t, root)
			saved := hosttest.Read(t, root, config.LastGoodFile)
			c.tamper(t, root, saved)

			hosttest.Write(t, root, dropin, "[memlock]\nbogus = 1\n")
			var logs bytes.Buffer
			log := slog.New(slog.NewTextHandler(&logs, nil))
			svc, err := service.New(service.Options{Host: hosttest.NewKernel(root).Host(),
				Parts: compose.Parts(compose.Kernel{Modules: &hosttest.Modprobe{}}), Log: log})
			if err != nil {
				t.Fatal(err)
			}
			if pol := svc.PolicyInForce(); pol.Memlock != nil || len(pol.Files) != 0 {
				t.Errorf("a last good configuration %s was applied: memlock %+v, files %v", c.what, pol.Memlock, pol.Files)
			}
			if !strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), c.why) {
				t.Errorf("logs do not say at error priority why it was not applied (%q):\n%s", c.why, logs.String())
			}
		})
	}
}

func chmod(t *testing.T, name string, mode os.FileMode) {
	t.Helper()
	if err := os.Chmod(name, mode); err != nil {
		t.Fatal(err)
	}
}

func chown(t *testing.T, name string, uid int) {
	t.Helper()
	if err := os.Chown(name, uid, uid); err != nil {
		t.Fatal(err)
	}
}
