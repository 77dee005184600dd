package modules_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/daemon/modules"
	"github.com/rdmad/rdmad/daemon/reconcile"
)

func TestParseConf(t *testing.T) {
	in := "# comment\n; also a comment\n\n  ib_uverbs  \nrdma_ucm\n\t# indented comment\nxprtrdma\r\n"
	got := modules.ParseConf([]byte(in))
	want := []string{"ib_uverbs", "rdma_ucm", "xprtrdma"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ParseConf = %q, want %q", got, want)
	}
}

func TestConfFilesByTransport(t *testing.T) {
	for _, tc := range []struct {
		fixture string
		want    []string
	}{
		{"mlx5", []string{"infiniband", "rdma", "roce"}}, // rdma-core: mlx5_core means both
		{"mlx4", []string{"infiniband", "rdma", "roce"}},
		{"hfi1", []string{"opa", "rdma"}},
		{"rxe", []string{"rdma", "roce"}},
		{"sparse", []string{"rdma", "roce"}}, // bnxt_en
	} {
		devs, err := host.New(hosttest.FixtureDir(tc.fixture)).Devices()
		if err != nil {
			t.Fatal(err)
		}
		if got := modules.ConfFiles(devs); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: ConfFiles = %v, want %v", tc.fixture, got, tc.want)
		}
	}
	if got := modules.ConfFiles(nil); got != nil {
		t.Errorf("no devices: %v", got)
	}
}

type recordingLoader struct {
	calls [][]string
	err   error
}

func (r *recordingLoader) Load(_ context.Context, names []string) error {
	r.calls = append(r.calls, append([]string(nil), names...))
	return r.err
}

func policy(dir string) *config.Policy {
	return &config.Policy{Modules: config.Modules{Enable: true, Directory: dir}}
}

func TestPartLoadsMissingInOneBatch(t *testing.T) {
	root := hosttest.Copy(t, "rxe")
	h := host.New(root)
	devs, _ := h.Devices()
	hosttest.Write(t, root, "etc/rdma/modules/roce.conf", "rdma_rxe\nrdma-ucm\n")
	l := &recordingLoader{}
	acts := (&modules.Part{Host: h, Loader: l}).Apply(context.Background(), policy("/etc/rdma/modules"), devs)
	want := [][]string{{"ib_iser", "ib_isert", "ib_uverbs", "rdma_ucm", "xprtrdma", "svcrdma"}}
	if !reflect.DeepEqual(l.calls, want) {
		t.Fatalf("modprobe calls = %q, want %q (rdma_rxe loaded, rdma-ucm same as rdma_ucm)", l.calls, want)
	}
	if len(acts) != 1 || acts[0].Status != reconcile.Changed {
		t.Fatalf("acts = %+v", acts)
	}

	// Once the kernel has them, nothing is loaded again.
	var lines []string
	for _, m := range want[0] {
		lines = append(lines, m+" 16384 0 - Live 0x0")
	}
	f, _ := os.OpenFile(filepath.Join(root, "proc/modules"), os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(strings.Join(lines, "\n") + "\n")
	f.Close()
	l.calls = nil
	acts = (&modules.Part{Host: h, Loader: l}).Apply(context.Background(), policy("/etc/rdma/modules"), devs)
	if l.calls != nil || len(acts) != 1 || acts[0].Status != reconcile.Unchanged {
		t.Fatalf("second pass: calls %q acts %+v", l.calls, acts)
	}
}

func TestPartDisabledNoDevicesAndFailures(t *testing.T) {
	root := hosttest.Copy(t, "hfi1")
	h := host.New(root)
	devs, _ := h.Devices()
	l := &recordingLoader{}
	p := &modules.Part{Host: h, Loader: l}
	if acts := p.Apply(context.Background(), &config.Policy{Modules: config.Modules{Enable: false}}, devs); acts != nil || l.calls != nil {
		t.Errorf("disabled: %+v %q", acts, l.calls)
	}
	if acts := p.Apply(context.Background(), policy("/etc/rdma/modules"), nil); acts != nil || l.calls != nil {
		t.Errorf("no devices: %+v %q", acts, l.calls)
	}
	l.err = errors.New("modprobe: FATAL: Module opa_vnic not found")
	acts := p.Apply(context.Background(), policy("/etc/rdma/modules"), devs)
	if len(acts) != 1 || acts[0].Status != reconcile.Failed || !strings.Contains(acts[0].Err.Error(), "opa_vnic") {
		t.Fatalf("acts = %+v", acts)
	}
	if !strings.Contains(acts[0].Source, "opa.conf") {
		t.Errorf("source %q does not name opa.conf", acts[0].Source)
	}
	hosttest.Write(t, root, "etc/rdma/modules/rdma.conf", "-v\n")
	acts = p.Apply(context.Background(), policy("/etc/rdma/modules"), devs)
	if len(acts) != 1 || acts[0].Status != reconcile.Failed || !strings.Contains(acts[0].Err.Error(), `"-v" is not a module name`) {
		t.Fatalf("option smuggled as module: %+v", acts)
	}
}

// TestModprobeRunsFromPATH runs the real Loader against a recording
// modprobe placed first in PATH, as the daemon's --once tests do.
func TestModprobeRunsFromPATH(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "calls")
	script := "#!/bin/sh\necho \"$@\" >> " + log + "\ncase \"$*\" in *nosuch*) echo \"modprobe: FATAL: Module nosuch not found\" >&2; exit 1;; esac\n"
	if err := os.WriteFile(filepath.Join(dir, "modprobe"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	if err := (modules.Modprobe{}).Load(context.Background(), []string{"ib_uverbs", "rdma_ucm"}); err != nil {
		t.Fatal(err)
	}
	err := (modules.Modprobe{}).Load(context.Background(), []string{"nosuch"})
	if err == nil || !strings.Contains(err.Error(), "Module nosuch not found") {
		t.Errorf("err = %v", err)
	}
	b, _ := os.ReadFile(log)
	if got := string(b); got != "-a ib_uverbs rdma_ucm\n-a nosuch\n" {
		t.Errorf("modprobe saw %q", got)
	}
	t.Setenv("PATH", t.TempDir())
	if err := (modules.Modprobe{}).Load(context.Background(), []string{"x"}); err == nil {
		t.Error("no modprobe in PATH: no error")
	}
}

// A modprobe that never returns (a module waiting for firmware) is cut off.
func TestModprobeHangIsBounded(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "modprobe"), []byte("#!/bin/sh\nexec sleep 600\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	err := (modules.Modprobe{Timeout: 50 * time.Millisecond}).Load(context.Background(), []string{"mlx5_ib"})
	if err == nil || !strings.Contains(err.Error(), "no answer after 50ms") {
		t.Errorf("err = %v", err)
	}
}

// Debian's rdma.conf lists xprtrdma and svcrdma, aliases of rpcrdma: once
// rpcrdma is loaded, nothing is missing and modprobe is not run again.
func TestAliasedModulesAreNotLoadedAgain(t *testing.T) {
	root := hosttest.Copy(t, "rxe")
	h := host.New(root)
	devs, _ := h.Devices()
	hosttest.Write(t, root, "etc/rdma/modules/rdma.conf", "xprtrdma\nsvcrdma\n")
	hosttest.Write(t, root, host.ProcOSRelease, "6.1.0-28-amd64\n")
	hosttest.Write(t, root, "lib/modules/6.1.0-28-amd64/modules.alias", "alias xprtrdma rpcrdma\nalias svcrdma rpcrdma\n")
	hosttest.Write(t, root, "proc/modules", "rdma_rxe 1 0 - Live 0x0\nrpcrdma 1 0 - Live 0x0\n")
	l := &recordingLoader{}
	acts := (&modules.Part{Host: h, Loader: l}).Apply(context.Background(), policy("/etc/rdma/modules"), devs)
	if l.calls != nil || len(acts) != 1 || acts[0].Status != reconcile.Unchanged {
		t.Errorf("modprobe calls %q, acts %+v", l.calls, acts)
	}
}
