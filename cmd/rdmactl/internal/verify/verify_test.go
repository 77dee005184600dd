package verify_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdmad/rdmad/cmd/rdmactl/internal/verify"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
)

// fakeTools puts stand-ins for ibv_rc_pingpong, rping and ib_write_bw
// first in PATH (the real ones run in the VM test): a server (no host
// argument) waits to be killed or ends after its one exchange, a client
// connects once the server has written its ready file, and FAKE_FAIL
// names a tool that fails the way the real one does. Every call is logged.
func fakeTools(t *testing.T, fail string) (log string) {
	t.Helper()
	dir := t.TempDir()
	log = filepath.Join(dir, "calls")
	ready := filepath.Join(dir, "ready")
	script := `#!/bin/sh
tool=$(basename "$0")
echo "$tool $*" >> ` + log + `
last=""; for a in "$@"; do last=$a; done
server=true
case "$tool:$*" in
rping:*-c*) server=false ;;
rping:*) ;;
*) case "$last" in 127.0.0.1) server=false ;; esac ;;
esac
if $server; then
	[ "$FAKE_FAIL" = "$tool" ] && { echo "Couldn't register MR" >&2; exit 1; }
	touch ` + ready + `.$tool
	[ "$FAKE_FAIL" = "$tool-hang" ] && exec sleep 60
	case "$FAKE_FAIL" in "$tool-refused"*) echo "rping server listening"; exec sleep 60 ;; esac
	sleep 0.3; exit 0
fi
[ -e ` + ready + `.$tool ] || { echo "Couldn't connect to 127.0.0.1" >&2; exit 1; }
[ "$FAKE_FAIL" = "$tool-refused-then-hang" ] && [ -e ` + ready + `.again ] && exec sleep 60
[ "$FAKE_FAIL" = "$tool-refused-then-hang" ] && { touch ` + ready + `.again; printf 'cma event RDMA_CM_EVENT_REJECTED, error 28\nconnect error -1\n' >&2; exit 1; }
[ "$FAKE_FAIL" = "$tool-refused" ] && { printf 'cma event RDMA_CM_EVENT_REJECTED, error 28\nconnect error -1\n' >&2; exit 1; }
[ "$FAKE_FAIL" = "$tool-hang" ] && exec sleep 60
case $tool in
ib_write_bw) printf ' #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n 65536      93821            0.00               %s               0.046925\n' "${FAKE_BW:-24.60}" ;;
ibv_rc_pingpong) echo "134217728 bytes in 0.05 seconds = 21474.84 Mbit/sec" ;;
rping) echo "client DISCONNECT EVENT..." ;;
esac
`
	for _, tool := range []string{"ibv_rc_pingpong", "rping", "ib_write_bw"} {
		if err := os.WriteFile(filepath.Join(dir, tool), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", dir+":"+os.Getenv("PATH"))
	t.Setenv("FAKE_FAIL", fail)
	return log
}

func calls(t *testing.T, log string) string {
	t.Helper()
	b, _ := os.ReadFile(log)
	return string(b)
}

// options on the Soft-RoCE fixture host: rxe0/1 ACTIVE on veth0 (which
// has 10.0.0.1), memlock unlimited.
func options(t *testing.T) verify.Options {
	t.Helper()
	return verify.Options{
		Root:    hosttest.Copy(t, "rxe-ready"),
		Timeout: 5 * time.Second,
		Memlock: func() (uint64, error) { return unix.RLIM_INFINITY, nil },
		Addrs: func(n string) ([]net.IP, error) {
			if n == "veth0" {
				return []net.IP{net.ParseIP("10.0.0.1")}, nil
			}
			return nil, nil
		},
	}
}

func summary(steps []verify.Step) string {
	var b strings.Builder
	for _, s := range steps {
		b.WriteString(s.Subject + " " + s.Name + " " + string(s.Result) + "\n")
	}
	return b.String()
}

func TestAllStepsPass(t *testing.T) {
	log := fakeTools(t, "")
	o := options(t)
	o.MinBandwidth = 10
	o.Size = 64 << 20
	steps, err := verify.Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	want := "host memlock ok\nrxe0/1 uverbs ok\nrxe0/1 rc ok\nrxe0/1 rdma-cm ok\nrxe0/1 bandwidth ok\n"
	if got := summary(steps); got != want || verify.Failed(steps) {
		t.Fatalf("steps:\n%s\nwant\n%s%+v", got, want, steps)
	}
	c := calls(t, log)
	for _, w := range []string{
		"ibv_rc_pingpong -d rxe0 -i 1 -s 67108864 -n 1 -p ", " -g 0 127.0.0.1\n",
		"rping -s -a 10.0.0.1 -p ", "rping -c -a 10.0.0.1 -p ",
		"ib_write_bw -d rxe0 -i 1 -p ", "-D 2 --report_gbits -F -s 65536 -x 0 127.0.0.1\n",
	} {
		if !strings.Contains(c, w) {
			t.Errorf("no call with %q:\n%s", w, c)
		}
	}
	if d := steps[2].Detail; !strings.Contains(d, "128 MiB moved over a reliable connection with a registered 64 MiB buffer") {
		t.Errorf("rc detail %q", d)
	}
	if d := steps[4].Detail; d != "24.6 Gb/s RDMA write, at least 10" {
		t.Errorf("bandwidth detail %q", d)
	}
}

// A memlock limit below the buffer fails first, naming the fix, and no
// traffic is attempted.
func TestMemlockBelowTheSizeFailsFirst(t *testing.T) {
	log := fakeTools(t, "")
	o := options(t)
	o.Memlock = func() (uint64, error) { return 8 << 20, nil }
	steps, _ := verify.Run(context.Background(), o)
	if got := summary(steps); got != "host memlock fail\nrxe0/1 uverbs ok\nrxe0/1 rc skipped\nrxe0/1 rdma-cm skipped\n" {
		t.Fatalf("steps:\n%s", got)
	}
	m := steps[0]
	if m.Detail != "RLIMIT_MEMLOCK is 8 MiB, below the 64 MiB buffer to register" || !strings.Contains(m.Fix, "usermod -aG rdma USER") || !strings.Contains(m.Fix, "LimitMEMLOCK=infinity") {
		t.Errorf("memlock step %+v", m)
	}
	if c := calls(t, log); c != "" {
		t.Errorf("tools ran: %s", c)
	}
}

// A tool that fails or is missing fails its step with the cause and the
// package to install; a hung one is ended by the port's timeout.
func TestToolFailures(t *testing.T) {
	fakeTools(t, "ibv_rc_pingpong")
	steps, _ := verify.Run(context.Background(), options(t))
	rc := steps[2]
	if rc.Name != "rc" || rc.Result != verify.Fail || !strings.Contains(rc.Cause, "Couldn't register MR") || !strings.Contains(rc.Fix, "memlock") {
		t.Errorf("rc step %+v", rc)
	}

	fakeTools(t, "rping-hang")
	o := options(t)
	o.Timeout = 1 * time.Second
	start := time.Now()
	steps, _ = verify.Run(context.Background(), o)
	if took := time.Since(start); took > 4*time.Second {
		t.Errorf("a hung tool held verify %s past its 1 s timeout", took)
	}
	cm := steps[3]
	if cm.Name != "rdma-cm" || cm.Result != verify.Fail || !strings.Contains(cm.Detail, "did not finish within the port's 1s") {
		t.Errorf("rdma-cm step %+v", cm)
	}

	// A client refused until the timeout: the cause has its last lines (the
	// CM event, not only "connect error -1") and what the server said.
	// Its timeout leaves the client time to run at least once on a loaded
	// machine (a shell start can take most of a second there).
	fakeTools(t, "rping-refused")
	o.Timeout = 5 * time.Second
	steps, _ = verify.Run(context.Background(), o)
	cm = steps[3]
	if want := "no answer within the timeout; client: cma event RDMA_CM_EVENT_REJECTED, error 28 | connect error -1; server: rping server listening"; cm.Result != verify.Fail || cm.Cause != want {
		t.Errorf("refused rdma-cm step %+v, want cause %q", cm, want)
	}

	// A client refused, then cut off by the timeout on its next try: the
	// cause is the refusal, not the silence of the try cut off.
	fakeTools(t, "rping-refused-then-hang")
	o.Timeout = 3 * time.Second
	steps, _ = verify.Run(context.Background(), o)
	if cm = steps[3]; !strings.Contains(cm.Cause, "client: cma event RDMA_CM_EVENT_REJECTED") {
		t.Errorf("refused then cut off: rdma-cm step %+v, want the refusal in its cause", cm)
	}

	t.Setenv("PATH", t.TempDir())
	steps, _ = verify.Run(context.Background(), options(t))
	rc = steps[2]
	if rc.Result != verify.Fail || rc.Detail != "ibv_rc_pingpong is not installed" || !strings.Contains(rc.Fix, "apt-get install ibverbs-utils") {
		t.Errorf("missing tool: %+v", rc)
	}
}

func TestBandwidthBelowTheMinimum(t *testing.T) {
	fakeTools(t, "")
	t.Setenv("FAKE_BW", "3.20")
	o := options(t)
	o.MinBandwidth = 10
	steps, _ := verify.Run(context.Background(), o)
	bw := steps[len(steps)-1]
	if bw.Name != "bandwidth" || bw.Result != verify.Fail || bw.Detail != "3.2 Gb/s, below the 10 asked for" {
		t.Errorf("bandwidth step %+v", bw)
	}
}

// Access to the user-verbs device: missing module, missing node, a node
// this user cannot open.
func TestUverbsAccess(t *testing.T) {
	fakeTools(t, "")
	o := options(t)
	if err := os.Chmod(filepath.Join(o.Root, "dev/infiniband/uverbs0"), 0o400); err != nil {
		t.Fatal(err)
	}
	steps, _ := verify.Run(context.Background(), o)
	if os.Geteuid() != 0 {
		if u := steps[1]; u.Result != verify.Fail || !strings.Contains(u.Detail, "does not open for this user") || !strings.Contains(u.Fix, "0666") {
			t.Errorf("unreadable node: %+v", u)
		}
	}
	os.Remove(filepath.Join(o.Root, "dev/infiniband/uverbs0"))
	steps, _ = verify.Run(context.Background(), o)
	if u := steps[1]; u.Result != verify.Fail || !strings.Contains(u.Detail, "is missing") {
		t.Errorf("missing node: %+v", u)
	}
	os.RemoveAll(filepath.Join(o.Root, "sys/class/infiniband_verbs"))
	steps, _ = verify.Run(context.Background(), o)
	if u := steps[1]; u.Result != verify.Fail || !strings.Contains(u.Fix, "modprobe ib_uverbs") || steps[2].Result != verify.Skipped {
		t.Errorf("no uverbs: %+v", steps)
	}
}

// Named ports: one that is not ACTIVE fails; a name that is nothing is an
// argument error; no ACTIVE port at all fails.
func TestTargets(t *testing.T) {
	fakeTools(t, "")
	o := options(t)
	hosttest.Write(t, o.Root, "sys/class/infiniband/rxe0/ports/1/state", "1: DOWN\n")
	o.Targets = []string{"rxe0/1"}
	steps, err := verify.Run(context.Background(), o)
	if err != nil || summary(steps) != "host memlock ok\nrxe0/1 port fail\n" {
		t.Errorf("named DOWN port: %v\n%s", err, summary(steps))
	}
	o.Targets = nil
	steps, _ = verify.Run(context.Background(), o)
	if summary(steps) != "host memlock ok\nhost port fail\n" {
		t.Errorf("no ACTIVE port:\n%s", summary(steps))
	}
	o.Targets = []string{"mlx5_0"}
	if _, err := verify.Run(context.Background(), o); err == nil || !strings.Contains(err.Error(), `"mlx5_0": no such RDMA device or port`) {
		t.Errorf("unknown target: %v", err)
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]uint64{"64M": 64 << 20, "64MiB": 64 << 20, "1g": 1 << 30, "4096": 4096, "8K": 8192} {
		if got, err := verify.ParseSize(in); err != nil || got != want {
			t.Errorf("%s = %d, %v", in, got, err)
		}
	}
	for _, bad := range []string{"", "0", "1.5G", "64X", "-1"} {
		if _, err := verify.ParseSize(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
