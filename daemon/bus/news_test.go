package bus_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/rdmad/rdmad/daemon/bus"
	"github.com/rdmad/rdmad/daemon/compose"
	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/daemon/netns/netnstest"
	"github.com/rdmad/rdmad/daemon/reconcile"
	"github.com/rdmad/rdmad/daemon/service"
	"github.com/rdmad/rdmad/dbusapi"
	"github.com/rdmad/rdmad/test/bustest"
	"github.com/rdmad/rdmad/test/livetest"
)

// newsEnv is rdmad on the mlx5 fixture with a TOS of 106 declared on
// mlx5_0, its journal kept, and a recorder of every signal it sends.
type newsEnv struct {
	root string
	addr string
	d    *daemon
	log  *livetest.SyncBuffer
	sigs *busSignals
	conn *dbus.Conn
}

func newNewsEnv(t *testing.T, cfg string) *newsEnv {
	t.Helper()
	dir := bustest.PublicDir(t)
	addr := privateBus(t, dir)
	root := fixture(t, dir, "mlx5", mlx5Config+cfg)
	conn, err := dbusapi.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	e := &newsEnv{root: root, addr: addr}
	e.sigs = recordSignals(t, addr)
	h := host.New(root)
	e.d = startDaemonAuth(t, conn, h, compose.Kernel{Modules: &hosttest.Modprobe{Root: root}, Netns: netnstest.New(config.NetnsShared)},
		&bus.PolkitAuthorizer{Conn: conn, PolkitTimeout: 10 * time.Second})
	e.log = e.d.logs
	e.conn = dialT(t, addr)
	return e
}

const tosConfig = `
[[roce]]
device = "mlx5_0"
tos = 106
`

// tamper is another process writing mlx5_0/1's TOS; recheck is what the
// event of that write makes rdmad do.
func (e *newsEnv) tamper(t *testing.T, tos string) {
	t.Helper()
	hosttest.Write(t, e.root, host.ConfigfsPortPath("mlx5_0", 1, "default_roce_tos"), tos+"\n")
	e.d.svc.Reconciler().Pass(t.Context(), e.d.svc.PolicyInForce(), reconcile.Scope{Recheck: map[string]bool{"mlx5_0": true}})
}

var port0 = dbusapi.PortPath("mlx5_0", 1)

func isSignal(s *dbus.Signal, member string) bool { return s.Name == dbusapi.ManagerIface+"."+member }

func count(sigs []*dbus.Signal, member string) int {
	n := 0
	for _, s := range sigs {
		if isSignal(s, member) {
			n++
		}
	}
	return n
}

// portChange is the body of a PropertiesChanged of mlx5_0/1 that changes
// name, or nil.
func portChange(s *dbus.Signal, name string) *dbus.Variant {
	if s.Path != port0 || s.Name != "org.freedesktop.DBus.Properties.PropertiesChanged" || len(s.Body) < 2 {
		return nil
	}
	if v, ok := s.Body[1].(map[string]dbus.Variant)[name]; ok {
		return &v
	}
	return nil
}

// A correction is one SettingCorrected signal (the port's path, the
// setting, the value found, the value restored) and one line of the
// journal; the signal comes after the port's PropertiesChanged that
// counts it in Corrected, so a client that reads then reads the state
// after it. Five within a minute make the setting contested: one
// SettingContested with the count, after the fifth correction.
func TestCorrectionIsOneSignalAndOneLine(t *testing.T) {
	e := newNewsEnv(t, tosConfig)
	e.tamper(t, "0")
	sigs := e.sigs.until(t, "SettingCorrected", func(s *dbus.Signal) bool { return isSignal(s, "SettingCorrected") })
	last := sigs[len(sigs)-1]
	if fmt.Sprint(last.Path, last.Body) != fmt.Sprint(dbusapi.RootPath, []any{port0, "roce_tos", "0", "106"}) {
		t.Errorf("SettingCorrected from %s with %v", last.Path, last.Body)
	}
	var counted bool
	for _, s := range sigs[:len(sigs)-1] {
		if v := portChange(s, "Corrected"); v != nil {
			counted = fmt.Sprint(v.Value()) == "map[roce_tos:1]"
		}
	}
	if !counted {
		t.Errorf("no PropertiesChanged counting the correction came before SettingCorrected: %v", sigs)
	}
	var corrected map[string]uint32
	if err := e.conn.Object(dbusapi.BusName, port0).Call("org.freedesktop.DBus.Properties.Get", 0, dbusapi.PortIface, "Corrected").Store(&corrected); err != nil || corrected["roce_tos"] != 1 {
		t.Errorf("Corrected = %v, %v", corrected, err)
	}
	if n := strings.Count(e.log.String(), "corrected a setting changed behind rdmad's back"); n != 1 {
		t.Errorf("the correction has %d journal lines, want 1:\n%s", n, e.log)
	}

	for i := 2; i <= reconcile.ContestCorrections; i++ {
		e.tamper(t, "0")
	}
	sigs = e.sigs.until(t, "SettingContested", func(s *dbus.Signal) bool { return isSignal(s, "SettingContested") })
	last = sigs[len(sigs)-1]
	if fmt.Sprint(last.Body) != fmt.Sprint([]any{port0, "roce_tos", uint32(reconcile.ContestCorrections)}) {
		t.Errorf("SettingContested with %v", last.Body)
	}
	if n := count(sigs, "SettingCorrected"); n != reconcile.ContestCorrections || !isSignal(sigs[len(sigs)-2], "SettingCorrected") {
		t.Errorf("%d SettingCorrected before the contest, want %d", n, reconcile.ContestCorrections)
	}
	if n := strings.Count(e.log.String(), "corrected a setting changed behind rdmad's back"); n != reconcile.ContestCorrections {
		t.Errorf("%d corrections in the journal, want %d", n, reconcile.ContestCorrections)
	}
}

// While a setting is contested it is published as contested, with when
// the value shown was read; the other manager writing it again is not
// published again. A sentinel change on another device, sent after the
// rewrites, shows that no signal for mlx5_0/1 came between (one
// connection delivers in order).
func TestContestedIsNotRepublishedAtEveryWrite(t *testing.T) {
	e := newNewsEnv(t, tosConfig)
	for i := 0; i < reconcile.ContestCorrections; i++ {
		e.tamper(t, "0")
	}
	e.sigs.until(t, "SettingContested", func(s *dbus.Signal) bool { return isSignal(s, "SettingContested") })
	// A setting in a back-off is read at most once a ContestReadInterval
	// (the contest's start was its last read).
	time.Sleep(reconcile.ContestReadInterval + 100*time.Millisecond)
	e.tamper(t, "7")
	sigs := e.sigs.until(t, "contested with 7", func(s *dbus.Signal) bool {
		v := portChange(s, "Settings")
		return v != nil && strings.Contains(fmt.Sprint(v.Value()), "roce_tos RoCE TOS 106") && strings.Contains(fmt.Sprint(v.Value()), " 7 contested ")
	})
	seen := len(sigs)
	text := fmt.Sprint(portChange(sigs[len(sigs)-1], "Settings").Value())
	if !strings.Contains(text, "the value shown was read at ") {
		t.Errorf("the contested setting does not say when its value was read: %s", text)
	}
	// A second apart at least: the why gives the read time in seconds.
	for i := 0; i < 2; i++ {
		time.Sleep(1100 * time.Millisecond)
		e.tamper(t, "7")
	}
	// The sentinel: a runtime TOS on mlx5_1.
	if err := e.d.svc.SetRoCE(t.Context(), service.RoCEChange{Device: "mlx5_1", Port: 1, TOS: 9}); err != nil {
		t.Fatal(err)
	}
	sentinel := dbusapi.PortPath("mlx5_1", 1)
	sigs = e.sigs.until(t, "the sentinel", func(s *dbus.Signal) bool {
		return s.Path == sentinel && s.Name == "org.freedesktop.DBus.Properties.PropertiesChanged"
	})
	for _, s := range sigs[seen:] {
		if s.Path == port0 {
			t.Errorf("the other manager's rewrites of the same value were published: %s %v", s.Name, s.Body)
		}
	}
}

// The contract documents every signal the Manager sends, as the bus
// sends them (TestContractMatchesServedObjects compares the rest).
func TestSignalsAreInTheContract(t *testing.T) {
	ci := dbusapi.TheContract().Interface(dbusapi.ManagerIface)
	for _, name := range []string{bus.SignalSettingCorrected, bus.SignalSettingContested} {
		if ci.Member("signal", name) == nil {
			t.Errorf("org.rdmad1.xml lacks signal %s", name)
		}
	}
	b, err := os.ReadFile(filepath.Join(hosttest.RepoRoot(), "docs/dbus-api.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "`SettingCorrected(o object, s setting, s found, s restored)`") ||
		!strings.Contains(string(b), "`SettingContested(o object, s setting, u count)`") {
		t.Error("docs/dbus-api.md lacks the signals: go generate ./dbusapi")
	}
}
