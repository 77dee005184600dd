// Package links keeps the declared soft RDMA devices ([[link]]: Soft-RoCE
// rxe, Soft-iWARP siw) in existence: whenever the netdev a link sits on
// exists and the link does not, it is created again, as `rdma link add NAME
// type TYPE netdev NETDEV` would. rdmad never deletes a device it was not
// told to manage, and never "fixes" a same-named device of another kind.
package links

import (
	"context"
	"errors"
	"fmt"
	"path"

	"github.com/vishvananda/netlink"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/config/value"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/reconcile"
)

// Netlink creates and deletes soft RDMA links. RDMANetlink is the real one.
type Netlink interface {
	LinkAdd(name, typ, netdev string) error
	LinkDel(name string) error
}

// RDMANetlink talks RDMA netlink (NETLINK_RDMA, RDMA_NLDEV_CMD_NEWLINK /
// DELLINK) through vishvananda/netlink, exactly what iproute2's `rdma link`
// sends.
type RDMANetlink struct{}

// LinkAdd implements Netlink.
func (RDMANetlink) LinkAdd(name, typ, netdev string) error {
	if err := netlink.RdmaLinkAdd(name, typ, netdev); err != nil {
		return fmt.Errorf("rdma link add %s type %s netdev %s: %w", name, typ, netdev, err)
	}
	return nil
}

// LinkDel implements Netlink.
func (RDMANetlink) LinkDel(name string) error {
	if err := netlink.RdmaLinkDel(name); err != nil {
		return fmt.Errorf("rdma link delete %s: %w", name, err)
	}
	return nil
}

// Module returns the kernel module that provides a link type.
func Module(t config.LinkType) string {
	switch t {
	case config.LinkRXE:
		return host.DriverRXE
	case config.LinkSIW:
		return host.DriverSIW
	}
	return ""
}

// SoftLink is a soft RDMA device as observed on the host.
type SoftLink struct {
	Name   string
	Type   config.LinkType
	Netdev string // "" when the kernel does not say
}

// Value is the link setting's value: the link as it exists, or absent.
type Value struct {
	Exists bool            `json:",omitempty"`
	Type   config.LinkType `json:",omitempty"`
	Netdev string          `json:",omitempty"` // "" when the kernel does not say
}

// String is "rxe on eth1", or "absent".
func (v Value) String() string {
	if !v.Exists {
		return "absent"
	}
	return fmt.Sprintf("%s on %s", v.Type, orUnknown(v.Netdev))
}

func valueOf(sl SoftLink) Value { return Value{Exists: true, Type: sl.Type, Netdev: sl.Netdev} }

// Classify tells whether the RDMA device d is a soft link and of which type,
// by the driver host names for it (see host.DriverRXE).
func Classify(d *host.Device) (SoftLink, bool) {
	switch d.Driver {
	case host.DriverRXE:
		return SoftLink{Name: d.Name, Type: config.LinkRXE, Netdev: d.Parent}, true
	case host.DriverSIW:
		sl := SoftLink{Name: d.Name, Type: config.LinkSIW, Netdev: d.Parent}
		if sl.Netdev == "" && len(d.Netdevs) == 1 {
			sl.Netdev = d.Netdevs[0]
		}
		return sl, true
	}
	return SoftLink{}, false
}

// ErrNotSoftLink is returned (wrapped) when asked to delete a device that is
// not an rxe or siw link: rdmad never removes hardware devices.
var ErrNotSoftLink = errors.New("not a soft RDMA link (rxe or siw)")

// Delete removes the soft link name (the D-Bus "DeleteLink" call) and
// reports it as a Remove action whose Old is the link as it was (a
// SoftLink), so Undo can create it again. It refuses devices that are not
// rxe/siw links. Deleting a declared link only lasts until the next pass
// recreates it; callers that mean it remove the declaration too.
func (p *Part) Delete(ctx context.Context, name string) reconcile.Action {
	act := reconcile.Action{Subject: reconcile.LinkSubject(name), Kind: Remove, Setting: Link.Setting(), From: name, To: "deleted",
		New: Value{}, Status: reconcile.Changed}
	sl, err := remove(ctx, p.Netlink, p.Host, name)
	if err != nil {
		act.Status, act.Err = reconcile.Failed, err
		return act
	}
	act.Old = valueOf(sl)
	return act
}

func remove(ctx context.Context, nl Netlink, h *host.Host, name string) (SoftLink, error) {
	if err := ctx.Err(); err != nil {
		return SoftLink{}, fmt.Errorf("delete %s: %w", name, err)
	}
	d, err := h.ReadDevice(name, host.DetailPolicy)
	if err != nil {
		return SoftLink{}, fmt.Errorf("delete %s: %w", name, err)
	}
	sl, ok := Classify(&d)
	if !ok {
		drv := d.Driver
		if drv == "" {
			drv = "unknown driver"
		}
		return SoftLink{}, fmt.Errorf("delete %s (%s): %w", name, drv, ErrNotSoftLink)
	}
	if err := nl.LinkDel(name); err != nil {
		return SoftLink{}, err // the netlink error names the call
	}
	return sl, nil
}

// Link is a declared soft link kept in existence, on its link subject.
var Link = reconcile.NewSetting[Value](reconcile.Setting{Name: "soft_link", Kind: "soft link", Key: config.KeyLink, Title: "soft link",
	Valid: reconcile.ValueRule(func(v Value) error {
		if !v.Exists {
			return nil
		}
		if err := value.LinkType(string(v.Type)); err != nil {
			return err
		}
		if v.Netdev == "" {
			return nil // the kernel did not say
		}
		return value.NetdevName(v.Netdev)
	})})

// Kinds of the actions on links.
const (
	// Create is a declared link kept in existence (Link's kind).
	Create reconcile.Kind = "soft link"
	// Remove is a link deleted over D-Bus; its Old is the link deleted.
	Remove reconcile.Kind = "delete"
)

// Kinds implements reconcile.Part.
func (*Part) Kinds() []reconcile.Kind { return []reconcile.Kind{Create, Remove} }

// Settings implements reconcile.Part.
func (*Part) Settings() []*reconcile.Setting { return []*reconcile.Setting{Link.Setting()} }

// Undo implements reconcile.Part: a link this part created is deleted, a
// link deleted over D-Bus is created again as it was (type and netdev).
func (p *Part) Undo(ctx context.Context, a reconcile.Action) error {
	switch a.Kind {
	case Create:
		_, err := remove(ctx, p.Netlink, p.Host, a.Subject.Link)
		if old, ok := Link.Old(a); ok && !old.Exists && errors.Is(err, host.ErrNoDevice) {
			return nil // absent before, gone already: as the undo wants it
		}
		return err
	case Remove:
		old, ok := Link.Old(a)
		if !ok || !old.Exists || old.Netdev == "" {
			return fmt.Errorf("the type and netdev %s had are not known", a.Subject)
		}
		act, _ := ensure(ctx, nil, p.Netlink, p.Loader, p.Host, config.Link{Name: a.Subject.Link, Type: old.Type, Netdev: old.Netdev}, nil, map[string]bool{})
		if act.Status == reconcile.Failed || act.Status == reconcile.NotApplicable {
			return fmt.Errorf("recreate %s: %w", a.Subject.Link, act.Err)
		}
		return nil
	}
	return fmt.Errorf("%s: %w", a.Kind, reconcile.ErrNotUndoable)
}

// Loader loads kernel modules (daemon/modules.Modprobe in rdmad): the
// module of a link's type (rdma_rxe, siw) before it is created.
type Loader interface {
	Load(ctx context.Context, names []string) error
}

// Part is the reconciler's Early host part for [[link]]: it runs before
// devices are read so a link created here is configured in the same pass.
type Part struct {
	Host    *host.Host
	Netlink Netlink
	Loader  Loader
}

// Apply implements reconcile.HostPart. It sees the devices known before
// the pass and reads only the declared links' own devices.
func (p *Part) ApplyHost(ctx context.Context, run *reconcile.HostRun) reconcile.Result {
	var res reconcile.Result
	loaded := map[string]bool{} // modules loaded by this pass
	for _, l := range run.Policy.Links {
		if ctx.Err() != nil {
			break
		}
		act, rec := ensure(ctx, run, p.Netlink, p.Loader, p.Host, l, run.Devices, loaded)
		if act.Status == reconcile.Changed {
			res.Created = append(res.Created, l.Name)
		}
		res.Actions, res.Records = append(res.Actions, act), append(res.Records, rec)
	}
	return res
}

// ensure makes one declared link exist. loaded remembers modules already
// loaded in this pass; guard, when set, may hold the creation back.
func ensure(ctx context.Context, guard reconcile.WriteGuard, nl Netlink, loader Loader, h *host.Host, l config.Link, known []*host.Device, loaded map[string]bool) (reconcile.Action, reconcile.Record) {
	subject := reconcile.LinkSubject(l.Name)
	want := Value{Exists: true, Type: l.Type, Netdev: l.Netdev}
	act := reconcile.Action{Subject: subject, Kind: Create, Setting: Link.Setting(), To: want.String(), New: want, Source: l.Source.String()}
	rec := reconcile.Record{Subject: subject, Setting: Link.Setting(), Declared: want, Source: l.Source,
		Watch: []string{}}
	fail := func(state reconcile.RecordState, err error) (reconcile.Action, reconcile.Record) {
		act.Status, act.Err = reconcile.Failed, err
		rec.State, rec.Why = state, err
		return act, rec
	}
	if l.Source.File == "" {
		act.Source = ""
	}

	d, err := h.ReadDevice(l.Name, host.DetailPolicy)
	switch {
	case err == nil:
		sl, soft := Classify(&d)
		if !soft {
			rec.Observed = Value{Exists: true, Netdev: "a hardware device"}
			return fail(reconcile.Refused, fmt.Errorf("RDMA device %s exists and is not a soft link (driver %q); declared %s on %s; leaving it alone", l.Name, d.Driver, l.Type, l.Netdev))
		}
		have := valueOf(sl)
		act.From, act.Old, rec.Observed = have.String(), have, have
		if sl.Type != l.Type || (sl.Netdev != "" && sl.Netdev != l.Netdev) {
			return fail(reconcile.Refused, fmt.Errorf("%s exists as %s on %s, declared %s on %s; not replacing it (delete it with `rdmactl link del %s` to let rdmad recreate it)",
				l.Name, sl.Type, orUnknown(sl.Netdev), l.Type, l.Netdev, l.Name))
		}
		act.Status, rec.State = reconcile.Unchanged, reconcile.Holds
		return act, rec
	case !errors.Is(err, host.ErrNoDevice):
		return fail(reconcile.Unknown, err)
	}

	if !h.NetdevExists(l.Netdev) {
		act.Status, act.Err = reconcile.NotApplicable, fmt.Errorf("waiting for netdev %s", l.Netdev)
		rec.State, rec.Why = reconcile.Inapplicable, act.Err
		return act, rec
	}
	absent := Value{}
	act.From, act.Old, rec.Observed = absent.String(), absent, absent
	if guard != nil {
		if state, why := guard.Hold(subject, Link.Setting(), want, l.Source); why != nil {
			act.Status, act.Err = reconcile.Held, why
			rec.State, rec.Why = state, why
			return act, rec
		}
	}

	// The kernel allows one rxe/siw device per netdev; say which one holds
	// it rather than pass on a bare EEXIST. (known is from before the
	// pass: a device of this name there, just read absent, was deleted
	// since.)
	if other, ok := softOn(known, l.Type, l.Netdev); ok && other != l.Name {
		return fail(reconcile.Refused, fmt.Errorf("netdev %s already carries %s device %s; cannot also create %s", l.Netdev, l.Type, other, l.Name))
	}

	mod := Module(l.Type)
	if !loaded[mod] {
		have, err := h.LoadedModules()
		if err != nil {
			return fail(reconcile.Refused, err)
		}
		if !have[mod] {
			if err := loader.Load(ctx, []string{mod}); err != nil {
				return fail(reconcile.Refused, fmt.Errorf("load %s for %s: %w", mod, l.Name, err))
			}
		}
		loaded[mod] = true
	}
	if err := nl.LinkAdd(l.Name, string(l.Type), l.Netdev); err != nil {
		return fail(reconcile.Refused, err) // the netlink error names the call
	}
	if !h.Exists(path.Join(host.ClassInfiniband, l.Name)) {
		return fail(reconcile.Refused, fmt.Errorf("created %s but it does not show in sysfs", l.Name))
	}
	act.Status, rec.State, rec.Observed = reconcile.Changed, reconcile.Holds, want
	return act, rec
}

// softOn finds a known soft device of type t on netdev.
func softOn(known []*host.Device, t config.LinkType, netdev string) (string, bool) {
	for _, d := range known {
		if sl, ok := Classify(d); ok && sl.Type == t && sl.Netdev == netdev {
			return sl.Name, true
		}
	}
	return "", false
}

func orUnknown(s string) string {
	if s == "" {
		return "an unknown netdev"
	}
	return s
}
