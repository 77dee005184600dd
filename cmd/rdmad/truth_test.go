package main_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/rdmad/rdmad/daemon/dcb"
	"github.com/rdmad/rdmad/daemon/fixturekernel"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/daemon/reconcile"
	"github.com/rdmad/rdmad/dbusapi"
)

// signalLog records every signal rdmad sends, in order.
type signalLog struct {
	mu   sync.Mutex
	sigs []*dbus.Signal
}

func recordRdmadSignals(t *testing.T, addr string) (*signalLog, *dbus.Conn) {
	t.Helper()
	conn, err := dbusapi.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if err := conn.AddMatchSignal(dbus.WithMatchSender(dbusapi.BusName)); err != nil {
		t.Fatal(err)
	}
	ch := make(chan *dbus.Signal, 1<<16)
	conn.Signal(ch)
	l := &signalLog{}
	go func() {
		for s := range ch {
			l.mu.Lock()
			l.sigs = append(l.sigs, s)
			l.mu.Unlock()
		}
	}()
	return l, conn
}

// from returns the signals from index i on.
func (l *signalLog) from(i int) []*dbus.Signal {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*dbus.Signal(nil), l.sigs[min(i, len(l.sigs)):]...)
}

func (l *signalLog) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.sigs)
}

// changed is the value of property name in a PropertiesChanged of path.
func changed(s *dbus.Signal, path dbus.ObjectPath, name string) (any, bool) {
	if s.Path != path || s.Name != "org.freedesktop.DBus.Properties.PropertiesChanged" || len(s.Body) < 2 {
		return nil, false
	}
	v, ok := s.Body[1].(map[string]dbus.Variant)[name]
	return v.Value(), ok
}

// textfile is one write of the metrics textfile: its samples by series.
type textfile map[string]string

func readTextfile(t *testing.T, path string) textfile {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	out := textfile{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		if i := strings.LastIndexByte(line, ' '); i > 0 {
			out[line[:i]] = line[i+1:]
		}
	}
	return out
}

// passTime is a LastReconcile (microseconds) as the textfile writes it.
func passTime(usec uint64) string {
	return strconv.FormatFloat(float64(usec/1000)/1e3, 'f', 3, 64)
}

// TestPublishedTruth runs rdmad on the demo fixture with the metrics
// textfile, a real dbus-daemon and inotify, and checks that whatever
// changes the host's value of a setting changes what rdmad publishes in
// the pass that made or found it, in its PropertiesChanged and in the
// textfile's next write, without another pass:
//   - a correction: one journal line, one SettingCorrected, Port.Corrected
//     and rdmad_drift_corrected_total;
//   - a change reported under [drift] action = "report": RoCETOS and
//     rdmad_port_roce_tos give the kernel's value, rdmad_port_drift 1;
//   - the rule removed: found.json's value (0) is put back, and RoCETOS
//     and rdmad_port_roce_tos are 0 from that pass on (the restore is
//     recorded in the state the pass stores, not only written).
func TestPublishedTruth(t *testing.T) {
	addr := privateBus(t)
	root, env, _ := demoHost(t)
	hosttest.Write(t, root, reconcile.BootIDFile, "0d4b6c8e-5a1f-4f3e-9c2d-7b8a9e0f1a2b\n")
	// No read-back: every read here is one an event or a reload asked for.
	const metrics = "run/rdmad-test/rdmad.prom"
	hosttest.Write(t, root, "etc/rdma/rdmad.d/10-truth.toml", "[drift]\nverify_interval = \"0\"\n[metrics]\ntextfile = \"/"+metrics+"\"\n")
	if err := os.MkdirAll(filepath.Join(root, filepath.Dir(metrics)), 0o755); err != nil {
		t.Fatal(err)
	}
	tosFile := host.ConfigfsPortPath("mlx5_0", 1, "default_roce_tos")
	if got := hosttest.Read(t, root, tosFile); got != "0" {
		t.Fatalf("the fixture's TOS before rdmad: %s", got)
	}
	sigs, conn := recordRdmadSignals(t, addr)
	p := startRdmad(t, env, "--root", root, "--bus", addr, "--verbose")
	port := dbusapi.PortPath("mlx5_0", 1)
	get := func(path dbus.ObjectPath, iface, name string) any {
		var v dbus.Variant
		if err := conn.Object(dbusapi.BusName, path).Call("org.freedesktop.DBus.Properties.Get", 0, iface, name).Store(&v); err != nil {
			return err
		}
		return v.Value()
	}
	eventually(t, "rdmad publishes the TOS it set", func() bool { return get(port, dbusapi.PortIface, "RoCETOS") == int32(106) })
	tos := `rdmad_port_roce_tos{device="mlx5_0",port="1"}`
	// writeOf waits for the textfile's write of the pass that ended at
	// usec (LastReconcile): the next write after it, and fails when a
	// later pass got there first.
	writeOf := func(what string, usec uint64) textfile {
		t.Helper()
		var tf textfile
		eventually(t, what+": the textfile's next write", func() bool {
			tf = readTextfile(t, filepath.Join(root, metrics))
			last, err := strconv.ParseFloat(tf["rdmad_last_reconcile_timestamp_seconds"], 64)
			return err == nil && last*1e3 >= float64(usec/1000)
		})
		if got := tf["rdmad_last_reconcile_timestamp_seconds"]; got != passTime(usec) {
			t.Fatalf("%s: the textfile's next write is of the pass ended at %s, not of %s: another pass ran", what, got, passTime(usec))
		}
		return tf
	}
	// passOf waits for the Manager's LastReconcile signal after signal
	// index i and returns it and its index.
	passOf := func(what string, i int) (uint64, int) {
		t.Helper()
		var usec uint64
		var at int
		eventually(t, what+": a pass", func() bool {
			for j, s := range sigs.from(i) {
				if v, ok := changed(s, dbusapi.RootPath, "LastReconcile"); ok {
					usec, at = v.(uint64), i+j
					return true
				}
			}
			return false
		})
		return usec, at
	}
	fullPasses := func() int { return strings.Count(p.logs.String(), "msg=reconciled full=true") }

	// A correction.
	start := sigs.len()
	hosttest.Write(t, root, tosFile, "0\n")
	var correction []*dbus.Signal
	eventually(t, "SettingCorrected", func() bool {
		for i, s := range sigs.from(start) {
			if s.Name == dbusapi.ManagerIface+".SettingCorrected" {
				correction = sigs.from(start)[:i+1]
				return true
			}
		}
		return false
	})
	last := correction[len(correction)-1]
	if fmt.Sprint(last.Body) != fmt.Sprint([]any{port, "roce_tos", "0", "106"}) {
		t.Errorf("SettingCorrected %v", last.Body)
	}
	usec, _ := passOf("the correction", start)
	var counted bool
	for _, s := range correction {
		if v, ok := changed(s, port, "Corrected"); ok {
			counted = fmt.Sprint(v) == "map[roce_tos:1]"
		}
	}
	if !counted {
		t.Error("no PropertiesChanged of Corrected came with the correction")
	}
	if n := strings.Count(p.logs.String(), "corrected a setting changed behind rdmad's back"); n != 1 {
		t.Errorf("the correction has %d journal lines, want 1", n)
	}
	tf := writeOf("the correction", usec)
	if tf[`rdmad_drift_corrected_total{setting="roce_tos"}`] != "1" || tf[tos] != "106" {
		t.Errorf("the correction's write: corrected %s, TOS %s", tf[`rdmad_drift_corrected_total{setting="roce_tos"}`], tf[tos])
	}
	time.Sleep(200 * time.Millisecond) // the echo of rdmad's own write, read and found as stored
	if n := len(filterSignals(sigs.from(start), dbusapi.ManagerIface+".SettingCorrected")); n != 1 {
		t.Errorf("%d SettingCorrected for one correction", n)
	}

	// A change reported under "report".
	passes := fullPasses()
	hosttest.Write(t, root, "etc/rdma/rdmad.d/10-truth.toml", "[drift]\nverify_interval = \"0\"\naction = \"report\"\n[metrics]\ntextfile = \"/"+metrics+"\"\n")
	eventually(t, "the reload under report", func() bool { return fullPasses() > passes })
	time.Sleep(300 * time.Millisecond) // the reload's pass and its echoes are done
	start = sigs.len()
	hosttest.Write(t, root, tosFile, "7\n")
	eventually(t, "the reported TOS published", func() bool {
		for _, s := range sigs.from(start) {
			if v, ok := changed(s, port, "RoCETOS"); ok && v == int32(7) {
				return true
			}
		}
		return false
	})
	usec, _ = passOf("the report", start)
	if got := hosttest.Read(t, root, tosFile); got != "7" {
		t.Errorf("report mode wrote the TOS back: %s", got)
	}
	tf = writeOf("the report", usec)
	if tf[tos] != "7" || tf[`rdmad_port_drift{device="mlx5_0",port="1",setting="roce_tos"}`] != "1" {
		t.Errorf("the report's write: TOS %s, drift %s", tf[tos], tf[`rdmad_port_drift{device="mlx5_0",port="1",setting="roce_tos"}`])
	}

	// The rule goes: found.json's 0 is put back and published by the
	// same pass.
	time.Sleep(300 * time.Millisecond)
	before := fullPasses()
	start = sigs.len()
	if err := os.Remove(filepath.Join(root, "etc/rdma/rdmad.d/50-roce.toml")); err != nil {
		t.Fatal(err)
	}
	removed := time.Now()
	usec, _ = passOf("the removal", start)
	if got := get(port, dbusapi.PortIface, "RoCETOS"); got != int32(0) {
		t.Errorf("RoCETOS once the removal's pass is published: %v, want 0 (found.json's value, put back)", got)
	} else {
		t.Logf("RoCETOS 0 published %s after the rule went", time.Since(removed).Round(time.Millisecond))
	}
	if got := hosttest.Read(t, root, tosFile); got != "0" {
		t.Errorf("TOS in configfs after the rule went: %s", got)
	}
	tf = writeOf("the removal", usec)
	if tf[tos] != "0" {
		t.Errorf("the removal's write: %s %s, want 0", tos, tf[tos])
	}
	if n := fullPasses() - before; n != 1 {
		t.Errorf("%d full passes since the rule went, want 1: the value must be published by the pass that put it back", n)
	}
}

func filterSignals(sigs []*dbus.Signal, name string) []*dbus.Signal {
	var out []*dbus.Signal
	for _, s := range sigs {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// TestQoSShowReadsTheHostNow: rdmactl qos show and roce show print the
// host's values as of the call. On the demo fixture no [[qos]] rule
// declares trust, so rdmad reads it at its full passes only; another
// manager switches ens1f0np0 to DSCP trust, and the next qos show says
// dscp at once (rdmad read it for the call), while the published property
// still holds the last read. A TOS written behind rdmad's back under
// "report" is there too.
func TestQoSShowReadsTheHostNow(t *testing.T) {
	addr := privateBus(t)
	root, env, _ := demoHost(t)
	hosttest.Write(t, root, "etc/rdma/rdmad.d/10-drift.toml", "[drift]\nverify_interval = \"0\"\n")
	startRdmad(t, env, "--root", root, "--bus", addr)
	ctl := func(args ...string) (string, error) {
		out, err := exec.Command(rdmactlBin, append([]string{"--bus", addr}, args...)...).CombinedOutput()
		return string(out), err
	}
	eventually(t, "qos show lists ens1f0np0 with PCP trust", func() bool {
		out, err := ctl("qos", "show", "mlx5_0/1")
		return err == nil && strings.Contains(out, "mlx5_0/1  ens1f0np0  pcp")
	})
	changedAt := time.Now()
	otherManager(t, root, func(s *fixturekernel.State) {
		s.Netdevs["ens1f0np0"].DCB.App = []fixturekernel.App{{Selector: dcb.SelDSCP, Protocol: 26, Priority: 3}}
	})
	out, err := ctl("qos", "show", "mlx5_0/1")
	if err != nil || !strings.Contains(out, "mlx5_0/1  ens1f0np0  dscp") || !strings.Contains(out, "Values read from the host at ") {
		t.Errorf("qos show right after the trust change (%v):\n%s", err, out)
	}
	out, err = ctl("-o", "json", "qos", "show", "mlx5_0/1")
	var rows []struct {
		Trust string `json:"trust"`
		Read  uint64 `json:"read_usec"`
	}
	if err != nil || json.Unmarshal([]byte(out), &rows) != nil || len(rows) != 1 || rows[0].Trust != "dscp" || time.UnixMicro(int64(rows[0].Read)).Before(changedAt) {
		t.Errorf("qos show -o json right after the trust change: %s", out)
	}
	// What rdmad publishes is its last read: the trust it read at its
	// full pass (a notification of an undeclared setting reads nothing).
	conn, err := dbusapi.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var published string
	if err := conn.Object(dbusapi.BusName, dbusapi.PortPath("mlx5_0", 1)).Call("org.freedesktop.DBus.Properties.Get", 0, dbusapi.PortIface, "QoSTrust").Store(&published); err != nil {
		t.Fatal(err)
	}
	t.Logf("the published QoSTrust meanwhile: %s", published)

	// roce show: the host's TOS at the call too.
	hosttest.Write(t, root, "etc/rdma/rdmad.d/10-drift.toml", "[drift]\nverify_interval = \"0\"\naction = \"report\"\n")
	if out, err := ctl("reload"); err != nil {
		t.Fatalf("reload: %v\n%s", err, out)
	}
	hosttest.Write(t, root, host.ConfigfsPortPath("mlx5_0", 1, "default_roce_tos"), "9\n")
	out, err = ctl("roce", "show", "mlx5_0/1")
	if err != nil || !strings.Contains(out, "mlx5_0/1  RoCE v2  9 ") {
		t.Errorf("roce show right after the TOS change (%v):\n%s", err, out)
	}
}
