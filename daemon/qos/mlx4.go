package qos

import (
	"bytes"
	"context"
	"fmt"
	"path"
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

// MLX4Options is the host-wide mlx4_en options file, judged on each mlx4
// Ethernet port whose PFC it carries to the next driver load: a failure
// of the file (two ports asking different priorities) is those ports'.
var MLX4Options = reconcile.NewSetting[host.FileSnapshot](reconcile.Setting{
	Name: "qos_pfc_mlx4_en", Kind: "qos mlx4_en modprobe.d", Key: config.KeyQoSPFC, Title: "mlx4_en PFC module options",
	Valid: reconcile.CheckRendered(mlx4Header, renderedMLX4)})

// renderedMLX4 is the mlx4_en options file for the mask of its options
// line, as RenderMLX4 writes it (its comments aside).
func renderedMLX4(lines []string) ([]byte, error) {
	for _, l := range lines {
		var tx, rx uint8
		if _, err := fmt.Sscanf(l, "options mlx4_en pfctx=0x%02x pfcrx=0x%02x", &tx, &rx); err == nil && tx == rx {
			return RenderMLX4(tx, nil), nil
		}
	}
	return nil, fmt.Errorf("no line rdmad writes (options mlx4_en pfctx=0xNN pfcrx=0xNN) in %q", lines)
}

// Kinds implements reconcile.Part.
func (*MLX4Part) Kinds() []reconcile.Kind { return []reconcile.Kind{MLX4Options.Kind()} }

// Settings implements reconcile.Part.
func (*MLX4Part) Settings() []*reconcile.Setting { return []*reconcile.Setting{MLX4Options.Setting()} }

func (m *MLX4Part) file() reconcile.ManagedFile {
	return reconcile.ManagedFile{Setting: MLX4Options, Host: m.Host, Rel: MLX4File, Header: mlx4Header}
}

// Undo implements reconcile.Part: the file is put back as it was (removed
// when it did not exist). A driver loaded in between keeps what it read.
func (m *MLX4Part) Undo(_ context.Context, a reconcile.Action) error {
	if a.Kind != MLX4Options.Kind() {
		return fmt.Errorf("%s: %w", a.Kind, reconcile.ErrNotUndoable)
	}
	return m.file().Undo(a)
}

// absent is the file's value when rdmad writes none.
var absent = host.FileSnapshot{}

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
	port   reconcile.Subject
	source config.Position
}

// Apply implements reconcile.HostPart.
func (m *MLX4Part) ApplyHost(_ context.Context, run *reconcile.HostRun) reconcile.Result {
	var wants []mlx4Want
	for _, d := range run.Devices {
		if d.Driver != host.DriverMLX4 {
			continue
		}
		t := reconcile.TargetOf(d)
		for i := range d.Ports {
			p := &d.Ports[i]
			if d.PortTransport(p) != host.TransportRoCE {
				continue
			}
			if w := run.Policy.QoSFor(t, p.Number); w.HasPFC {
				wants = append(wants, mlx4Want{mask: w.PFCMask(), port: reconcile.PortSubject(d.Name, p.Number), source: w.PFCSource})
			}
		}
	}
	if len(wants) == 0 {
		return reconcile.Result{}
	}
	// The file is one for the host; its record goes on every port whose
	// PFC it carries.
	onPorts := func(act reconcile.Action, rec reconcile.Record) reconcile.Result {
		res := reconcile.Result{Actions: []reconcile.Action{act}}
		for _, w := range wants {
			r := rec
			r.Subject, r.Source = w.port, w.source
			res.Records = append(res.Records, r)
		}
		return res
	}
	hostSubject := reconcile.HostSubject()
	for _, w := range wants[1:] {
		if w.mask != wants[0].mask {
			err := fmt.Errorf("the mlx4_en PFC module options are host-wide, but %s asks pfc = %s (%s) and %s asks pfc = %s (%s): make the rules agree",
				wants[0].port, FormatPrios(dcb.Bits(wants[0].mask)), wants[0].source, w.port, FormatPrios(dcb.Bits(w.mask)), w.source)
			return onPorts(MLX4Options.Refuse(hostSubject, absent, wants[0].source, err))
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
	if mask := wants[0].mask; mask != 0 {
		return onPorts(m.file().Keep(run, hostSubject, RenderMLX4(mask, sources), wants[0].source))
	}
	// pfc = [] on every mlx4 port: no options, rdmad's file goes.
	act, removed := m.file().Drop(run, hostSubject)
	if !removed {
		act.Status, act.From = reconcile.Unchanged, "absent"
	}
	rec := reconcile.Record{Subject: hostSubject, Setting: MLX4Options.Setting(), Declared: absent, Observed: absent, State: reconcile.Holds,
		Watch: []string{path.Dir(MLX4File)}}
	if act.Status == reconcile.Failed {
		rec.State, rec.Why, rec.Observed = reconcile.Refused, act.Err, nil
	}
	return onPorts(act, rec)
}
