package cli

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/rdmad/rdmad/dbusapi"
)

// hostile is what a service that is not rdmad could publish under
// org.rdmad1 (anything can own the name on a private bus): terminal escape
// sequences (CSI in its C0 and C1 forms, OSC setting the window title, BEL),
// a carriage return and a newline that forge lines, DEL, in every string
// rdmactl prints.
func hostile() *fakeRdmad {
	const (
		csi    = "\x1b[2J\x1b[31m"                  // clear screen, red
		c1     = "\u009b31m\u0085"                  // CSI and NEL as C1 controls
		osc    = "\x1b]0;pwned\x07"                 // window title
		forged = "\r\nok        host      all good" // a forged doctor line
		bidi   = "\u202e1_5xlm\u2066\u2028"         // right-to-left override, isolate, line separator
	)
	f := fixture()
	f.manager.Version = "6.6" + osc
	f.manager.ConfigError = "bad" + csi + forged
	f.manager.ConfigFiles = append(f.manager.ConfigFiles, "/etc/rdma/rdmad.d/x"+c1+".toml")
	f.manager.LastResult = "ok" + forged
	f.manager.NetnsMode = "shared\x7f" + csi
	f.manager.Links[0].Name = "rxe0" + csi
	f.manager.Links[0].Netdev = "eth1" + c1
	f.manager.Links[1].Source = "runtime" + forged
	d := &f.devices[1]
	d.Name = "mlx5_0" + csi
	d.FirmwareVersion = "16.35" + osc
	d.Netdevs = []string{"ens1f0" + c1}
	d.BoardID = "MT_0000000080" + bidi
	d.Error = "broken" + forged
	p := &d.Ports[0]
	p.Device = d.Name
	p.State = "ACTIVE" + csi
	p.RoCEMode = "RoCE v2" + c1
	p.DesiredRoCESource = "/etc/x.toml:1" + forged
	p.Error = "eio" + osc
	p.QoSTrust = "dscp" + csi
	p.DesiredQoSSource = "/etc/q.toml:2" + forged
	f.devices[2].Ports[0].Error = "eio" + forged
	f.actions[1].Error = "failed" + csi
	f.findings[0].Finding = "fine" + forged
	f.findings[1].Fix = "run" + csi + "rm -rf /" + c1
	f.findings[2].Subject.Device = "rxe0" + osc
	f.reload = "ok" + forged
	f.callErr = &dbus.Error{Name: "org.rdmad1.Error.Failed" + "", Body: []any{"refused" + csi + forged}}
	return f
}

// rawControl matches a control character as a terminal would see it: C0
// other than newline (tabwriter pads with spaces), DEL, and C1 in UTF-8.
var rawControl = regexp.MustCompile(`[\x00-\x09\x0b-\x1f\x7f\x{80}-\x{9f}\p{Cf}\x{2028}\x{2029}]`)

// rdmactl escapes control characters in every string it prints, in every
// format and in its error messages; its JSON still decodes to what the
// service sent (C1 written \u0080..\u009f).
func TestHostileServiceCannotReachTheTerminal(t *testing.T) {
	f := hostile()
	addr := serveFake(t, f)
	dev := "mlx5_0\x1b[2J\x1b[31m"
	for _, cmd := range [][]string{{"status"}, {"device", "list"}, {"device", "show", dev}, {"roce", "show"},
		{"roce", "show", dev + "/1"}, {"qos", "show"}, {"qos", "set", "mlx5_0/1", "--trust", "pcp"}, {"link", "list"}, {"netns", "show"}, {"doctor"}, {"reload"}, {"reconcile"},
		{"roce", "set", "mlx5_0/1", "--tos", "1"}, {"link", "del", "rxe0"}, {"__complete", "device", "show", ""}} {
		for _, format := range [][]string{nil, {"-j"}, {"--json=pretty"}, {"-o", "json"}} {
			args := append(append([]string{}, format...), cmd...)
			code, out, errs := runCLI(addr, args...)
			name := strings.Join(args, " ")
			if m := rawControl.FindString(out + errs); m != "" {
				t.Errorf("rdmactl %q prints the control character %q (exit %d):\n%s%s", name, m, code, out, errs)
			}
			for _, line := range strings.Split(out, "\n") {
				if strings.HasPrefix(line, "ok        host      all good") {
					t.Errorf("rdmactl %q prints a forged line:\n%s", name, out)
				}
			}
			if format != nil && code == 0 && cmd[0] != "__complete" && cmd[0] != "roce" && cmd[0] != "link" && cmd[0] != "qos" || cmd[0] == "doctor" && format != nil {
				if !json.Valid([]byte(out)) {
					t.Errorf("rdmactl %q: not JSON:\n%s", name, out)
				}
			}
		}
	}
	// The JSON decodes to the strings the service sent.
	_, out, _ := runCLI(addr, "-j", "device", "list")
	var devs []dbusapi.Device
	if err := json.Unmarshal([]byte(out), &devs); err != nil || devs[1].Netdevs[0] != "ens1f0\u009b31m\u0085" || devs[1].Name != dev {
		t.Errorf("-j device list does not decode to what was sent: %v %q", err, out)
	}
	if !strings.Contains(out, `ens1f0\u009b31m\u0085`) || !strings.Contains(out, `mlx5_0\u001b[2J`) {
		t.Errorf("-j device list: C0 and C1 not written \\u00NN:\n%s", out)
	}
	// Text shows them as \xNN, as rdmad's Escape writes them.
	_, out, _ = runCLI(addr, "device", "list")
	if !strings.Contains(out, `mlx5_0\x1b[2J\x1b[31m`) || !strings.Contains(out, `ens1f0\xc2\x9b31m\xc2\x85`) {
		t.Errorf("device list does not show the escapes:\n%s", out)
	}
	_, out, _ = runCLI(addr, "device", "show", dev)
	if !strings.Contains(out, `MT_0000000080\xe2\x80\xae1_5xlm\xe2\x81\xa6\xe2\x80\xa8`) {
		t.Errorf("device show does not escape bidi and format controls:\n%s", out)
	}
	_, out, _ = runCLI(addr, "-j", "device", "show", dev)
	if !strings.Contains(out, `MT_0000000080\u202e1_5xlm\u2066\u2028`) {
		t.Errorf("-j device show does not write bidi and format controls \\u escaped:\n%s", out)
	}
}

// A read that rdmad does not answer ends with a clear message (25 s in
// production), exit 1.
func TestReadTimeout(t *testing.T) {
	if ReadTimeout != 25*time.Second {
		t.Errorf("ReadTimeout = %s, want 25s (D-Bus's default method timeout)", ReadTimeout)
	}
	f := fixture()
	f.block = make(chan struct{})
	defer close(f.block)
	addr := serveFake(t, f)
	for _, args := range [][]string{{"status"}, {"device", "list"}, {"doctor"}, {"-j", "link", "list"}} {
		e := newEnv(&strings.Builder{}, &strings.Builder{})
		var out, errb strings.Builder
		e.stdout, e.stderr = &out, &errb
		e.readTimeout = 200 * time.Millisecond
		start := time.Now()
		code := e.run(append([]string{"--bus", addr}, args...))
		if code != ExitFailure || errb.String() != "rdmactl: rdmad did not answer within 200ms: it may be stuck; see systemctl status rdmad and journalctl -u rdmad\n" {
			t.Errorf("%v: exit %d: %q", args, code, errb.String())
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("%v took %s", args, d)
		}
	}
}
