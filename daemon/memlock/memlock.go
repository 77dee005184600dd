// Package memlock renders the declared locked-memory limits into files rdmad
// owns: a limits.d file for login sessions (pam_limits) and, if asked, a
// systemd system.conf.d drop-in, because services never read limits.conf.
package memlock

import (
	"bytes"
	"context"
	"fmt"
	"strings"

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

// The part's settings, one per file: their values are the files' content.
var (
	Limits = reconcile.NewSetting[host.FileSnapshot](reconcile.Setting{
		Name: "memlock_limits", Kind: "memlock limits.d", Key: config.KeyMemlock, Title: "memlock limits.d file",
		Valid: reconcile.CheckRendered(Header, renderedLimits)})
	Systemd = reconcile.NewSetting[host.FileSnapshot](reconcile.Setting{
		Name: "memlock_systemd", Kind: "memlock DefaultLimitMEMLOCK", Key: config.KeyMemlock, Title: "memlock systemd drop-in",
		Valid: reconcile.CheckRendered(Header, renderedSystemd)})
)

// renderedLimits is the limits.d file a [memlock] table gives for the
// group and limits of lines, as RenderLimits writes them; the values are
// checked as the configuration's ([memlock] parsed from them).
func renderedLimits(lines []string) ([]byte, error) {
	var group, soft, hard string
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) != 4 || f[2] != "memlock" || !strings.HasPrefix(f[0], "@") || (f[1] != "soft" && f[1] != "hard") {
			return nil, fmt.Errorf("%q is not a line rdmad writes (@GROUP soft|hard memlock LIMIT)", l)
		}
		limit := f[3]
		if limit != "unlimited" {
			limit += "K" // limits.conf counts KiB
		}
		if f[1] == "soft" {
			soft = limit
		} else {
			hard = limit
		}
		group = f[0][1:]
	}
	m, err := declaredMemlock(group, soft, hard)
	if err != nil {
		return nil, err
	}
	return RenderLimits(m), nil
}

// renderedSystemd is the systemd drop-in a [memlock] table gives for the
// limits of lines, as RenderSystemd writes them.
func renderedSystemd(lines []string) ([]byte, error) {
	var soft, hard string
	for _, l := range lines {
		v, ok := strings.CutPrefix(l, "DefaultLimitMEMLOCK=")
		if !ok {
			continue // [Manager]: compared as rendered
		}
		soft, hard, ok = strings.Cut(v, ":")
		if !ok {
			hard = soft
		}
	}
	m, err := declaredMemlock("rdma", soft, hard)
	if err != nil {
		return nil, err
	}
	return RenderSystemd(m), nil
}

// declaredMemlock is the [memlock] a configuration with these values
// declares, checked by the configuration's own parser.
func declaredMemlock(group, soft, hard string) (*config.Memlock, error) {
	if group == "" || soft == "" || hard == "" {
		return nil, fmt.Errorf("not the lines rdmad writes for [memlock]: group %q, soft %q, hard %q", group, soft, hard)
	}
	pol, err := config.Parse("memlock", []byte(fmt.Sprintf("[memlock]\ngroup = %q\nsoft = %q\nhard = %q\n", group, soft, hard)))
	if err != nil {
		return nil, err
	}
	return pol.Memlock, nil
}

// Kinds implements reconcile.Part.
func (*Part) Kinds() []reconcile.Kind { return []reconcile.Kind{Limits.Kind(), Systemd.Kind()} }

// Settings implements reconcile.Part.
func (*Part) Settings() []*reconcile.Setting {
	return []*reconcile.Setting{Limits.Setting(), Systemd.Setting()}
}

// Undo implements reconcile.Part: the file is put back as it was (removed
// when it did not exist). Sessions and services started in between keep
// the limits they got.
func (p *Part) Undo(_ context.Context, a reconcile.Action) error {
	switch a.Kind {
	case Limits.Kind():
		return p.limits().Undo(a)
	case Systemd.Kind():
		return p.systemd().Undo(a)
	}
	return fmt.Errorf("%s: %w", a.Kind, reconcile.ErrNotUndoable)
}

// Part is the memlock host part of the reconciler.
type Part struct {
	Host *host.Host
}

func (p *Part) limits() reconcile.ManagedFile {
	return reconcile.ManagedFile{Setting: Limits, Host: p.Host, Rel: LimitsFile, Header: Header}
}

func (p *Part) systemd() reconcile.ManagedFile {
	return reconcile.ManagedFile{Setting: Systemd, Host: p.Host, Rel: SystemdFile, Header: Header}
}

// Apply writes the managed files [memlock] declares, and removes those it
// no longer declares.
func (p *Part) ApplyHost(_ context.Context, run *reconcile.HostRun) reconcile.Result {
	m := run.Policy.Memlock
	var res reconcile.Result
	host := reconcile.HostSubject()
	drop := func(f reconcile.ManagedFile) {
		if a, ok := f.Drop(run, host); ok {
			res.Actions = append(res.Actions, a)
		}
	}
	keep := func(f reconcile.ManagedFile, data []byte) {
		a, rec := f.Keep(run, host, data, m.Source)
		res.Actions, res.Records = append(res.Actions, a), append(res.Records, rec)
	}
	if m == nil {
		drop(p.limits())
		drop(p.systemd())
		return res
	}
	keep(p.limits(), RenderLimits(m))
	if m.Services {
		keep(p.systemd(), RenderSystemd(m))
	} else {
		drop(p.systemd())
	}
	return res
}
