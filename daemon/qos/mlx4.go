package qos

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"unicode"

	"github.com/rdmad/rdmad/daemon/dcb"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/reconcile"
)

// MLX4File is rdmad's own modprobe.d file for the mlx4_en PFC options,
// relative to the root. rdmad never edits the administrator's mlx4.conf.
const MLX4File = "etc/modprobe.d/rdmad-mlx4-pfc.conf"

// mlx4Header starts the file; a file without it is not rdmad's.
const mlx4Header = "# Managed by rdmad from [[qos]] pfc of mlx4 ports in rdmad.toml; changes here are overwritten.\n"

// MLX4Options is the kind of the host-wide mlx4_en options file action;
// a Changed one's Old is the file before (a host.FileSnapshot).
const MLX4Options = reconcile.KindQoSMLX4

// Kinds implements reconcile.Part.
func (*MLX4Part) Kinds() []reconcile.Kind { return []reconcile.Kind{MLX4Options} }

// Undo implements reconcile.Part: the file is put back as it was (removed
// when it did not exist). A driver loaded in between keeps what it read.
func (m *MLX4Part) Undo(_ context.Context, a reconcile.Action) error {
	snap, ok := a.Old.(host.FileSnapshot)
	if a.Kind != MLX4Options || !ok {
		return fmt.Errorf("qos: %s %s: the file before the change is not known", a.Subject, a.Kind)
	}
	if err := m.Host.Restore(MLX4File, mlx4Header, snap); err != nil {
		return fmt.Errorf("qos: %w", err)
	}
	return nil
}

// RenderMLX4 returns the file for the PFC mask (bit N = priority N).
func RenderMLX4(mask uint8, sources []string) []byte {
	var b bytes.Buffer
	b.WriteString(mlx4Header)
	// The sources are file names: one with a control character is quoted
	// (%q), so a newline in it cannot start a line modprobe would read.
	quoted := make([]string, len(sources))
	for i, src := range sources {
		quoted[i] = src
		if strings.ContainsFunc(src, unicode.IsControl) {
			quoted[i] = strconv.Quote(src)
		}
	}
	fmt.Fprintf(&b, "# PFC on priorities %s (bit N = priority N), declared at %s.\n", FormatPrios(dcb.Bits(mask)), strings.Join(quoted, ", "))
	b.WriteString("# mlx4_en reads it when it loads; rebuild the initramfs if mlx4_en loads from there.\n")
	fmt.Fprintf(&b, "options mlx4_en pfctx=0x%02x pfcrx=0x%02x\n", mask, mask)
	return b.Bytes()
}

// MLX4Part writes the mlx4_en PFC module options from the [[qos]] pfc of
// the Ethernet ports of mlx4 devices: host-wide, so every such port must
// ask for the same priorities. pfc = [] removes the file; no mlx4 port with
// a declared pfc leaves it alone, as an absent pfc leaves PFC alone.
type MLX4Part struct {
	Host *host.Host
}

type mlx4Want struct {
	mask   uint8
	port   string
	source config.Position
}

// Apply implements reconcile.HostPart.
func (m *MLX4Part) Apply(_ context.Context, pass *reconcile.Pass) reconcile.Result {
	var wants []mlx4Want
	for _, d := range pass.Devices {
		if d.Driver != MLX4Driver {
			continue
		}
		t := reconcile.TargetOf(d)
		for i := range d.Ports {
			p := &d.Ports[i]
			if d.PortTransport(p) != host.TransportRoCE {
				continue
			}
			if w := pass.Policy.QoSFor(t, p.Number); w.HasPFC {
				wants = append(wants, mlx4Want{mask: w.PFCMask(), port: reconcile.PortSubject(d.Name, p.Number).String(), source: w.PFCSource})
			}
		}
	}
	if len(wants) == 0 {
		return reconcile.Result{}
	}
	act := reconcile.Action{Subject: reconcile.HostSubject(), Kind: MLX4Options, To: "/" + MLX4File, Source: wants[0].source.String()}
	for _, w := range wants[1:] {
		if w.mask != wants[0].mask {
			act.Status = reconcile.Failed
			act.Err = fmt.Errorf("qos: the mlx4_en PFC module options are host-wide, but %s asks pfc = %s (%s) and %s asks pfc = %s (%s): make the rules agree",
				wants[0].port, FormatPrios(dcb.Bits(wants[0].mask)), wants[0].source, w.port, FormatPrios(dcb.Bits(w.mask)), w.source)
			return reconcile.Result{Actions: []reconcile.Action{act}}
		}
	}
	seen := map[string]bool{}
	var sources []string
	for _, w := range wants {
		if s := w.source.String(); !seen[s] {
			seen[s] = true
			sources = append(sources, s)
		}
	}
	sort.Strings(sources)
	mask := wants[0].mask
	old, err := m.Host.Snapshot(MLX4File)
	if err != nil {
		act.Status, act.Err = reconcile.Failed, fmt.Errorf("qos: %w", err)
		return reconcile.Result{Actions: []reconcile.Action{act}}
	}
	act.Old = old
	if mask == 0 {
		removed, err := m.Host.RemoveManaged(MLX4File, mlx4Header)
		switch {
		case err != nil:
			act.Status, act.Err = reconcile.Failed, fmt.Errorf("qos: %w", err)
		case removed:
			act.From, act.To, act.Status = "/"+MLX4File, "removed", reconcile.Changed
		default:
			act.To, act.Status = "absent", reconcile.Unchanged
		}
		return reconcile.Result{Actions: []reconcile.Action{act}}
	}
	changed, err := m.Host.WriteManaged(MLX4File, mlx4Header, RenderMLX4(mask, sources))
	switch {
	case err != nil:
		act.Status, act.Err = reconcile.Failed, fmt.Errorf("qos: %w", err)
	case changed:
		act.Status = reconcile.Changed
	default:
		act.Status = reconcile.Unchanged
	}
	return reconcile.Result{Actions: []reconcile.Action{act}}
}
