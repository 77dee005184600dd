// Package memlock renders the declared locked-memory limits into files rdmad
// owns: a limits.d file for login sessions (pam_limits) and, if asked, a
// systemd system.conf.d drop-in, because services never read limits.conf.
package memlock

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"

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
	if p.Host.FileMatches(rel, data) {
		act.Status = reconcile.Unchanged
		return act
	}
	if old, err := os.ReadFile(p.Host.Path(rel)); err == nil && !bytes.HasPrefix(old, []byte(Header)) {
		act.Status = reconcile.Failed
		act.Err = fmt.Errorf("memlock: /%s exists and is not managed by rdmad; remove it or move its settings into rdmad.toml", rel)
		return act
	}
	if err := p.Host.WriteFileAtomic(rel, data, 0o644); err != nil {
		act.Status, act.Err = reconcile.Failed, fmt.Errorf("memlock: write /%s: %w", rel, err)
		return act
	}
	act.Status = reconcile.Changed
	return act
}

// remove deletes a file rdmad wrote earlier, and nothing else.
func (p *Part) remove(rel string) *reconcile.Action {
	old, err := os.ReadFile(p.Host.Path(rel))
	if errors.Is(err, fs.ErrNotExist) || (err == nil && !bytes.HasPrefix(old, []byte(Header))) {
		return nil
	}
	act := reconcile.Action{Target: "memlock", What: "remove", From: "/" + rel}
	if err == nil {
		err = os.Remove(p.Host.Path(rel))
	}
	if err != nil {
		act.Status, act.Err = reconcile.Failed, fmt.Errorf("memlock: remove /%s: %w", rel, err)
		return &act
	}
	act.Status = reconcile.Changed
	return &act
}
