package bus

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/godbus/dbus/v5"

	"github.com/rdmad/rdmad/dbusapi"
)

// Polkit action ids (units/org.rdmad1.policy): one per kind of change,
// and one more that every persisted change also needs.
const (
	ActionReconcile = "org.rdmad1.reconcile"
	ActionReload    = "org.rdmad1.reload"
	ActionSetRoCE   = "org.rdmad1.set-roce"
	// ActionSetQoS guards the lossless RoCE settings of a port (DCB,
	// ethtool, OFED's ECN): a site can let its network team change DCB
	// but not the RoCE modes, or the reverse.
	ActionSetQoS      = "org.rdmad1.set-qos"
	ActionManageLinks = "org.rdmad1.manage-links"
	ActionSetNetns    = "org.rdmad1.set-netns"
	// ActionSetPersistent is asked after the method's own action for a
	// call with persist, which writes rdmad's drop-in: a change that
	// survives restarts and reboots is a step beyond one that lasts until
	// rdmad stops (hostnamed separates set-static-hostname from
	// set-hostname the same way). A site that wants the old rule, where
	// the method's action alone decided, installs
	// units/50-rdmad-persist-as-runtime.rules.
	ActionSetPersistent = "org.rdmad1.set-persistent"
)

// Method is one method of org.rdmad1.Manager as data: who may call it and
// what [api] changes governs. The table (Methods) is what the bus exports,
// what introspection describes and what the authorization test runs.
type Method struct {
	Name string
	// Action is the polkit action a caller other than root needs; "" for
	// a method that changes nothing (open to everyone) and for Withdraw,
	// whose action is its kind's (KindActions).
	Action string
	// KindActions is, for Withdraw, the action by the kind of declaration
	// withdrawn: the action of the method that declares that kind.
	KindActions map[string]string
	// Declares is set for a method that declares policy over D-Bus: [api]
	// changes governs it ("none" refuses it, "runtime" refuses it with
	// persist).
	Declares bool
	// Persists is set for a method with a persist argument: a call with
	// persist also needs ActionSetPersistent.
	Persists bool
}

// Mutating reports whether the method changes the host (it needs an
// authorization).
func (m Method) Mutating() bool { return m.Action != "" || len(m.KindActions) > 0 }

// actions is what a caller other than root needs for one call: the
// method's action (by kind for Withdraw), then ActionSetPersistent for a
// persisted one.
func (m Method) actions(kind string, persist bool) []string {
	a := m.Action
	if m.KindActions != nil {
		a = m.KindActions[kind]
	}
	out := []string{a}
	if persist {
		out = append(out, ActionSetPersistent)
	}
	return out
}

// withdrawActions is Withdraw's KindActions.
var withdrawActions = map[string]string{
	"roce":  ActionSetRoCE,
	"qos":   ActionSetQoS,
	"link":  ActionManageLinks,
	"netns": ActionSetNetns,
}

// entry is a Method and its handler, a function godbus calls by
// reflection (its first argument the dbus.Message, then the contract's in
// arguments, returning the out arguments and a *dbus.Error).
type entry struct {
	Method
	handler any
}

// table is the Manager's method table. To add a method: its XML in
// dbusapi/org.rdmad1.xml, one entry here, its handler (which calls
// m.admit first) and, for a mutating one, its calls in the authorization
// test's table (auth_test.go); the test fails for a mutating method it
// does not run.
func (m *manager) table() []entry {
	return []entry{
		{Method{Name: "Reconcile", Action: ActionReconcile}, m.Reconcile},
		{Method{Name: "Reload", Action: ActionReload}, m.Reload},
		{Method{Name: "SetRoCE", Action: ActionSetRoCE, Declares: true, Persists: true}, m.SetRoCE},
		{Method{Name: "SetQoS", Action: ActionSetQoS, Declares: true, Persists: true}, m.SetQoS},
		// SetQoSSettings declares the rest of a port's lossless profile.
		{Method{Name: "SetQoSSettings", Action: ActionSetQoS, Declares: true, Persists: true}, m.SetQoSSettings},
		{Method{Name: "AddLink", Action: ActionManageLinks, Declares: true, Persists: true}, m.AddLink},
		{Method{Name: "DeleteLink", Action: ActionManageLinks, Declares: true, Persists: true}, m.DeleteLink},
		{Method{Name: "SetNetnsMode", Action: ActionSetNetns, Declares: true, Persists: true}, m.SetNetnsMode},
		{Method{Name: "Withdraw", KindActions: withdrawActions, Persists: true}, m.Withdraw},
		// HoldCorrections suspends rdmad's writes of settings of a port
		// while its caller is on the bus; [api] changes governs it as a
		// declaration ("none" refuses it), since it overrides the files.
		{Method{Name: "HoldCorrections", Action: ActionHold, Declares: true}, m.HoldCorrections},
		// ReleaseCorrections ends the caller's own hold only.
		{Method{Name: "ReleaseCorrections"}, m.ReleaseCorrections},
		{Method{Name: "Describe"}, m.Describe},
		{Method{Name: "Diagnose"}, m.Diagnose},
		// Plan works out what a policy would change; it changes nothing.
		{Method{Name: "Plan"}, m.Plan},
		// ReadPorts reads the ports' settings now; it changes nothing.
		{Method{Name: "ReadPorts"}, m.ReadPorts},
	}
}

// Methods is the Manager's method table, as data.
func Methods() []Method {
	var out []Method
	for _, e := range (&manager{}).table() {
		out = append(out, e.Method)
	}
	return out
}

// methods is the table as godbus exports it.
func (m *manager) methods() map[string]any {
	out := map[string]any{}
	for _, e := range m.table() {
		out[e.Name] = e.handler
	}
	return out
}

// method is the table's entry for name.
func (m *manager) method(name string) Method {
	for _, e := range m.table() {
		if e.Name == name {
			return e.Method
		}
	}
	panic("bus: no method " + name + " in the Manager's table")
}

// inSignatures are the input signatures of the Manager's methods in the
// contract.
var inSignatures = func() map[string]string {
	out := map[string]string{}
	for _, mb := range dbusapi.TheContract().Interface(dbusapi.ManagerIface).Members {
		if mb.Kind != "method" {
			continue
		}
		var sig strings.Builder
		for _, a := range mb.Args {
			if a.Direction != "out" {
				sig.WriteString(a.Type)
			}
		}
		out[mb.Name] = sig.String()
	}
	return out
}()

// call is one call as admit checks it.
type call struct {
	kind    string       // Withdraw: the kind withdrawn
	persist bool         // the call's persist argument
	check   func() error // validates the arguments against the host; nil: nothing to check
}

// admit is where every Manager call starts, and the one place that orders
// the checks of a mutating call:
//
//  1. the arguments: exactly the contract's signature (godbus would
//     convert a 64-bit port of 2^32+1 into the uint32 1), then the
//     values against the host (InvalidArgs, NoSuchDevice, NoSuchPort,
//     NoSuchLink), so nobody is asked for a password for a call that
//     would fail;
//  2. [api] changes, for a declaration (org.rdmad1.Error.NotAllowed,
//     naming the file and line), root included: it guards the site's
//     files against changes from rdmactl and Cockpit;
//  3. the caller: root is allowed;
//  4. the bound on outstanding polkit checks (org.rdmad1.Error.Busy: a
//     local limit is never reported as a denial);
//  5. polkit (AccessDenied).
//
// Steps 3 to 5 are the Authorizer's. An accepted mutating call is logged
// once, at notice level, with its caller (caller.go), and runs in the
// context admit returns, which names that caller to what the call causes.
func (m *manager) admit(msg dbus.Message, name string, c call) (context.Context, *dbus.Error) {
	got := ""
	if v, ok := msg.Headers[dbus.FieldSignature]; ok {
		if sig, ok := v.Value().(dbus.Signature); ok {
			got = sig.String()
		}
	}
	if want := inSignatures[name]; got != want {
		return nil, dbus.NewError(dbusapi.ErrInvalidArgs, []any{fmt.Sprintf("%s takes arguments (%s), the call has (%s)", name, want, got)})
	}
	if c.check != nil {
		if err := c.check(); err != nil {
			return nil, busError(err)
		}
	}
	meth := m.method(name)
	if !meth.Mutating() {
		return context.Background(), nil
	}
	if meth.Declares {
		if err := m.s.svc.CheckAPI(c.persist); err != nil {
			m.s.refuse(msg, name, ReasonNotAllowed, "call refused by [api] changes", "err", err)
			return nil, busError(err)
		}
	}
	sender, _ := msg.Headers[dbus.FieldSender].Value().(string)
	interactive := msg.Flags&dbus.FlagAllowInteractiveAuthorization != 0
	actions := meth.actions(c.kind, c.persist && meth.Persists)
	if err := m.s.auth.Authorize(context.Background(), sender, actions, interactive); err != nil {
		if errors.Is(err, ErrBusy) {
			m.s.refuse(msg, name, ReasonBusy, "call refused", "actions", actions, "err", err)
			return nil, busy(dbusapi.Escape(err.Error()))
		}
		m.s.refuse(msg, name, ReasonDenied, "call refused", "actions", actions, "err", err)
		return nil, dbus.NewError(dbusapi.ErrAccessDenied, []any{dbusapi.Escape(err.Error())})
	}
	return m.s.audit(msg, name), nil
}
