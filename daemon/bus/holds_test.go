package bus_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/rdmad/rdmad/daemon/bus"
	"github.com/rdmad/rdmad/daemon/compose"
	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/daemon/netns/netnstest"
	"github.com/rdmad/rdmad/daemon/service"
	"github.com/rdmad/rdmad/dbusapi"
	"github.com/rdmad/rdmad/dbusapi/client"
	"github.com/rdmad/rdmad/test/bustest"
)

const heldTOS = "sys/kernel/config/rdma_cm/mlx5_0/ports/1/default_roce_tos"

// holdsOf reads Manager.Holds.
func holdsOf(t *testing.T, conn *dbus.Conn) []dbusapi.Hold {
	t.Helper()
	v, err := conn.Object(dbusapi.BusName, dbusapi.RootPath).GetProperty(dbusapi.ManagerIface + ".Holds")
	if err != nil {
		t.Fatal(err)
	}
	var out []dbusapi.Hold
	if err := dbus.Store([]any{v.Value()}, &out); err != nil {
		t.Fatalf("Manager.Holds %v: %v", v, err)
	}
	return out
}

// A hold on a real bus: rdmad publishes it, writes no held setting (a
// forced Reconcile neither), says so in the setting's record, Describe and
// doctor (corrections-held, not roce-tos-differs), and refuses a release
// by anyone but the holder. The lease ends when the holder's connection
// closes: the hold goes and rdmad corrects the TOS it left; a hold ended
// by ReleaseCorrections does the same.
func TestHoldIsALeaseOnTheBus(t *testing.T) {
	e := newAuthEnv(t, bustest.Start, defaultAuth)
	ctx := t.Context()
	holder, err := client.Connect(e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	if err := holder.HoldCorrections(ctx, "mlx5_0", 1, []string{"roce_tos", "qos_pfc"}); err != nil {
		t.Fatal(err)
	}
	hs := holdsOf(t, e.root0.Conn())
	if len(hs) != 1 || hs[0].Device != "mlx5_0" || hs[0].Port != 1 || strings.Join(hs[0].Settings, ",") != "roce_tos,qos_pfc" ||
		!strings.HasPrefix(hs[0].Holder, holder.Conn().Names()[0]+" (") || !strings.Contains(hs[0].Holder, "(uid 0), pid ") || hs[0].Since == 0 {
		t.Fatalf("Manager.Holds %+v (holder %s)", hs, holder.Conn().Names()[0])
	}

	hosttest.Write(t, e.root, heldTOS, "0\n")
	if _, err := e.root0.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if got := e.readTOS(t); got != "0" {
		t.Fatalf("a Reconcile wrote the held TOS: %s", got)
	}
	doc, err := e.root0.Describe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var d dbusapi.Description
	if err := json.Unmarshal([]byte(doc), &d); err != nil {
		t.Fatal(err)
	}
	if len(d.Holds) != 1 || d.Holds[0].Holder != hs[0].Holder {
		t.Errorf("Describe's holds: %+v", d.Holds)
	}
	var tos dbusapi.Setting
	for _, st := range portOf(&d, "mlx5_0", 1).Settings {
		if st.Name == "roce_tos" {
			tos = st
		}
	}
	if tos.State != "differs" || tos.Observed != "0" || !strings.Contains(tos.Why, "held by "+hs[0].Holder) {
		t.Errorf("the held TOS's record: %+v", tos)
	}
	findings := diagnose(t, e.root0)
	if f, ok := findingOf(findings, "corrections-held"); !ok || f.Severity != dbusapi.SeverityWarn ||
		!strings.Contains(f.Finding, "rdmad does not correct roce_tos, qos_pfc: held by "+hs[0].Holder) ||
		!strings.Contains(f.Finding, "RoCE TOS is 0, declared 106") {
		t.Errorf("corrections-held: %+v", f)
	}
	if f, ok := findingOf(findings, "roce-tos-differs"); ok {
		t.Errorf("a held setting is also a failing finding: %+v", f)
	}

	// Only the holder releases its hold.
	if err := e.root0.ReleaseCorrections(ctx, "mlx5_0", 1); client.ErrorName(err) != dbusapi.ErrInvalidArgs {
		t.Errorf("a release by another caller: %v", err)
	}
	// The holder leaves: the lease ends, the TOS it left is corrected.
	holder.Close()
	waitFor(t, "the hold ends when its holder leaves the bus", func() bool { return len(holdsOf(t, e.root0.Conn())) == 0 })
	waitFor(t, "the TOS is corrected after the hold", func() bool { return e.readTOS(t) == "106" })

	// An explicit release ends it too.
	again, err := client.Connect(e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if err := again.HoldCorrections(ctx, "mlx5_0", 1, []string{"roce_tos"}); err != nil {
		t.Fatal(err)
	}
	hosttest.Write(t, e.root, heldTOS, "3\n")
	if _, err := e.root0.Reconcile(ctx); err != nil || e.readTOS(t) != "3" {
		t.Fatalf("held again: Reconcile %v, TOS %s", err, e.readTOS(t))
	}
	if err := again.ReleaseCorrections(ctx, "mlx5_0", 1); err != nil {
		t.Fatal(err)
	}
	if hs := holdsOf(t, e.root0.Conn()); len(hs) != 0 {
		t.Errorf("holds after ReleaseCorrections: %+v", hs)
	}
	waitFor(t, "the TOS is corrected after the release", func() bool { return e.readTOS(t) == "106" })
	if err := again.ReleaseCorrections(ctx, "mlx5_0", 1); client.ErrorName(err) != dbusapi.ErrInvalidArgs {
		t.Errorf("a second release: %v", err)
	}
}

// HoldCorrections' arguments are checked before anyone is asked, and
// [api] changes = "none" refuses it (root included) before root and polkit.
func TestHoldArgumentsAndAPI(t *testing.T) {
	e := newAuthEnv(t, bustest.Start, defaultAuth)
	e.polkit.start(t)
	e.polkit.set(nil, false, false)
	for _, tc := range []struct {
		args []arg
		want string
	}{
		{argsOf(argS("mlx5_0"), argU(0), argAS("roce_tos")), dbusapi.ErrInvalidArgs},
		{argsOf(argS("mlx5_0"), argU(1), argAS()), dbusapi.ErrInvalidArgs},
		{argsOf(argS("mlx5_0"), argU(1), argAS("frob")), dbusapi.ErrInvalidArgs},
		{argsOf(argS("mlx5_0"), argU(1), argAS("memlock")), dbusapi.ErrInvalidArgs},
		{argsOf(argS("mlx5_0"), argU(1), argAS("roce_tos", "roce_tos")), dbusapi.ErrInvalidArgs},
		{argsOf(argS("mlx5_9"), argU(1), argAS("roce_tos")), dbusapi.ErrNoSuchDevice},
		{argsOf(argS("mlx5_0"), argU(7), argAS("roce_tos")), dbusapi.ErrNoSuchPort},
	} {
		if res := callAs(t, e.addr, nobody, true, "HoldCorrections", tc.args...); res.Name != tc.want {
			t.Errorf("HoldCorrections %v: %s %q, want %s", tc.args, res.Name, res.Message, tc.want)
		}
	}
	if checks, _ := e.polkit.take(); len(checks) != 0 {
		t.Errorf("holds with bad arguments reached polkit: %+v", checks)
	}
	if res := callAs(t, e.addr, nobody, false, "ReleaseCorrections", argS("mlx5_0"), argU(1)); res.Name != dbusapi.ErrInvalidArgs || !strings.Contains(res.Message, "holds no corrections") {
		t.Errorf("a release without a hold: %s %q", res.Name, res.Message)
	}
	if checks, _ := e.polkit.take(); len(checks) != 0 {
		t.Errorf("ReleaseCorrections asked polkit: %+v", checks)
	}
	hosttest.Write(t, e.root, config.MainFile, authConfig+"\n[api]\nchanges = \"runtime\"\n")
	if _, err := e.root0.Reload(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := e.root0.HoldCorrections(t.Context(), "mlx5_0", 1, []string{"roce_tos"}); err != nil {
		t.Errorf("root under [api] changes = runtime: %v", err)
	}
	hosttest.Write(t, e.root, config.MainFile, authConfig+"\n[api]\nchanges = \"none\"\n")
	if _, err := e.root0.Reload(t.Context()); err != nil {
		t.Fatal(err)
	}
	apiLine := fmt.Sprintf("%s:%d", config.MainFile, strings.Count(authConfig, "\n")+3)
	if err := e.root0.HoldCorrections(t.Context(), "mlx5_0", 1, []string{"qos_pfc"}); client.ErrorName(err) != dbusapi.ErrNotAllowed || !strings.Contains(client.ErrorMessage(err), apiLine) {
		t.Errorf("root under [api] changes = none: %v", err)
	}
	if res := callAs(t, e.addr, nobody, false, "HoldCorrections", argS("mlx5_0"), argU(1), argAS("roce_tos")); res.Name != dbusapi.ErrNotAllowed {
		t.Errorf("nobody under [api] changes = none: %s %q", res.Name, res.Message)
	}
	if checks, _ := e.polkit.take(); len(checks) != 0 {
		t.Errorf("a hold [api] refuses reached polkit: %+v", checks)
	}
}

func (e *authEnv) readTOS(t *testing.T) string {
	t.Helper()
	return strings.TrimSpace(hosttest.Read(t, e.root, heldTOS))
}

func diagnose(t *testing.T, c *client.Client) []dbusapi.Finding {
	t.Helper()
	doc, err := c.Diagnose(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	fs, err := dbusapi.DecodeFindings(doc)
	if err != nil {
		t.Fatal(err)
	}
	return fs
}

func findingOf(fs []dbusapi.Finding, id string) (dbusapi.Finding, bool) {
	for _, f := range fs {
		if f.ID == id {
			return f, true
		}
	}
	return dbusapi.Finding{}, false
}

func portOf(d *dbusapi.Description, dev string, port uint32) *dbusapi.Port {
	for i := range d.Devices {
		if d.Devices[i].Name != dev {
			continue
		}
		for j := range d.Devices[i].Ports {
			if uint32(d.Devices[i].Ports[j].Number) == port {
				return &d.Devices[i].Ports[j]
			}
		}
	}
	return nil
}

// The Manager publishes the parts' notification table.
func TestNotificationsTableIsPublished(t *testing.T) {
	e := newAuthEnv(t, bustest.Start, defaultAuth)
	v, err := e.root0.Conn().Object(dbusapi.BusName, dbusapi.RootPath).GetProperty(dbusapi.ManagerIface + ".Notifications")
	if err != nil {
		t.Fatal(err)
	}
	var rows []dbusapi.Notification
	if err := dbus.Store([]any{v.Value()}, &rows); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"roce_tos": dbusapi.NoticeInotify, "qos_pfc": dbusapi.NoticeDCB, "qos_pause": dbusapi.NoticeEthtool, "qos_pfc_storm_timeout": dbusapi.NoticeNone}
	for _, r := range rows {
		if w, ok := want[r.Setting]; ok && r.Driver == "" {
			if r.Notice != w || r.Follows == "" {
				t.Errorf("row %+v, want notice %s", r, w)
			}
			delete(want, r.Setting)
		}
	}
	if len(want) > 0 {
		t.Errorf("no row for every driver of %v in %+v", want, rows)
	}
}

// A lost bus connection ends every hold: its holders were on that bus.
func TestHoldsEndWithRdmadsConnection(t *testing.T) {
	e := newAuthEnv(t, bustest.Start, defaultAuth)
	if err := e.root0.HoldCorrections(t.Context(), "mlx5_0", 1, []string{"roce_tos"}); err != nil {
		t.Fatal(err)
	}
	if hs := e.d.svc.Reconciler().Holds(); len(hs) != 1 {
		t.Fatalf("holds %+v", hs)
	}
	e.d.srv.Detach()
	if hs := e.d.svc.Reconciler().Holds(); len(hs) != 0 {
		t.Errorf("holds after the connection was lost: %+v", hs)
	}
}

// matchRules is how many match rules the connection name has on the bus
// (dbus-daemon's statistics), asked on conn.
func matchRules(t *testing.T, conn *dbus.Conn, name string) uint32 {
	t.Helper()
	var stats map[string]dbus.Variant
	if err := conn.BusObject().Call("org.freedesktop.DBus.Debug.Stats.GetConnectionStats", 0, name).Store(&stats); err != nil {
		t.Fatalf("the statistics of %s: %v", name, err)
	}
	n, ok := stats["MatchRules"].Value().(uint32)
	if !ok {
		t.Fatalf("the statistics of %s have no MatchRules: %v", name, stats)
	}
	return n
}

// A holder is followed on the bus by one match rule, however many of its
// first holds arrive at once, and the rule goes when it leaves.
func TestHolderIsFollowedByOneMatchRule(t *testing.T) {
	e := newAuthEnv(t, bustest.Start, defaultAuth)
	rdmad := e.d.conn.Names()[0]
	before := matchRules(t, e.root0.Conn(), rdmad)
	holder, err := client.Connect(e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	const holds = 8
	calls := make([]*dbus.Call, holds)
	for i := range calls {
		calls[i] = holder.Conn().Object(dbusapi.BusName, dbusapi.RootPath).Go(dbusapi.ManagerIface+".HoldCorrections", 0, make(chan *dbus.Call, 1),
			"mlx5_0", uint32(1), []string{"roce_tos"})
	}
	for i, c := range calls {
		if <-c.Done; c.Err != nil {
			t.Fatalf("hold %d: %v", i+1, c.Err)
		}
	}
	if n := matchRules(t, e.root0.Conn(), rdmad); n != before+1 {
		t.Errorf("%d first holds at once: rdmad has %d match rules more than before, want 1", holds, int(n)-int(before))
	}
	holder.Close()
	waitFor(t, "the hold to end when its holder leaves the bus", func() bool { return len(holdsOf(t, e.root0.Conn())) == 0 })
	waitFor(t, "rdmad's match rules to be as before the holds", func() bool { return matchRules(t, e.root0.Conn(), rdmad) == before })
}

// leaveBeforeHold is the service as the bus sees it, with the caller of a
// hold leaving the bus between its lease and its hold: the hold waits
// until the bus released the holder for leaving, then goes in.
type leaveBeforeHold struct {
	*service.Service
	holder   *dbus.Conn
	released chan string // the holders the bus released
	held     atomic.Bool // a hold went in
}

func (w *leaveBeforeHold) HoldCorrections(h service.HoldRequest) error {
	w.holder.Close()
	select {
	case <-w.released:
	case <-time.After(20 * time.Second):
		return errors.New("the bus did not notice its holder left")
	}
	err := w.Service.HoldCorrections(h)
	w.held.Store(err == nil)
	return err
}

func (w *leaveBeforeHold) ReleaseHolder(holder string) {
	w.Service.ReleaseHolder(holder)
	select {
	case w.released <- holder:
	default:
	}
}

var _ bus.Daemon = (*leaveBeforeHold)(nil)

// A caller that leaves the bus between its lease and its hold leaves no
// hold behind: its leave released nothing yet, so the hold is released
// once it is in.
func TestHoldOfACallerGoneBeforeItIsReleased(t *testing.T) {
	dir := bustest.PublicDir(t)
	addr := privateBus(t, dir)
	root := fixture(t, dir, "mlx5", mlx5Config+tosConfig)
	holder := dialT(t, addr)
	conn, err := dbusapi.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	h := host.New(root)
	var w *leaveBeforeHold
	d := startDaemonAs(t, conn, h, compose.Kernel{Modules: &hosttest.Modprobe{Root: root}, Netns: netnstest.New(config.NetnsShared)},
		&bus.PolkitAuthorizer{Conn: conn, PolkitTimeout: 10 * time.Second},
		func(svc *service.Service) bus.Daemon {
			w = &leaveBeforeHold{Service: svc, holder: holder, released: make(chan string, 4)}
			return w
		})
	holder.Object(dbusapi.BusName, dbusapi.RootPath).Go(dbusapi.ManagerIface+".HoldCorrections", 0, make(chan *dbus.Call, 1),
		"mlx5_0", uint32(1), []string{"roce_tos"})
	waitFor(t, "the hold of a caller gone before it to end", func() bool {
		return w.held.Load() && len(d.svc.Reconciler().Holds()) == 0
	})
}
