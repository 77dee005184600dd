package main_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
)

type inForceStatus struct {
	ConfigError   string   `json:"config_error"`
	ConfigFiles   []string `json:"config_files"`
	PolicyInForce string   `json:"policy_in_force"`
	PolicySaved   uint64   `json:"policy_saved_usec"`
	LastGoodError string   `json:"last_good_error"`
}

// rdmad tells which policy is in force, the same everywhere (STATUS=,
// rdmactl status and its JSON, doctor, the metrics): the files, the last
// good configuration with when it was saved and its files, or nothing.
// At a first boot with a broken file, or with a state file that is
// garbage, truncated or a FIFO, nothing is in force and nothing says
// otherwise.
func TestNothingInForceIsToldSo(t *testing.T) {
	for _, c := range []struct {
		what  string
		state func(t *testing.T, name string)
	}{
		{"first boot", func(*testing.T, string) {}},
		{"garbage state file", func(t *testing.T, name string) { write(t, name, "\x00\x01garbage") }},
		{"truncated state file", func(t *testing.T, name string) { write(t, name, config.LastGoodHeader+"{\n  \"main_file\": \"/etc/rd") }},
		{"FIFO state file", func(t *testing.T, name string) {
			if err := syscall.Mkfifo(name, 0o600); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(c.what, func(t *testing.T) {
			addr := privateBus(t)
			root, env, _ := demoHost(t)
			state := filepath.Join(root, config.LastGoodFile)
			if err := os.MkdirAll(filepath.Dir(state), 0o755); err != nil {
				t.Fatal(err)
			}
			c.state(t, state)
			hosttest.Write(t, root, "etc/rdma/rdmad.d/60-bad.toml", "[[roce]]\ndevice = \"x\"\ntos = 1060\n")
			sock, notes := notifySocket(t)
			p := startJournaled(t, append(env, "NOTIFY_SOCKET="+sock), "--root", root, "--bus", addr)
			ctl := func(args ...string) (string, error) {
				out, err := exec.Command(rdmactlBin, append([]string{"--bus", addr}, args...)...).CombinedOutput()
				return string(out), err
			}
			eventually(t, "rdmad answers on the bus", func() bool { _, err := ctl("status"); return err == nil })

			var last string
			for _, n := range notes() {
				for _, l := range strings.Split(n.text, "\n") {
					if s, ok := strings.CutPrefix(l, "STATUS="); ok {
						last = s
					}
				}
			}
			if !strings.Contains(last, "nothing declared") || strings.Contains(last, "last good configuration in force") {
				t.Errorf("STATUS=%s\nwant it to say nothing declared is in force", last)
			}
			out, _ := ctl("status")
			if !strings.Contains(out, "policy in force: nothing declared") || strings.Contains(out, "last good configuration in force") {
				t.Errorf("rdmactl status:\n%s\nwant it to say nothing declared is in force", out)
			}
			out, _ = ctl("-o", "json", "status")
			var st inForceStatus
			if err := json.Unmarshal([]byte(out), &st); err != nil || st.PolicyInForce != "nothing" || len(st.ConfigFiles) != 0 || st.PolicySaved != 0 {
				t.Errorf("status -o json: %+v (%v), want policy_in_force nothing, no files", st, err)
			}
			out, _ = ctl("doctor")
			if !strings.Contains(out, "nothing declared") {
				t.Errorf("doctor does not say nothing declared is in force:\n%s", out)
			}
			if c.what != "first boot" && (st.LastGoodError == "" || !strings.Contains(p.logs(), "cannot be used")) {
				t.Errorf("why the last good configuration is not in force: %q; log:\n%s", st.LastGoodError, p.logs())
			}
			p.stop(t)
		})
	}
}

// A good boot, then a broken reload: the last good configuration is in
// force, with when it was saved and its files. A file at the state path
// that rdmad did not write blocks every save: a doctor finding and a
// metric, retried at the next pass once it is gone.
func TestLastGoodInForceAndBlockedSaves(t *testing.T) {
	t.Parallel() // a bus and a host of its own; the test mostly waits
	addr := privateBus(t)
	root, env, _ := demoHost(t)
	hosttest.Write(t, root, "etc/rdma/rdmad.d/70-metrics.toml", "[metrics]\ntextfile = \"/var/lib/prometheus/node-exporter/rdmad.prom\"\n")
	prom := func() string {
		b, _ := os.ReadFile(filepath.Join(root, "var/lib/prometheus/node-exporter/rdmad.prom"))
		return string(b)
	}
	state := filepath.Join(root, config.LastGoodFile)
	write(t, state, "# my notes, not rdmad's\n")
	p := startJournaled(t, env, "--root", root, "--bus", addr)
	ctl := func(args ...string) (string, error) {
		out, err := exec.Command(rdmactlBin, append([]string{"--bus", addr}, args...)...).CombinedOutput()
		return string(out), err
	}
	jsonStatus := func() inForceStatus {
		out, _ := ctl("-o", "json", "status")
		var st inForceStatus
		_ = json.Unmarshal([]byte(out), &st)
		return st
	}
	eventually(t, "rdmad answers on the bus", func() bool { _, err := ctl("status"); return err == nil })
	if st := jsonStatus(); st.PolicyInForce != "files" || !strings.Contains(st.LastGoodError, state) {
		t.Errorf("status with a foreign state file: %+v, want the files in force and the blocked save named", st)
	}
	if out, _ := ctl("doctor"); !strings.Contains(out, "last-good") || !strings.Contains(out, state) {
		t.Errorf("doctor does not report the blocked save:\n%s", out)
	}
	eventually(t, "rdmad_last_good_save_failed 1", func() bool {
		return strings.Contains(prom(), "\nrdmad_last_good_save_failed 1\n") && strings.Contains(prom(), "rdmad_policy_in_force{origin=\"files\"} 1\n")
	})
	if got, _ := os.ReadFile(state); string(got) != "# my notes, not rdmad's\n" {
		t.Errorf("rdmad replaced a file it did not write: %q", got)
	}

	if err := os.Remove(state); err != nil {
		t.Fatal(err)
	}
	if out, err := ctl("reconcile"); err != nil {
		t.Fatalf("reconcile: %v\n%s", err, out)
	}
	eventually(t, "the save retried after the next pass", func() bool {
		b, _ := os.ReadFile(state)
		return strings.HasPrefix(string(b), config.LastGoodHeader) && jsonStatus().LastGoodError == "" &&
			strings.Contains(prom(), "\nrdmad_last_good_save_failed 0\n")
	})

	hosttest.Write(t, root, "etc/rdma/rdmad.d/50-roce.toml", "[[roce]]\ndevice = \"x\"\ntos = 1060\n")
	eventually(t, "the broken reload is seen", func() bool { return jsonStatus().ConfigError != "" })
	st := jsonStatus()
	if st.PolicyInForce != "last-good" || st.PolicySaved == 0 || len(st.ConfigFiles) == 0 {
		t.Errorf("after a broken reload: %+v, want the last good configuration with its save time and files", st)
	}
	out, _ := ctl("status")
	if !strings.Contains(out, "policy in force: last good configuration saved ") {
		t.Errorf("rdmactl status:\n%s", out)
	}
	eventually(t, "rdmad_policy_in_force says last-good", func() bool {
		return strings.Contains(prom(), "rdmad_policy_in_force{origin=\"last-good\"} 1\n")
	})
	p.stop(t)
}

func write(t *testing.T, name, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
