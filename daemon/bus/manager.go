package bus

import (
	"errors"
	"fmt"

	"github.com/godbus/dbus/v5"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/reconcile"
	"github.com/rdmad/rdmad/daemon/service"
	"github.com/rdmad/rdmad/dbusapi"
)

// manager implements the org.rdmad1.Manager methods (methods.go has the
// table).
type manager struct{ s *Server }

// busError maps service errors to D-Bus errors.
func busError(err error) *dbus.Error {
	if err == nil {
		return nil
	}
	var arg *service.ArgError
	var cfg *service.ConfigError
	var next *service.NextBootError
	var missing *service.NotFoundError
	var refused *config.NotAllowedError
	switch {
	case errors.As(err, &refused):
		return dbus.NewError(dbusapi.ErrNotAllowed, []any{dbusapi.Escape(err.Error())})
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
	ctx, e := m.admit(msg, "Reconcile", call{})
	if e != nil {
		return 0, 0, "", e
	}
	rep := m.s.svc.ReconcileNow(ctx)
	m.s.flushForReply()
	return uint32(rep.Count(reconcile.Changed)), uint32(rep.Count(reconcile.Failed)),
		dbusapi.Escape(reconcile.Summarize(rep.Failures())), nil
}

func (m *manager) Reload(msg dbus.Message) (string, *dbus.Error) {
	ctx, e := m.admit(msg, "Reload", call{})
	if e != nil {
		return "", e
	}
	rep, err := m.s.svc.ReloadNow(ctx)
	m.s.flushForReply()
	if err != nil {
		return "", busError(err)
	}
	return dbusapi.Escape(reconcile.Summarize(rep.Failures())), nil
}

func (m *manager) SetRoCE(msg dbus.Message, device string, port uint32, mode string, tos int32, persist bool) *dbus.Error {
	// Device names are published escaped (a byte D-Bus cannot carry is
	// \xNN), so that is the form a client has to name them by.
	c := service.RoCEChange{Device: dbusapi.Unescape(device), Port: int(port), Mode: config.RoCEMode(mode), TOS: int(tos), Persist: persist}
	ctx, e := m.admit(msg, "SetRoCE", call{persist: persist, check: func() error {
		if err := portArg(port); err != nil {
			return err
		}
		return m.s.svc.CheckSetRoCE(c)
	}})
	if e != nil {
		return e
	}
	err := m.s.svc.SetRoCE(ctx, c)
	m.s.flushForReply()
	return busError(err)
}

// portArg refuses a port number no device has, before it is narrowed to
// an int.
func portArg(port uint32) error {
	if port > dbusapi.MaxPort {
		return &service.ArgError{Arg: "port", Msg: fmt.Sprintf("%d is not a port number (1..%d, or 0 for every port)", port, dbusapi.MaxPort)}
	}
	return nil
}

func (m *manager) SetQoS(msg dbus.Message, device string, port uint32, trust string, pfc []byte, persist bool) *dbus.Error {
	c := service.QoSChange{Device: dbusapi.Unescape(device), Port: int(port), Trust: config.QoSTrust(trust), Persist: persist}
	if len(pfc) != 1 || pfc[0] != dbusapi.QoSKeepPFC {
		c.PFC, c.HasPFC = append([]uint8{}, pfc...), true
	}
	ctx, e := m.admit(msg, "SetQoS", call{persist: persist, check: func() error {
		if err := portArg(port); err != nil {
			return err
		}
		return m.s.svc.CheckSetQoS(c)
	}})
	if e != nil {
		return e
	}
	err := m.s.svc.SetQoS(ctx, c)
	m.s.flushForReply()
	return busError(err)
}

func (m *manager) AddLink(msg dbus.Message, name, typ, netdev string, persist bool) *dbus.Error {
	// Link and netdev names are published escaped, like device names
	// (SetRoCE): a client names them as Manager.Links spells them. The
	// service validates the unescaped names (InvalidArgs naming the
	// argument), so an escape cannot smuggle in a '/' or a NUL.
	l := config.Link{Name: dbusapi.Unescape(name), Type: config.LinkType(typ), Netdev: dbusapi.Unescape(netdev)}
	ctx, e := m.admit(msg, "AddLink", call{persist: persist, check: func() error { return m.s.svc.CheckAddLink(l, persist) }})
	if e != nil {
		return e
	}
	err := m.s.svc.AddLink(ctx, l, persist)
	m.s.flushForReply()
	return busError(err)
}

func (m *manager) DeleteLink(msg dbus.Message, name string, persist bool) *dbus.Error {
	// As Manager.Links spells it (AddLink).
	name = dbusapi.Unescape(name)
	ctx, e := m.admit(msg, "DeleteLink", call{persist: persist, check: func() error { return m.s.svc.CheckDeleteLink(name, persist) }})
	if e != nil {
		return e
	}
	err := m.s.svc.DeleteLink(ctx, name, persist)
	m.s.flushForReply()
	return busError(err)
}

func (m *manager) SetNetnsMode(msg dbus.Message, mode string, persist bool) *dbus.Error {
	nm := config.NetnsMode(mode)
	ctx, e := m.admit(msg, "SetNetnsMode", call{persist: persist, check: func() error { return m.s.svc.CheckSetNetnsMode(nm, persist) }})
	if e != nil {
		return e
	}
	err := m.s.svc.SetNetnsMode(ctx, nm, persist)
	m.s.flushForReply()
	return busError(err)
}

// Withdraw removes a declaration made over D-Bus so the files decide
// again; [api] changes never refuses it.
func (m *manager) Withdraw(msg dbus.Message, kind, device string, port uint32, persist bool) *dbus.Error {
	w := service.Withdrawal{Kind: service.WithdrawKind(kind), Name: dbusapi.Unescape(device), Port: int(port), Persist: persist}
	ctx, e := m.admit(msg, "Withdraw", call{kind: kind, persist: persist, check: func() error {
		if err := portArg(port); err != nil {
			return err
		}
		return m.s.svc.CheckWithdraw(w)
	}})
	if e != nil {
		return e
	}
	err := m.s.svc.Withdraw(ctx, w)
	m.s.flushForReply()
	return busError(err)
}

func (m *manager) Describe(msg dbus.Message) (string, *dbus.Error) {
	_, e := m.admit(msg, "Describe", call{})
	if e != nil {
		return "", e
	}
	release, e := m.s.enterReport(msg, "Describe")
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
