// Package memlock renders the declared locked-memory limits into files rdmad
// owns: a limits.d file for login sessions (pam_limits) and, if asked, a
// systemd system.conf.d drop-in, because services never read limits.conf.
package memlock

import (
	"bytes"
	"context"
	"fmt"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/reconcile"
)

// Files rdmad owns, relative to the root.
const (
	LimitsFile  = "etc/security/limits.d/90-rdmad-memlock.conf"
	SystemdFile = "etc/systemd/system.conf.d/90-rdmad-memlock.conf"
)

// Header marks a file as rdmad's; rdmad removes or rewrites only files that
// start with it.
const Header = "# Managed by rdmad from its [memlock] configuration; local changes are overwritten.\n"

// RenderLimits is the limits.conf(5) content for m.
func RenderLimits(m *config.Memlock) []byte {
	var b bytes.Buffer
	b.WriteString(Header)
	fmt.Fprintf(&b, "@%s soft memlock %s\n", m.Group, m.Soft.LimitsConf())
	fmt.Fprintf(&b, "@%s hard memlock %s\n", m.Group, m.Hard.LimitsConf())
	return b.Bytes()
}

// RenderSystemd is the system.conf.d drop-in for m (soft:hard, as systemd.exec(5) allows).
func RenderSystemd(m *config.Memlock) []byte {
	var b bytes.Buffer
	b.WriteString(Header)
	b.WriteString("# Takes effect for services started after the next boot or `systemctl daemon-reexec`.\n")
	b.WriteString("[Manager]\n")
	if m.Soft == m.Hard {
		fmt.Fprintf(&b, "DefaultLimitMEMLOCK=%s\n", m.Soft.Systemd())
	} else {
		fmt.Fprintf(&b, "DefaultLimitMEMLOCK=%s:%s\n", m.Soft.Systemd(), m.Hard.Systemd())
	}
	return b.Bytes()
}

// Kinds of the actions this part reports, one per file. A Changed action's
// Old is the file before (a host.FileSnapshot).
const (
	Limits  = reconcile.KindMemlockLimits
	Systemd = reconcile.KindMemlockSystemd
)

// Kinds implements reconcile.Part.
func (*Part) Kinds() []reconcile.Kind { return []reconcile.Kind{Limits, Systemd} }

// Undo implements reconcile.Part: the file is put back as it was (removed
// when it did not exist). Sessions and services started in between keep
// the limits they got.
func (p *Part) Undo(_ context.Context, a reconcile.Action) error {
	rel := map[reconcile.Kind]string{Limits: LimitsFile, Systemd: SystemdFile}[a.Kind]
	snap, ok := a.Old.(host.FileSnapshot)
	if rel == "" || !ok {
		return fmt.Errorf("memlock: %s %s: the file before the change is not known", a.Subject, a.Kind)
	}
	if err := p.Host.Restore(rel, Header, snap); err != nil {
		return fmt.Errorf("memlock: %w", err)
	}
	return nil
}

// Part is the memlock host part of the reconciler.
type Part struct {
	Host *host.Host
}

// Apply writes or removes the managed files.
func (p *Part) Apply(_ context.Context, pass *reconcile.Pass) reconcile.Result {
	m := pass.Policy.Memlock
	var acts []reconcile.Action
	if m == nil {
		acts = appendIf(acts, p.remove(LimitsFile, Limits))
		acts = appendIf(acts, p.remove(SystemdFile, Systemd))
		return reconcile.Result{Actions: acts}
	}
	acts = append(acts, p.write(LimitsFile, Limits, RenderLimits(m)))
	if m.Services {
		acts = append(acts, p.write(SystemdFile, Systemd, RenderSystemd(m)))
	} else {
		acts = appendIf(acts, p.remove(SystemdFile, Systemd))
	}
	return reconcile.Result{Actions: acts}
}

func appendIf(acts []reconcile.Action, a *reconcile.Action) []reconcile.Action {
	if a != nil {
		acts = append(acts, *a)
	}
	return acts
}

func (p *Part) write(rel string, kind reconcile.Kind, data []byte) reconcile.Action {
	act := reconcile.Action{Subject: reconcile.HostSubject(), Kind: kind, To: "/" + rel}
	old, err := p.Host.Snapshot(rel)
	if err != nil {
		act.Status, act.Err = reconcile.Failed, fmt.Errorf("memlock: %w", err)
		return act
	}
	act.Old = old
	changed, err := p.Host.WriteManaged(rel, Header, data)
	switch {
	case err != nil:
		act.Status, act.Err = reconcile.Failed, fmt.Errorf("memlock: %w", err)
	case changed:
		act.Status = reconcile.Changed
	default:
		act.Status = reconcile.Unchanged
	}
	return act
}

// remove deletes a file rdmad wrote earlier, and nothing else.
func (p *Part) remove(rel string, kind reconcile.Kind) *reconcile.Action {
	old, err := p.Host.Snapshot(rel)
	if err == nil && !old.Exists {
		return nil
	}
	removed := false
	if err == nil {
		removed, err = p.Host.RemoveManaged(rel, Header)
	}
	if err == nil && !removed {
		return nil
	}
	act := reconcile.Action{Subject: reconcile.HostSubject(), Kind: kind, From: "/" + rel, To: "removed", Status: reconcile.Changed, Old: old}
	if err != nil {
		act.Status, act.Err = reconcile.Failed, fmt.Errorf("memlock: %w", err)
	}
	return &act
}
