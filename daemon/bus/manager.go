package bus

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/godbus/dbus/v5"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/reconcile"
	"github.com/rdmad/rdmad/daemon/service"
	"github.com/rdmad/rdmad/dbusapi"
)

// Polkit action ids, one per kind of change (units/org.rdmad1.policy).
const (
	ActionReconcile   = "org.rdmad1.reconcile"
	ActionReload      = "org.rdmad1.reload"
	ActionSetRoCE     = "org.rdmad1.set-roce"
	ActionManageLinks = "org.rdmad1.manage-links"
	ActionSetNetns    = "org.rdmad1.set-netns"
)

// manager implements the org.rdmad1.Manager methods.
type manager struct{ s *Server }

func (m *manager) methods() map[string]any {
	return map[string]any{
		"Reconcile":    m.Reconcile,
		"Reload":       m.Reload,
		"SetRoCE":      m.SetRoCE,
		"SetQoS":       m.SetQoS,
		"AddLink":      m.AddLink,
		"DeleteLink":   m.DeleteLink,
		"SetNetnsMode": m.SetNetnsMode,
		"Describe":     m.Describe,
		"Diagnose":     m.Diagnose,
	}
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

// checkCall is where every method call starts: the arguments must have
// exactly the contract's signature (godbus would otherwise convert a
// 64-bit port of 2^32+1 into the uint32 1), then the caller must be
// authorized for action ("" for methods open to everyone).
func (m *manager) checkCall(msg dbus.Message, method, action string) *dbus.Error {
	got := ""
	if v, ok := msg.Headers[dbus.FieldSignature]; ok {
		if sig, ok := v.Value().(dbus.Signature); ok {
			got = sig.String()
		}
	}
	if want := inSignatures[method]; got != want {
		return dbus.NewError(dbusapi.ErrInvalidArgs, []any{fmt.Sprintf("%s takes arguments (%s), the call has (%s)", method, want, got)})
	}
	if action == "" {
		return nil
	}
	sender, _ := msg.Headers[dbus.FieldSender].Value().(string)
	interactive := msg.Flags&dbus.FlagAllowInteractiveAuthorization != 0
	if err := m.s.auth.Authorize(context.Background(), sender, action, interactive); err != nil {
		m.s.log.Info("call refused", "sender", sender, "action", action, "err", err)
		return dbus.NewError(dbusapi.ErrAccessDenied, []any{dbusapi.Escape(err.Error())})
	}
	return nil
}

// busError maps service errors to D-Bus errors.
func busError(err error) *dbus.Error {
	if err == nil {
		return nil
	}
	var arg *service.ArgError
	var cfg *service.ConfigError
	var next *service.NextBootError
	var missing *service.NotFoundError
	switch {
	case errors.As(err, &next):
		return dbus.NewError(dbusapi.ErrNextBoot, []any{dbusapi.Escape(err.Error())})
	case errors.As(err, &missing):
		name := dbusapi.ErrNoSuchDevice
		switch missing.What {
		case service.MissingPort:
			name = dbusapi.ErrNoSuchPort
		case service.MissingLink:
			name = dbusapi.ErrNoSuchLink
		}
		return dbus.NewError(name, []any{dbusapi.Escape(err.Error())})
	case errors.As(err, &arg):
		return dbus.NewError(dbusapi.ErrInvalidArgs, []any{dbusapi.Escape(err.Error())})
	case errors.As(err, &cfg):
		return dbus.NewError(dbusapi.ErrConfig, []any{dbusapi.Escape(cfg.Error())})
	}
	return dbus.NewError(dbusapi.ErrFailed, []any{dbusapi.Escape(err.Error())})
}

func (m *manager) Reconcile(msg dbus.Message) (uint32, uint32, string, *dbus.Error) {
	if e := m.checkCall(msg, "Reconcile", ActionReconcile); e != nil {
		return 0, 0, "", e
	}
	rep := m.s.svc.ReconcileNow(context.Background())
	m.s.flushForReply()
	return uint32(rep.Count(reconcile.Changed)), uint32(rep.Count(reconcile.Failed)),
		dbusapi.Escape(reconcile.Summarize(rep.Failures())), nil
}

func (m *manager) Reload(msg dbus.Message) (string, *dbus.Error) {
	if e := m.checkCall(msg, "Reload", ActionReload); e != nil {
		return "", e
	}
	rep, err := m.s.svc.ReloadNow(context.Background())
	m.s.flushForReply()
	if err != nil {
		return "", busError(err)
	}
	return dbusapi.Escape(reconcile.Summarize(rep.Failures())), nil
}

func (m *manager) SetRoCE(msg dbus.Message, device string, port uint32, mode string, tos int32, persist bool) *dbus.Error {
	if e := m.checkCall(msg, "SetRoCE", ActionSetRoCE); e != nil {
		return e
	}
	if port > dbusapi.MaxPort {
		return busError(&service.ArgError{Arg: "port", Msg: fmt.Sprintf("%d is not a port number (1..%d, or 0 for every port)", port, dbusapi.MaxPort)})
	}
	// Device names are published escaped (a byte D-Bus cannot carry is
	// \xNN), so that is the form a client has to name them by.
	err := m.s.svc.SetRoCE(context.Background(), service.RoCEChange{
		Device: dbusapi.Unescape(device), Port: int(port), Mode: config.RoCEMode(mode), TOS: int(tos), Persist: persist,
	})
	m.s.flushForReply()
	return busError(err)
}

// SetQoS is authorized by the same polkit action as SetRoCE: both set the
// RoCE traffic of a port.
func (m *manager) SetQoS(msg dbus.Message, device string, port uint32, trust string, pfc []byte, persist bool) *dbus.Error {
	if e := m.checkCall(msg, "SetQoS", ActionSetRoCE); e != nil {
		return e
	}
	if port > dbusapi.MaxPort {
		return busError(&service.ArgError{Arg: "port", Msg: fmt.Sprintf("%d is not a port number (1..%d, or 0 for every port)", port, dbusapi.MaxPort)})
	}
	c := service.QoSChange{Device: dbusapi.Unescape(device), Port: int(port), Trust: config.QoSTrust(trust), Persist: persist}
	if len(pfc) != 1 || pfc[0] != dbusapi.QoSKeepPFC {
		c.PFC, c.HasPFC = append([]uint8{}, pfc...), true
	}
	err := m.s.svc.SetQoS(context.Background(), c)
	m.s.flushForReply()
	return busError(err)
}

func (m *manager) AddLink(msg dbus.Message, name, typ, netdev string, persist bool) *dbus.Error {
	if e := m.checkCall(msg, "AddLink", ActionManageLinks); e != nil {
		return e
	}
	// Link and netdev names are published escaped, like device names
	// (SetRoCE): a client names them as Manager.Links spells them. The
	// service validates the unescaped names (InvalidArgs naming the
	// argument), so an escape cannot smuggle in a '/' or a NUL.
	l := config.Link{Name: dbusapi.Unescape(name), Type: config.LinkType(typ), Netdev: dbusapi.Unescape(netdev)}
	err := m.s.svc.AddLink(context.Background(), l, persist)
	m.s.flushForReply()
	return busError(err)
}

func (m *manager) DeleteLink(msg dbus.Message, name string, persist bool) *dbus.Error {
	if e := m.checkCall(msg, "DeleteLink", ActionManageLinks); e != nil {
		return e
	}
	// As Manager.Links spells it (AddLink).
	err := m.s.svc.DeleteLink(context.Background(), dbusapi.Unescape(name), persist)
	m.s.flushForReply()
	return busError(err)
}

func (m *manager) SetNetnsMode(msg dbus.Message, mode string, persist bool) *dbus.Error {
	if e := m.checkCall(msg, "SetNetnsMode", ActionSetNetns); e != nil {
		return e
	}
	err := m.s.svc.SetNetnsMode(context.Background(), config.NetnsMode(mode), persist)
	m.s.flushForReply()
	return busError(err)
}

func (m *manager) Describe(msg dbus.Message) (string, *dbus.Error) {
	if e := m.checkCall(msg, "Describe", ""); e != nil {
		return "", e
	}
	release, e := m.s.enterReport("Describe")
	if e != nil {
		return "", e
	}
	defer release()
	b, err := m.s.describe()
	if err != nil {
		return "", dbus.NewError(dbusapi.ErrFailed, []any{dbusapi.Escape(err.Error())})
	}
	return string(b), nil
}
