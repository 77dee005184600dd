// Package promtest finds Prometheus's tools for the tests of rdmad's
// metrics and rules (promtool, prometheus, node_exporter) and runs the
// servers on loopback. test/install-deps.sh takes the binaries from
// Debian's prometheus and prometheus-node-exporter packages into .tools/
// (installing the packages would start their services); a binary in PATH
// is used first.
package promtest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/test/livetest"
)

// Tool is the path of the first of names found in PATH or in .tools/. A
// missing tool skips the test, or fails it where test/install-deps.sh
// ran (make test sets RDMAD_TEST_DEPS=1): it installs them.
func Tool(t testing.TB, names ...string) string {
	t.Helper()
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
		p := filepath.Join(hosttest.RepoRoot(), ".tools", n)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0 {
			return p
		}
	}
	if os.Getenv("RDMAD_TEST_DEPS") != "" {
		t.Fatalf("%s is missing although test/install-deps.sh ran (RDMAD_TEST_DEPS is set): it puts it in .tools/", names[0])
	}
	t.Skipf("%s is missing (test/install-deps.sh test puts it in .tools/; make test runs that)", names[0])
	return ""
}

// Promtool is promtool's path.
func Promtool(t testing.TB) string { return Tool(t, "promtool") }

// CheckMetrics runs `promtool check metrics` (Prometheus's own linter:
// naming, units, HELP, duplicates) on data; no output and exit 0 is clean.
func CheckMetrics(t testing.TB, data []byte) {
	t.Helper()
	cmd := exec.Command(Promtool(t), "check", "metrics")
	cmd.Stdin = bytes.NewReader(data)
	out, err := cmd.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		head := data
		if len(head) > 4096 {
			head = append(head[:4096:4096], "\n..."...)
		}
		t.Errorf("promtool check metrics: %v\n%s\non:\n%s", err, out, head)
	}
}

// FreePort is a loopback TCP port nothing listens on at the time of the
// call: the kernel's choice for port 0, released for the server to take.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Server is a server process a test started; it is stopped (SIGTERM, then
// SIGKILL after 10 s) when the test ends, and its output shown if the
// test failed.
type Server struct {
	Name string
	Addr string // 127.0.0.1:port
	cmd  *exec.Cmd
	out  *livetest.SyncBuffer
	done chan struct{}
}

// Start runs bin with args, whose listen address is addr, and waits until
// GET ready (a path) answers 200, at most 60 s.
func Start(t testing.TB, name, addr, ready, bin string, args ...string) *Server {
	t.Helper()
	s := &Server{Name: name, Addr: addr, out: &livetest.SyncBuffer{}, done: make(chan struct{})}
	s.cmd = exec.Command(bin, args...)
	s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { _ = s.cmd.Wait(); close(s.done) }()
	t.Cleanup(func() {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(10 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.done
		}
		if t.Failed() {
			t.Logf("%s output:\n%s", name, s.out.String())
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		if code, _, err := Get(ctx, "http://"+addr+ready); err == nil && code == http.StatusOK {
			return s
		}
		select {
		case <-s.done:
			t.Fatalf("%s exited before it was ready:\n%s", name, s.out.String())
		case <-ctx.Done():
			t.Fatalf("%s not ready at %s within 60 s:\n%s", name, addr, s.out.String())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Get fetches url (loopback only: the servers of these tests) and
// returns the status code and body, at most 16 MiB of it.
func Get(ctx context.Context, url string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, err
	}
	if h := req.URL.Hostname(); h != "127.0.0.1" && h != "localhost" {
		return 0, nil, fmt.Errorf("%s is not on loopback", url)
	}
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	return resp.StatusCode, body, err
}

// Addr is 127.0.0.1 with a free port.
func Addr(t testing.TB) string { return "127.0.0.1:" + strconv.Itoa(FreePort(t)) }
