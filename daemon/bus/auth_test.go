package bus_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/rdmad/rdmad/daemon/bus"
	"github.com/rdmad/rdmad/daemon/compose"
	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/dcb/dcbtest"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/daemon/links/linkstest"
	"github.com/rdmad/rdmad/daemon/netns/netnstest"
	"github.com/rdmad/rdmad/dbusapi"
	"github.com/rdmad/rdmad/dbusapi/client"
	"github.com/rdmad/rdmad/test/bustest"
)

// nobody is the unprivileged caller's uid.
const nobody = 65534

// authConfig is the policy of the authorization tests' host: a TOS to
// drift from, a declared link to delete, and rdmad's drop-in with a
// persisted link and RoCE rule to withdraw.
const authConfig = `[modules]
enable = false

[[roce]]
device = "mlx5_0"
port = 1
tos = 106

[[link]]
name = "rxe0"
type = "rxe"
netdev = "ens1f0np0"
`

const authDropIn = config.PersistedHeader + `
[netns]
mode = "shared"

[[roce]]
device = "mlx5_1"
port = 1
tos = 5

[[link]]
name = "rxe1"
type = "rxe"
netdev = "ens1f1np1"
`

// authEnv is rdmad with every kernel interface faked on the mlx5 fixture,
// a real bus and the polkit fake (not on the bus until started).
type authEnv struct {
	addr, root string
	d          *daemon
	dcb        *dcbtest.Fake
	netns      *netnstest.Kernel
	links      *linkstest.Netlink
	polkit     *polkitFake
	root0      *client.Client // a root client for setting up
}

func newAuthEnv(t *testing.T, start func(testing.TB) string, auth func(*dbus.Conn) bus.Authorizer) *authEnv {
	t.Helper()
	dir := bustest.PublicDir(t)
	e := &authEnv{addr: start(t)}
	e.root = fixture(t, dir, "mlx5", authConfig)
	hosttest.Write(t, e.root, filepath.Join(config.DropInDir, config.PersistedName), authDropIn)
	hosttest.Write(t, e.root, "etc/passwd", "root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n")
	h := host.New(e.root)
	e.dcb = dcbtest.New()
	e.dcb.Add("ens1f0np0")
	e.dcb.Add("ens1f1np1")
	e.netns = netnstest.New(config.NetnsShared)
	e.links = &linkstest.Netlink{Host: h}
	conn, err := dbusapi.Dial(e.addr)
	if err != nil {
		t.Fatal(err)
	}
	e.d = startDaemonAuth(t, conn, h, compose.Kernel{Modules: &hosttest.Modprobe{Root: e.root}, Netns: e.netns, DCB: e.dcb.Kernel(), Links: e.links}, auth(conn))
	e.polkit = newPolkitFake(t, e.addr)
	e.root0, err = client.Connect(e.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.root0.Close() })
	return e
}

func defaultAuth(conn *dbus.Conn) bus.Authorizer {
	return &bus.PolkitAuthorizer{Conn: conn, PolkitTimeout: 10 * time.Second}
}

// state is everything a mutating call could change: the host's files, the
// fake kernels, the runtime overlay and the policy in force.
func (e *authEnv) state(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	b.WriteString(treeDigest(t, e.root))
	mode, _ := e.netns.Mode()
	fmt.Fprintf(&b, "netns kernel: %s\nlink calls: %q\ndcb writes: %q\n", mode, e.links.Calls(), e.dcb.Writes())
	for _, nd := range []string{"ens1f0np0", "ens1f1np1"} {
		n, _ := e.dcb.Netdev(nd)
		fmt.Fprintf(&b, "dcb %s: %+v\n", nd, n)
	}
	// A hold ends when its caller leaves, which a caller of these tests
	// does at once: rdmad's log of it is what stays.
	fmt.Fprintf(&b, "holds logged: %d\n", strings.Count(e.d.logs.String(), `msg="corrections held"`))
	overlay, _ := json.Marshal(e.d.svc.RuntimeOverlay())
	policy, _ := json.Marshal(e.d.svc.PolicyInForce())
	fmt.Fprintf(&b, "overlay: %s\npolicy: %s\n", overlay, policy)
	return b.String()
}

// authCall is one call of a mutating method in the authorization test.
type authCall struct {
	method  string
	args    []arg
	persist bool
	action  string // the method's polkit action for this call
	// setup makes the call one that changes something when authorized
	// (a drift to correct, a file to reload, a runtime declaration to
	// withdraw).
	setup func(t *testing.T, e *authEnv)
}

// authCalls is every mutating method, with and without persist. The test
// fails when the method table has a mutating method missing here.
var authCalls = []authCall{
	{method: "Reconcile", action: bus.ActionReconcile, setup: func(t *testing.T, e *authEnv) {
		hosttest.Write(t, e.root, "sys/kernel/config/rdma_cm/mlx5_0/ports/1/default_roce_tos", "0\n")
	}},
	{method: "Reload", action: bus.ActionReload, setup: func(t *testing.T, e *authEnv) {
		hosttest.Write(t, e.root, config.MainFile, strings.Replace(authConfig, "tos = 106", "tos = 107", 1))
	}},
	{method: "SetRoCE", args: argsOf(argS("mlx5_0"), argU(1), argS("v1"), argI(7), argB(false)), action: bus.ActionSetRoCE},
	{method: "SetRoCE", args: argsOf(argS("mlx5_0"), argU(1), argS("v1"), argI(7), argB(true)), persist: true, action: bus.ActionSetRoCE},
	{method: "SetQoS", args: argsOf(argS("mlx5_0"), argU(1), argS("dscp"), argY([]byte{3}), argB(false)), action: bus.ActionSetQoS},
	{method: "SetQoS", args: argsOf(argS("mlx5_0"), argU(1), argS("dscp"), argY([]byte{3}), argB(true)), persist: true, action: bus.ActionSetQoS},
	{method: "SetQoSSettings", args: argsOf(argS("mlx5_0"), argU(1), argSV(map[string][]byte{"pfc": {3}}), argB(false)), action: bus.ActionSetQoS},
	{method: "SetQoSSettings", args: argsOf(argS("mlx5_0"), argU(1), argSV(map[string][]byte{"pfc": {3}}), argB(true)), persist: true, action: bus.ActionSetQoS},
	{method: "AddLink", args: argsOf(argS("siw9"), argS("siw"), argS("ens1f0np0"), argB(false)), action: bus.ActionManageLinks},
	{method: "AddLink", args: argsOf(argS("siw9"), argS("siw"), argS("ens1f0np0"), argB(true)), persist: true, action: bus.ActionManageLinks},
	{method: "DeleteLink", args: argsOf(argS("rxe0"), argB(false)), action: bus.ActionManageLinks},
	{method: "DeleteLink", args: argsOf(argS("rxe1"), argB(true)), persist: true, action: bus.ActionManageLinks},
	{method: "SetNetnsMode", args: argsOf(argS("exclusive"), argB(false)), action: bus.ActionSetNetns},
	{method: "SetNetnsMode", args: argsOf(argS("exclusive"), argB(true)), persist: true, action: bus.ActionSetNetns},
	{method: "HoldCorrections", args: argsOf(argS("mlx5_0"), argU(1), argAS("roce_tos", "qos_pfc")), action: bus.ActionHold},
	{method: "Withdraw", args: argsOf(argS("roce"), argS("mlx5_0"), argU(1), argB(false)), action: bus.ActionSetRoCE, setup: func(t *testing.T, e *authEnv) {
		if err := e.root0.SetRoCE(t.Context(), "mlx5_0", 1, "", 9, false); err != nil {
			t.Fatal(err)
		}
	}},
	{method: "Withdraw", args: argsOf(argS("roce"), argS("mlx5_1"), argU(1), argB(true)), persist: true, action: bus.ActionSetRoCE},
	{method: "Withdraw", args: argsOf(argS("qos"), argS("mlx5_0"), argU(0), argB(false)), action: bus.ActionSetQoS, setup: func(t *testing.T, e *authEnv) {
		if err := e.root0.SetQoS(t.Context(), "mlx5_0", 1, "dscp", nil, true, false); err != nil {
			t.Fatal(err)
		}
	}},
	{method: "Withdraw", args: argsOf(argS("link"), argS("rxe1"), argU(0), argB(true)), persist: true, action: bus.ActionManageLinks},
	{method: "Withdraw", args: argsOf(argS("netns"), argS(""), argU(0), argB(false)), action: bus.ActionSetNetns, setup: func(t *testing.T, e *authEnv) {
		if err := e.root0.SetNetnsMode(t.Context(), "exclusive", false); err != nil {
			t.Fatal(err)
		}
	}},
}

func (c authCall) name() string {
	n := c.method
	if len(c.args) > 0 && c.method == "Withdraw" {
		n += "_" + *c.args[0].S
	}
	if c.persist {
		n += "_persist"
	}
	return n
}

// actions is what polkit must be asked, in order, for the call to go
// through.
func (c authCall) actions() []string {
	if c.persist {
		return []string{c.action, bus.ActionSetPersistent}
	}
	return []string{c.action}
}

// Every mutating method of the table, as an unprivileged caller: refused
// with polkit absent, saying no, answering a challenge, asked
// interactively, and (persisted) allowing the method but not
// set-persistent; each time the action polkit was asked for is the
// method's and the host is unchanged. With polkit saying yes the same call
// changes the host, so the refusals prove something.
func TestMutatingMethodsAuthorization(t *testing.T) {
	covered := map[string]bool{}
	for _, c := range authCalls {
		covered[c.method] = true
	}
	for _, m := range bus.Methods() {
		if m.Mutating() && !covered[m.Name] {
			t.Errorf("the authorization test has no call of the mutating method %s: add it to authCalls", m.Name)
		}
		if !m.Mutating() && covered[m.Name] {
			t.Errorf("%s is in authCalls but the method table says it changes nothing", m.Name)
		}
	}
	for _, c := range authCalls {
		t.Run(c.name(), func(t *testing.T) {
			// Each call has a bus, a host and an rdmad of its own, and
			// spends most of its time waiting for the processes it starts.
			t.Parallel()
			e := newAuthEnv(t, bustest.Start, defaultAuth)
			if c.setup != nil {
				c.setup(t, e)
			}
			before := e.state(t)
			setupAudits := len(e.d.audits()) // the setup's own calls, made as root
			want := c.actions()
			type scenario struct {
				name        string
				start       bool // polkit on the bus
				allow       []string
				challenge   bool
				interactive bool
				asked       []string // the actions polkit is asked, in order
			}
			scenarios := []scenario{
				{name: "polkit absent"},
				{name: "polkit says no", start: true, asked: want[:1]},
				{name: "polkit answers a challenge", start: true, challenge: true, asked: want[:1]},
				{name: "interactive", start: true, interactive: true, asked: want[:1]},
			}
			if c.persist {
				scenarios = append(scenarios, scenario{name: "the method but not set-persistent", start: true, allow: want[:1], asked: want})
			}
			started := false
			for _, sc := range scenarios {
				if sc.start && !started {
					e.polkit.start(t)
					started = true
				}
				e.polkit.set(sc.allow, sc.challenge, false)
				res := callAs(t, e.addr, nobody, sc.interactive, c.method, c.args...)
				if res.Name != dbusapi.ErrAccessDenied {
					t.Errorf("%s: %s %q, want AccessDenied", sc.name, res.Name, res.Message)
				}
				checks, _ := e.polkit.take()
				var asked []string
				for _, ck := range checks {
					asked = append(asked, ck.Action)
					wantFlags := uint32(0)
					if sc.interactive {
						wantFlags = 1
					}
					if ck.Flags != wantFlags || ck.Subject.Kind != "system-bus-name" || ck.UID != nobody || ck.ID == "" {
						t.Errorf("%s: polkit asked %+v, want flags %d, the caller's bus name and a cancellation id", sc.name, ck, wantFlags)
					}
				}
				if !slices.Equal(asked, sc.asked) {
					t.Errorf("%s: polkit was asked %q, want %q", sc.name, asked, sc.asked)
				}
				if after := e.state(t); after != before {
					t.Errorf("%s: the refused call changed the host:\n%s", sc.name, diffLines(before, after))
				}
				if a := e.d.audits()[setupAudits:]; len(a) != 0 {
					t.Errorf("%s: a refused call has an audit line: %q", sc.name, a)
				}
			}
			if !started {
				e.polkit.start(t)
			}
			e.polkit.set(want, false, false)
			if res := callAs(t, e.addr, nobody, false, c.method, c.args...); res.Name != "" {
				t.Fatalf("polkit says yes: %s %q", res.Name, res.Message)
			}
			checks, _ := e.polkit.take()
			var asked []string
			for _, ck := range checks {
				asked = append(asked, ck.Action)
			}
			if !slices.Equal(asked, want) {
				t.Errorf("polkit says yes: it was asked %q, want %q", asked, want)
			}
			if e.state(t) == before {
				t.Errorf("the authorized call changed nothing: the refusals above prove nothing")
			}
			// Accepted: one audit line naming the caller as the bus
			// authenticated it and its process, the method and its
			// arguments.
			a := e.d.audits()[setupAudits:]
			if len(a) != 1 {
				t.Fatalf("%d audit lines for one accepted call: %q", len(a), a)
			}
			line := []string{"level=NOTICE", " caller=:", " uid=65534 user=nobody pid=", " comm=caller ", " method=" + c.method}
			if len(c.args) > 0 {
				line = append(line, " method="+c.method+" args=")
			}
			for _, w := range line {
				if !strings.Contains(a[0], w) {
					t.Errorf("audit line lacks %q: %s", w, a[0])
				}
			}
		})
	}
}

// Arguments are checked before anyone is asked for a password, and [api]
// changes before root or polkit: a call that would fail never reaches
// polkit.
func TestChecksComeInOrder(t *testing.T) {
	e := newAuthEnv(t, bustest.Start, defaultAuth)
	e.polkit.start(t)
	e.polkit.set(nil, false, false)
	for _, tc := range []struct {
		method string
		args   []arg
		want   string
	}{
		{"SetRoCE", argsOf(argS("mlx5_0"), argU(1), argS("v3"), argI(-1), argB(false)), dbusapi.ErrInvalidArgs},
		{"SetRoCE", argsOf(argS("mlx5_9"), argU(1), argS("v2"), argI(-1), argB(false)), dbusapi.ErrNoSuchDevice},
		{"SetRoCE", argsOf(argS("mlx5_0"), argU(7), argS("v2"), argI(-1), argB(false)), dbusapi.ErrNoSuchPort},
		{"SetRoCE", argsOf(argS("mlx5_0"), argU(1<<31), argS("v2"), argI(-1), argB(false)), dbusapi.ErrInvalidArgs},
		{"SetQoS", argsOf(argS("mlx5_0"), argU(1), argS("ip"), argY(nil), argB(false)), dbusapi.ErrInvalidArgs},
		{"SetQoSSettings", argsOf(argS("mlx5_0"), argU(1), argSV(map[string][]byte{"pfc": {9}}), argB(false)), dbusapi.ErrInvalidArgs},
		{"SetQoSSettings", argsOf(argS("mlx5_0"), argU(1), argSV(map[string][]byte{"no_such_key": {1}}), argB(false)), dbusapi.ErrInvalidArgs},
		{"SetQoSSettings", argsOf(argS("mlx5_0"), argU(1), argSV(map[string][]byte{}), argB(false)), dbusapi.ErrInvalidArgs},
		{"SetQoSSettings", argsOf(argS("mlx5_9"), argU(1), argSV(map[string][]byte{"pfc": {3}}), argB(false)), dbusapi.ErrNoSuchDevice},
		{"SetQoSSettings", argsOf(argS("mlx5_0"), argU(7), argSV(map[string][]byte{"pfc": {3}}), argB(false)), dbusapi.ErrNoSuchPort},
		{"AddLink", argsOf(argS("rxe9"), argS("rxe"), argS("nosuch0"), argB(false)), dbusapi.ErrNoSuchDevice},
		{"DeleteLink", argsOf(argS("rxe7"), argB(false)), dbusapi.ErrNoSuchLink},
		{"DeleteLink", argsOf(argS("rxe0"), argB(true)), dbusapi.ErrInvalidArgs}, // declared in rdmad.toml
		{"SetNetnsMode", argsOf(argS("private"), argB(false)), dbusapi.ErrInvalidArgs},
		{"Withdraw", argsOf(argS("vpi"), argS("mlx5_0"), argU(0), argB(false)), dbusapi.ErrInvalidArgs},
		{"Withdraw", argsOf(argS("roce"), argS("mlx5_9"), argU(0), argB(false)), dbusapi.ErrNoSuchDevice},
		{"Withdraw", argsOf(argS("link"), argS("rxe7"), argU(0), argB(false)), dbusapi.ErrNoSuchLink},
		{"Withdraw", argsOf(argS("roce"), argS("mlx5_1"), argU(1), argB(false)), dbusapi.ErrInvalidArgs}, // only the drop-in declares it
	} {
		res := callAs(t, e.addr, nobody, true, tc.method, tc.args...)
		if res.Name != tc.want {
			t.Errorf("%s %v: %s %q, want %s", tc.method, tc.args, res.Name, res.Message, tc.want)
		}
	}
	if checks, _ := e.polkit.take(); len(checks) != 0 {
		t.Errorf("calls with bad arguments reached polkit: %+v", checks)
	}

	// [api] changes comes before root and polkit: root is refused too,
	// naming the line; Withdraw, Reload and Reconcile still work.
	hosttest.Write(t, e.root, config.MainFile, authConfig+"\n[api]\nchanges = \"runtime\"\n")
	if _, err := e.root0.Reload(t.Context()); err != nil {
		t.Fatal(err)
	}
	apiLine := fmt.Sprintf("%s:%d", filepath.Join(e.root, config.MainFile), strings.Count(authConfig, "\n")+3)
	if got, src := managerProp(t, e.root0.Conn(), "APIChanges"), managerProp(t, e.root0.Conn(), "APIChangesSource"); got != "runtime" || src != apiLine {
		t.Errorf("Manager.APIChanges %q from %q, want runtime from %s", got, src, apiLine)
	}
	err := e.root0.SetRoCE(t.Context(), "mlx5_0", 1, "v2", -1, true)
	if client.ErrorName(err) != dbusapi.ErrNotAllowed || !strings.Contains(client.ErrorMessage(err), fmt.Sprintf("%s:%d", config.MainFile, strings.Count(authConfig, "\n")+3)) {
		t.Errorf("root, persisted under [api] changes = runtime: %v", err)
	}
	if res := callAs(t, e.addr, nobody, false, "SetRoCE", argS("mlx5_0"), argU(1), argS("v2"), argI(-1), argB(true)); res.Name != dbusapi.ErrNotAllowed {
		t.Errorf("nobody, persisted under [api] changes = runtime: %s %q", res.Name, res.Message)
	}
	if checks, _ := e.polkit.take(); len(checks) != 0 {
		t.Errorf("a call [api] refuses reached polkit: %+v", checks)
	}
	if err := e.root0.SetRoCE(t.Context(), "mlx5_0", 1, "v2", -1, false); err != nil {
		t.Errorf("root, runtime under [api] changes = runtime: %v", err)
	}
	hosttest.Write(t, e.root, config.MainFile, authConfig+"\n[api]\nchanges = \"none\"\n")
	if _, err := e.root0.Reload(t.Context()); err != nil {
		t.Fatal(err)
	}
	for name, call := range map[string]func() error{
		"SetRoCE": func() error { return e.root0.SetRoCE(t.Context(), "mlx5_0", 1, "v1", -1, false) },
		"SetQoS":  func() error { return e.root0.SetQoS(t.Context(), "mlx5_0", 1, "pcp", nil, true, false) },
		"SetQoSSettings": func() error {
			return e.root0.SetQoSSettings(t.Context(), "mlx5_0", 1, map[string]dbus.Variant{"pfc": dbus.MakeVariant([]byte{3})}, false)
		},
		"AddLink":      func() error { return e.root0.AddLink(t.Context(), "siw9", "siw", "ens1f0np0", false) },
		"DeleteLink":   func() error { return e.root0.DeleteLink(t.Context(), "rxe0", false) },
		"SetNetnsMode": func() error { return e.root0.SetNetnsMode(t.Context(), "exclusive", false) },
	} {
		if err := call(); client.ErrorName(err) != dbusapi.ErrNotAllowed || !strings.Contains(client.ErrorMessage(err), `changes = "none"`) {
			t.Errorf("%s under [api] changes = none: %v", name, err)
		}
	}
	if err := e.root0.Withdraw(t.Context(), "roce", "mlx5_0", 1, false); err != nil {
		t.Errorf("Withdraw under [api] changes = none: %v", err)
	}
	if _, err := e.root0.Reconcile(t.Context()); err != nil {
		t.Errorf("Reconcile under [api] changes = none: %v", err)
	}
}

// [api] changes governs each method that declares policy, before polkit
// is asked, and no other: every call of the authorization table, as an
// unprivileged caller polkit refuses, under changes = "none" and
// "runtime". A governed call is NotAllowed without polkit being asked
// (the service's own check at commit would refuse it too, but only after
// a password); any other reaches polkit and is AccessDenied.
func TestAPIChangesGovernsEachDeclaringMethod(t *testing.T) {
	// The methods that declare policy over D-Bus, as the reference manual
	// lists them under [api] changes.
	declares := map[string]bool{"SetRoCE": true, "SetQoS": true, "SetQoSSettings": true, "AddLink": true,
		"DeleteLink": true, "SetNetnsMode": true, "HoldCorrections": true}
	e := newAuthEnv(t, bustest.Start, defaultAuth)
	e.polkit.start(t)
	e.polkit.set(nil, false, false)
	for _, changes := range []string{"none", "runtime"} {
		hosttest.Write(t, e.root, config.MainFile, authConfig+"\n[api]\nchanges = \""+changes+"\"\n")
		if _, err := e.root0.Reload(t.Context()); err != nil {
			t.Fatal(err)
		}
		for _, c := range authCalls {
			if c.setup != nil && c.method == "Withdraw" {
				continue // its declaration to withdraw needs a call [api] refuses
			}
			governed := declares[c.method] && (changes == "none" || c.persist)
			want := dbusapi.ErrAccessDenied
			if governed {
				want = dbusapi.ErrNotAllowed
			}
			res := callAs(t, e.addr, nobody, false, c.method, c.args...)
			checks, _ := e.polkit.take()
			if res.Name != want || governed != (len(checks) == 0) {
				t.Errorf("changes = %q, %s: %s %q after %d polkit checks, want %s and polkit asked %v",
					changes, c.name(), res.Name, res.Message, len(checks), want, !governed)
			}
		}
	}
}

// The bound on outstanding polkit checks, on both brokers: one user's
// interactive calls that polkit leaves pending (the user's agent holds the
// prompt) take at most ChecksPerUser checks, and all users at most
// Checks; the rest are Busy, never AccessDenied, and an administrator
// polkit allows gets through once checks are answered, root at any time.
// dbus-daemon limits a connection's pending replies, dbus-broker each
// user's quota: neither may decide for rdmad. The bound is 6 here (a bus
// daemon wants a passwd entry for each caller's uid, and a test host has
// few); the defaults are tested apart (TestPolkitBoundDefaults).
func TestPolkitChecksAreBounded(t *testing.T) {
	const perUser, total = 2, 6
	users := systemUsers(t, 5) // 2 more users to fill the bound, 1 beyond it, 1 administrator
	for _, b := range bustest.Brokers {
		t.Run(b.Name, func(t *testing.T) {
			e := newAuthEnv(t, b.Start, func(conn *dbus.Conn) bus.Authorizer {
				return &bus.PolkitAuthorizer{Conn: conn, PolkitTimeout: 10 * time.Second, InteractiveTimeout: time.Minute,
					ChecksPerUser: perUser, Checks: total}
			})
			e.polkit.start(t)
			e.polkit.set([]string{bus.ActionSetRoCE}, false, true)
			setTOS := argsOf(argS("mlx5_0"), argU(1), argS(""), argI(9), argB(false))

			// 300 interactive calls from one user, on one connection.
			flood := startCaller(t, nobody, callerSpec{Addr: e.addr, Method: "SetRoCE", Args: setTOS, Interactive: true, Count: 300})
			waitFor(t, "2 pending checks of the flooding user", func() bool { return e.polkit.pendingNow() == perUser })
			// Then other users, 3 interactive calls each: 2 of them fill
			// the bound, the third finds it full.
			var others []func() []callResult
			for _, uid := range users[:3] {
				others = append(others, startCaller(t, uid, callerSpec{Addr: e.addr, Method: "SetRoCE", Args: setTOS, Interactive: true, Count: 3}))
			}
			count := func(res []callResult) map[string]int {
				out := map[string]int{}
				for _, r := range res {
					out[r.Name]++
				}
				return out
			}
			busy := 0
			// The third user's calls all come back at once: Busy.
			waitFor(t, fmt.Sprintf("%d pending checks", total), func() bool { return e.polkit.pendingNow() == total })
			admin := users[3]
			// An administrator polkit allows, asking without interaction:
			// the bound is full, so Busy (a local limit), not AccessDenied.
			if res := callAs(t, e.addr, admin, false, "SetRoCE", setTOS...); res.Name != dbusapi.ErrBusy {
				t.Errorf("a call beyond the bound: %s %q, want Busy", res.Name, res.Message)
			}
			// Root never waits for polkit.
			if err := e.root0.SetRoCE(t.Context(), "mlx5_0", 1, "", 11, false); err != nil {
				t.Errorf("root while polkit's checks are full: %v", err)
			}
			e.polkit.mu.Lock()
			maxTotal, maxPerUID := e.polkit.maxTotal, maps.Clone(e.polkit.maxPerUID)
			// Answer every held check: cancelled, as when each user closes
			// the prompt.
			for _, c := range e.polkit.pending {
				close(c)
			}
			clear(e.polkit.pending)
			e.polkit.mu.Unlock()
			if maxTotal != total {
				t.Errorf("at most %d checks were pending at once, want %d", maxTotal, total)
			}
			for uid, n := range maxPerUID {
				if n > perUser || uid == nobody && n != perUser {
					t.Errorf("uid %d had at most %d checks pending at once, want %d", uid, n, perUser)
				}
			}
			got := count(flood())
			limited := got["org.freedesktop.DBus.Error.LimitsExceeded"] // the bus's own limit on the flooding caller
			if got[dbusapi.ErrAccessDenied] != perUser || got[dbusapi.ErrBusy]+limited != 300-perUser || len(got) > 3 {
				t.Errorf("flood of 300: %v; want %d denied (the checks polkit cancelled) and the rest Busy", got, perUser)
			}
			for _, w := range others {
				busy += count(w())[dbusapi.ErrBusy]
			}
			if want := 3*3 - (total - perUser); busy != want {
				t.Errorf("3 users x 3 calls: %d Busy, want %d", busy, want)
			}
			// Once the checks are answered, the administrator goes through.
			waitFor(t, "no pending checks", func() bool { return e.polkit.pendingNow() == 0 })
			if res := callAs(t, e.addr, admin, false, "SetRoCE", setTOS...); res.Name != "" {
				t.Errorf("an administrator after the flood: %s %q", res.Name, res.Message)
			}
		})
	}
}

// systemUsers returns n uids of /etc/passwd other than root and nobody: a
// bus daemon refuses a connection from a uid it cannot look up.
func systemUsers(t *testing.T, n int) []uint32 {
	t.Helper()
	data, err := os.ReadFile("/etc/passwd")
	if err != nil {
		t.Skip(err)
	}
	var out []uint32
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Split(line, ":")
		if len(f) < 3 {
			continue
		}
		uid, err := strconv.ParseUint(f[2], 10, 32)
		if err != nil || uid == 0 || uid == nobody {
			continue
		}
		if out = append(out, uint32(uid)); len(out) == n {
			return out
		}
	}
	t.Skipf("/etc/passwd has %d users besides root and nobody, the test needs %d", len(out), n)
	return nil
}

// A check whose caller leaves the bus, and one nobody answers in time, is
// cancelled with its own cancellation id, and the call is never allowed;
// once the calls are answered the authorizer follows nobody on the bus.
func TestPolkitChecksAreCancelled(t *testing.T) {
	for _, b := range bustest.Brokers {
		t.Run(b.Name, func(t *testing.T) {
			var auth *bus.PolkitAuthorizer
			e := newAuthEnv(t, b.Start, func(conn *dbus.Conn) bus.Authorizer {
				auth = &bus.PolkitAuthorizer{Conn: conn, PolkitTimeout: 10 * time.Second, InteractiveTimeout: 2 * time.Second}
				return auth
			})
			e.polkit.start(t)
			e.polkit.set([]string{bus.ActionSetRoCE}, false, true)
			before := e.state(t)
			setTOS := argsOf(argS("mlx5_0"), argU(1), argS(""), argI(9), argB(false))

			// The caller leaves while its check is pending.
			leave := startCaller(t, nobody, callerSpec{Addr: e.addr, Method: "SetRoCE", Args: setTOS, Interactive: true, LeaveAfter: 500 * time.Millisecond})
			first := waitCheck(t, e.polkit)
			leave()
			if !e.polkit.cancelled(first.ID, 5*time.Second) {
				t.Errorf("the check of a caller that left (id %q) was not cancelled", first.ID)
			}

			// Nobody answers the prompt: Busy after InteractiveTimeout,
			// and the check is cancelled.
			start := time.Now()
			res := callAs(t, e.addr, nobody, true, "SetRoCE", setTOS...)
			second := waitCheck(t, e.polkit)
			if res.Name != dbusapi.ErrBusy || !strings.Contains(res.Message, "nobody answered polkit's authentication prompt within 2s; try again") {
				t.Errorf("unanswered prompt: %s %q, want Busy", res.Name, res.Message)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("the unanswered prompt took %s", d)
			}
			if !e.polkit.cancelled(second.ID, 5*time.Second) {
				t.Errorf("the timed-out check (id %q) was not cancelled", second.ID)
			}
			if first.ID == second.ID {
				t.Errorf("two checks share the cancellation id %q", first.ID)
			}
			if after := e.state(t); after != before {
				t.Errorf("the refused calls changed the host:\n%s", diffLines(before, after))
			}
			waitFor(t, "the authorizer to stop following the callers", func() bool { return auth.FollowedForTest() == 0 })
		})
	}
}

func waitCheck(t *testing.T, p *polkitFake) polkitCheck {
	t.Helper()
	select {
	case c := <-p.arrived:
		return c
	case <-time.After(10 * time.Second):
		t.Fatal("no check reached polkit")
	}
	return polkitCheck{}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("waited 20s for %s", what)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// Polkit's three ways of saying no are told apart in the refusal: no
// polkit on the bus, a plain no, and a challenge (an agent could have
// asked for a password), which says how to get through.
func TestPolkitRefusalsSayWhy(t *testing.T) {
	e := newAuthEnv(t, bustest.Start, defaultAuth)
	setTOS := argsOf(argS("mlx5_0"), argU(1), argS(""), argI(9), argB(false))
	refused := func(what, want string) {
		t.Helper()
		res := callAs(t, e.addr, nobody, false, "SetRoCE", setTOS...)
		if res.Name != dbusapi.ErrAccessDenied || !strings.Contains(res.Message, want) {
			t.Errorf("%s: %s %q, want AccessDenied saying %q", what, res.Name, res.Message, want)
		}
	}
	refused("polkit absent", bus.ActionSetRoCE+" for uid 65534: polkit did not answer (")
	e.polkit.start(t)
	e.polkit.set(nil, false, false)
	refused("polkit says no", "polkit refused "+bus.ActionSetRoCE+" to uid 65534")
	e.polkit.set(nil, true, false)
	refused("polkit answers a challenge", bus.ActionSetRoCE+" for uid 65534: authentication required (run as root, or with a polkit agent)")
	if checks, _ := e.polkit.take(); len(checks) != 2 {
		t.Errorf("polkit was asked %d times, want 2: %+v", len(checks), checks)
	}
}

// A caller whose uid the bus cannot tell (it left between its call and the
// check, or the name never was) is refused: an unknown uid is never taken
// for root's 0.
func TestUnknownCallerIsRefused(t *testing.T) {
	conn, err := dbusapi.Dial(bustest.Start(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	a := &bus.PolkitAuthorizer{Conn: conn, PolkitTimeout: 10 * time.Second}
	err = a.Authorize(t.Context(), ":1.999999", []string{bus.ActionSetRoCE}, false)
	if !errors.Is(err, bus.ErrNotAuthorized) || !strings.Contains(err.Error(), "cannot identify caller :1.999999") {
		t.Errorf("a sender not on the bus: %v, want it refused as unidentified", err)
	}
}

// noActionAuthorizer asks the polkit authorizer for a call with an action
// missing from its list, as a method table entry without one would.
type noActionAuthorizer struct{ *bus.PolkitAuthorizer }

func (a noActionAuthorizer) Authorize(ctx context.Context, sender string, actions []string, interactive bool) error {
	return a.PolkitAuthorizer.Authorize(ctx, sender, append(actions, ""), interactive)
}

// A call that names no polkit action for a caller other than root is
// refused, and polkit is not asked about an empty action.
func TestCallWithoutActionIsRefused(t *testing.T) {
	e := newAuthEnv(t, bustest.Start, func(conn *dbus.Conn) bus.Authorizer {
		return noActionAuthorizer{&bus.PolkitAuthorizer{Conn: conn, PolkitTimeout: 10 * time.Second}}
	})
	e.polkit.start(t)
	e.polkit.set([]string{bus.ActionSetRoCE}, false, false)
	res := callAs(t, e.addr, nobody, false, "SetRoCE", argS("mlx5_0"), argU(1), argS(""), argI(9), argB(false))
	if res.Name != dbusapi.ErrAccessDenied || !strings.Contains(res.Message, "no polkit action for this call") {
		t.Errorf("a call without its action: %s %q, want AccessDenied naming the missing action", res.Name, res.Message)
	}
	checks, _ := e.polkit.take()
	for _, c := range checks {
		if c.Action == "" {
			t.Errorf("polkit was asked about an empty action: %+v", c)
		}
	}
}

// busySwitch is the polkit authorizer, or a Busy answer while busy is set
// (the bound itself is TestPolkitChecksAreBounded's).
type busySwitch struct {
	*bus.PolkitAuthorizer
	busy atomic.Bool
}

func (a *busySwitch) Authorize(ctx context.Context, sender string, actions []string, interactive bool) error {
	if a.busy.Load() {
		return fmt.Errorf("test bound: %w", bus.ErrBusy)
	}
	return a.PolkitAuthorizer.Authorize(ctx, sender, actions, interactive)
}

// Each refusal of admit is counted under its reason: denied by polkit,
// busy, refused by [api] changes.
func TestRefusalsAreCountedByReason(t *testing.T) {
	var auth *busySwitch
	e := newAuthEnv(t, bustest.Start, func(conn *dbus.Conn) bus.Authorizer {
		auth = &busySwitch{PolkitAuthorizer: &bus.PolkitAuthorizer{Conn: conn, PolkitTimeout: 10 * time.Second}}
		return auth
	})
	e.polkit.start(t)
	e.polkit.set(nil, false, false)
	setTOS := argsOf(argS("mlx5_0"), argU(1), argS(""), argI(9), argB(false))
	if res := callAs(t, e.addr, nobody, false, "SetRoCE", setTOS...); res.Name != dbusapi.ErrAccessDenied {
		t.Errorf("nobody, polkit allowing nothing: %s %q", res.Name, res.Message)
	}
	auth.busy.Store(true)
	if res := callAs(t, e.addr, nobody, false, "SetRoCE", setTOS...); res.Name != dbusapi.ErrBusy {
		t.Errorf("nobody, the bound full: %s %q", res.Name, res.Message)
	}
	auth.busy.Store(false)
	hosttest.Write(t, e.root, config.MainFile, authConfig+"\n[api]\nchanges = \"none\"\n")
	if _, err := e.root0.Reload(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := e.root0.SetRoCE(t.Context(), "mlx5_0", 1, "", 9, false); client.ErrorName(err) != dbusapi.ErrNotAllowed {
		t.Errorf("root under [api] changes = none: %v", err)
	}
	got := map[string]uint64{}
	for _, c := range e.d.srv.RefusedCalls() {
		if c.Method == "SetRoCE" {
			got[c.Reason] += c.Calls
		}
	}
	if want := map[string]uint64{bus.ReasonDenied: 1, bus.ReasonBusy: 1, bus.ReasonNotAllowed: 1}; !maps.Equal(got, want) {
		t.Errorf("refused SetRoCE calls by reason: %v, want %v", got, want)
	}
}
