package verify

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// tool runs a server and a client of one tool on this host: the server
// first, the client again until it connects or the context ends.
type toolRun struct {
	server, client []string
	out            string // the client's output
}

func (r *run) pair(ctx context.Context, t *toolRun) error {
	if _, err := exec.LookPath(t.server[0]); err != nil {
		return fmt.Errorf("%s: %w", t.server[0], errMissingTool)
	}
	srv := exec.CommandContext(ctx, t.server[0], t.server[1:]...)
	var srvOut bytes.Buffer
	srv.Stdout, srv.Stderr = &srvOut, &srvOut
	srv.WaitDelay = time.Second
	if err := srv.Start(); err != nil {
		return err
	}
	srvDone := make(chan error, 1)
	go func() { srvDone <- srv.Wait() }()
	defer func() {
		select {
		case <-srvDone: // it ended by itself
		default:
			_ = srv.Process.Kill()
			<-srvDone
		}
	}()
	var last error
	var lastOut []byte
	for {
		c := exec.CommandContext(ctx, t.client[0], t.client[1:]...)
		c.WaitDelay = time.Second
		out, err := c.CombinedOutput()
		if err == nil {
			t.out = string(out)
			return nil
		}
		// An attempt the timeout cut off says nothing of why the
		// server did not answer: the cause keeps the one before it.
		if ctx.Err() == nil || lastOut == nil {
			last, lastOut = err, out
		}
		select {
		case err := <-srvDone:
			srvDone <- err
			return fmt.Errorf("%w%s%s", last, said("client", lastOut), said("server", srvOut.Bytes()))
		case <-ctx.Done():
			// The server's output is read only once it has ended (its
			// buffer is written by exec's copier until then).
			_ = srv.Process.Kill()
			err := <-srvDone
			srvDone <- err
			return fmt.Errorf("no answer within the timeout%s%s", said("client", lastOut), said("server", srvOut.Bytes()))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// said is the last lines of a tool's output, for a cause: "; WHO: a | b".
// A tool's error is often two lines (rping: the CM event, then "connect
// error -1"), so the last three are kept, at most 300 bytes, valid UTF-8.
func said(who string, b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	var kept []string
	for i := len(lines) - 1; i >= 0 && len(kept) < 3; i-- {
		if l := strings.TrimSpace(lines[i]); l != "" {
			kept = append([]string{l}, kept...)
		}
	}
	s := strings.ToValidUTF8(strings.Join(kept, " | "), "\uFFFD")
	if len(s) > 300 {
		i := len(s) - 300
		for i < len(s) && !utf8.RuneStart(s[i]) {
			i++
		}
		s = s[i:]
	}
	if s == "" {
		return ""
	}
	return "; " + who + ": " + s
}

// toolFailure fills a failed step from a tool's error.
func toolFailure(s *Step, tool string, err error, ctx context.Context, timeout time.Duration) {
	s.Result = Fail
	switch {
	case errors.Is(err, errMissingTool):
		s.Detail, s.Cause, s.Fix = tool+" is not installed", "verify runs rdma-core's and perftest's tools", "apt-get install "+tools[tool][0]+" (RHEL: dnf install "+tools[tool][1]+")"
	case ctx.Err() != nil:
		s.Detail, s.Cause, s.Fix = fmt.Sprintf("%s did not finish within the port's %s", tool, timeout), err.Error(), "raise --timeout on a slow link or emulated device; rdmactl doctor for the port's state"
	default:
		s.Detail, s.Cause = tool+" failed", err.Error()
		switch {
		case strings.Contains(err.Error(), "register") || strings.Contains(err.Error(), "MR"):
			s.Fix = "the buffer did not register: the memlock limit (ulimit -l) or the device's memory; rdmactl doctor"
		default:
			s.Fix = "rdmactl doctor (the port's state, the subnet manager, the GID table); dmesg for the driver"
		}
	}
}

// rc moves the buffer over a reliable connection: ibv_rc_pingpong, one
// exchange of --size bytes each way, the buffer registered once.
func (r *run) rc(ctx context.Context, p port, gid int) {
	start := time.Now()
	s := Step{Subject: p.String(), Name: "rc"}
	tcp := strconv.Itoa(r.freePort())
	args := []string{"-d", p.dev, "-i", strconv.Itoa(p.num), "-s", strconv.FormatUint(r.o.Size, 10), "-n", "1", "-p", tcp}
	if gid >= 0 {
		args = append(args, "-g", strconv.Itoa(gid))
	}
	t := &toolRun{server: append([]string{"ibv_rc_pingpong"}, args...), client: append(append([]string{"ibv_rc_pingpong"}, args...), "127.0.0.1")}
	if err := r.pair(ctx, t); err != nil {
		toolFailure(&s, "ibv_rc_pingpong", err, ctx, r.o.Timeout)
	} else {
		s.Result = OK
		s.Detail = fmt.Sprintf("%s moved over a reliable connection with a registered %s buffer", FormatSize(2*r.o.Size), FormatSize(r.o.Size))
		if gid >= 0 {
			s.Detail += fmt.Sprintf(" (GID index %d)", gid)
		}
	}
	s.Seconds = time.Since(start).Seconds()
	r.add(s)
}

// rdmaCM opens an RDMA-CM connection over an address of the port's
// netdev: rping, one exchange.
func (r *run) rdmaCM(ctx context.Context, p port) {
	start := time.Now()
	s := Step{Subject: p.String(), Name: "rdma-cm"}
	var addr net.IP
	if p.netdev != "" {
		if as, err := r.o.Addrs(p.netdev); err == nil && len(as) > 0 {
			addr = as[0]
		}
	}
	if addr == nil {
		s.Result, s.Detail = Fail, "no IPv4 address on "+orUnknown(p.netdev)
		s.Cause, s.Fix = "RDMA-CM resolves an IP address to the port", "give "+orUnknown(p.netdev)+" an address (ip addr add ADDR/LEN dev "+orUnknown(p.netdev)+")"
	} else {
		cmPort := strconv.Itoa(r.freePort())
		t := &toolRun{
			server: []string{"rping", "-s", "-a", addr.String(), "-p", cmPort, "-C", "1"},
			client: []string{"rping", "-c", "-a", addr.String(), "-p", cmPort, "-C", "1"},
		}
		if err := r.pair(ctx, t); err != nil {
			toolFailure(&s, "rping", err, ctx, r.o.Timeout)
		} else {
			s.Result, s.Detail = OK, "RDMA-CM connection over "+addr.String()+" ("+p.netdev+")"
		}
	}
	s.Seconds = time.Since(start).Seconds()
	r.add(s)
}

// bandwidth measures RDMA write bandwidth with ib_write_bw for 2 seconds.
func (r *run) bandwidth(ctx context.Context, p port, gid int) {
	start := time.Now()
	s := Step{Subject: p.String(), Name: "bandwidth"}
	tcp := strconv.Itoa(r.freePort())
	args := []string{"-d", p.dev, "-i", strconv.Itoa(p.num), "-p", tcp, "-D", "2", "--report_gbits", "-F", "-s", "65536"}
	if gid >= 0 {
		args = append(args, "-x", strconv.Itoa(gid))
	}
	t := &toolRun{server: append([]string{"ib_write_bw"}, args...), client: append(append([]string{"ib_write_bw"}, args...), "127.0.0.1")}
	if err := r.pair(ctx, t); err != nil {
		toolFailure(&s, "ib_write_bw", err, ctx, r.o.Timeout)
	} else if bw, ok := parseBandwidth(t.out); !ok {
		s.Result, s.Detail, s.Cause, s.Fix = Fail, "ib_write_bw printed no bandwidth", strings.TrimPrefix(said("ib_write_bw", []byte(t.out)), "; "), "run ib_write_bw by hand"
	} else if bw < r.o.MinBandwidth {
		s.Result = Fail
		s.Detail = fmt.Sprintf("%s Gb/s, below the %s asked for", fmtGbps(bw), fmtGbps(r.o.MinBandwidth))
		s.Cause = "RDMA write bandwidth on this host's loopback is low"
		s.Fix = "rdmactl doctor (the port's rate, the PCIe link, counters); a host-local loopback measures the adapter and PCIe, not the fabric"
	} else {
		s.Result, s.Detail = OK, fmt.Sprintf("%s Gb/s RDMA write, at least %s", fmtGbps(bw), fmtGbps(r.o.MinBandwidth))
	}
	s.Seconds = time.Since(start).Seconds()
	r.add(s)
}

func fmtGbps(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// parseBandwidth reads ib_write_bw's result line: "#bytes #iterations BW
// peak BW average MsgRate", the average in Gb/s with --report_gbits.
func parseBandwidth(out string) (float64, bool) {
	lines := strings.Split(out, "\n")
	header := false
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) > 0 && f[0] == "#bytes" {
			header = true
			continue
		}
		if header && len(f) >= 4 {
			if _, err := strconv.Atoi(f[0]); err != nil {
				continue
			}
			v, err := strconv.ParseFloat(f[3], 64)
			return v, err == nil
		}
	}
	return 0, false
}
