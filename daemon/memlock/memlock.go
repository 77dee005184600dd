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

// Part is the memlock host part of the reconciler.
type Part struct {
	Host *host.Host
}

// Name implements reconcile.HostPart.
func (*Part) Name() string { return "memlock" }

// Apply writes or removes the managed files.
func (p *Part) Apply(ctx context.Context, pol *config.Policy, _ []host.Device) []reconcile.Action {
	m := pol.Memlock
	var acts []reconcile.Action
	if m == nil {
		acts = appendIf(acts, p.remove(LimitsFile))
		return appendIf(acts, p.remove(SystemdFile))
	}
	acts = append(acts, p.write(LimitsFile, "limits.d", RenderLimits(m)))
	if m.Services {
		acts = append(acts, p.write(SystemdFile, "systemd DefaultLimitMEMLOCK", RenderSystemd(m)))
	} else {
		acts = appendIf(acts, p.remove(SystemdFile))
	}
	return acts
}

func appendIf(acts []reconcile.Action, a *reconcile.Action) []reconcile.Action {
	if a != nil {
		acts = append(acts, *a)
	}
	return acts
}

func (p *Part) write(rel, what string, data []byte) reconcile.Action {
	act := reconcile.Action{Target: "memlock", What: what, To: "/" + rel}
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
func (p *Part) remove(rel string) *reconcile.Action {
	removed, err := p.Host.RemoveManaged(rel, Header)
	if err == nil && !removed {
		return nil
	}
	act := reconcile.Action{Target: "memlock", What: "remove", From: "/" + rel, Status: reconcile.Changed}
	if err != nil {
		act.Status, act.Err = reconcile.Failed, fmt.Errorf("memlock: %w", err)
	}
	return &act
}
