package config

import (
	"bytes"
	"errors"
	"fmt"
	"github.com/rdmad/rdmad/daemon/config/value"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"
	"unicode/utf8"
)

// PersistedHeader opens rdmad's own drop-in, so nobody edits it by mistake.
const PersistedHeader = "# Managed by rdmad: changes made with rdmactl --persist / D-Bus. Edit other files instead.\n"

// Persisted is the content of rdmad's drop-in (PersistedName): the changes
// made over D-Bus with "persist". It is loaded last, so it wins over every
// administrator's file.
type Persisted struct {
	RoCE  []RoCERule
	QoS   []QoSRule
	Links []Link
	Netns NetnsMode // NetnsUnmanaged: not persisted
	// NetnsNote is who persisted Netns, and when; each rule and link
	// carries its own Note. Render writes a note above its entry.
	NetnsNote Note
}

// PersistedPath is the path of rdmad's drop-in in dropinDir.
func PersistedPath(dropinDir string) string {
	return filepath.Join(dropinDir, PersistedName)
}

// LoadPersisted reads rdmad's drop-in; a missing file is an empty Persisted.
// A file holding tables rdmad never writes was edited by hand: that is an
// error rather than silently dropping them at the next write.
func LoadPersisted(r Reader, dropinDir string) (Persisted, error) {
	name := PersistedPath(dropinDir)
	data, err := r.ReadFile(name)
	if errors.Is(err, fs.ErrNotExist) {
		return Persisted{}, nil
	}
	if err != nil {
		return Persisted{}, fmt.Errorf("read %s: %w", name, err)
	}
	return parsePersisted(name, data)
}

func parsePersisted(name string, data []byte) (Persisted, error) {
	decl, err := parseFile(name, data)
	if err != nil {
		return Persisted{}, err
	}
	for _, t := range decl.tables {
		switch t {
		case "roce", "qos", "link", "netns":
		default:
			return Persisted{}, &Error{Pos: Position{File: name, Line: indexLines(string(data)).lookup(t)}, Key: t,
				Msg: "rdmad does not persist this table; move it to another drop-in, rdmad rewrites this file"}
		}
	}
	return Persisted{RoCE: decl.roce, QoS: decl.qos, Links: decl.links, Netns: decl.netns.mode.Value, NetnsNote: decl.netnsNote}, nil
}

// Empty reports whether nothing is persisted.
func (p Persisted) Empty() bool {
	return len(p.RoCE) == 0 && len(p.QoS) == 0 && len(p.Links) == 0 && p.Netns == NetnsUnmanaged
}

// Render returns the drop-in's text. The output depends only on p, so an
// unchanged Persisted renders to identical bytes and is not rewritten.
func (p Persisted) Render() []byte {
	var b bytes.Buffer
	b.WriteString(PersistedHeader)
	if p.Netns != NetnsUnmanaged {
		b.WriteString("\n")
		writeNote(&b, p.NetnsNote)
		b.WriteString("[netns]\n")
		writeKey(&b, "mode", string(p.Netns))
	}
	for _, r := range p.RoCE {
		b.WriteString("\n")
		writeNote(&b, r.Note)
		b.WriteString("[[roce]]\n")
		writeSelector(&b, r.Selector)
		if r.Port != 0 {
			fmt.Fprintf(&b, "port = %d\n", r.Port)
		}
		if r.Mode != "" {
			writeKey(&b, "mode", string(r.Mode))
		}
		if r.TOS != nil {
			fmt.Fprintf(&b, "tos = %d\n", *r.TOS)
		}
		if r.TrafficClass != nil {
			fmt.Fprintf(&b, "traffic_class = %t\n", *r.TrafficClass)
		}
	}
	for _, r := range p.QoS {
		b.WriteString("\n")
		writeNote(&b, r.Note)
		b.WriteString("[[qos]]\n")
		writeSelector(&b, r.Selector)
		if r.Port != 0 {
			fmt.Fprintf(&b, "port = %d\n", r.Port)
		}
		if r.Trust != "" {
			writeKey(&b, "trust", string(r.Trust))
		}
		if r.HasPFC {
			b.WriteString("pfc = [")
			for i, n := range r.PFC {
				if i > 0 {
					b.WriteString(", ")
				}
				fmt.Fprintf(&b, "%d", n)
			}
			b.WriteString("]\n")
		}
		if len(r.DSCPPrio) > 0 {
			b.WriteString("dscp_prio = {")
			for i, d := range sortedDSCP(r.DSCPPrio) {
				if i > 0 {
					b.WriteString(",")
				}
				fmt.Fprintf(&b, " %d = %d", d, r.DSCPPrio[d])
			}
			b.WriteString(" }\n")
		}
		r.LosslessRule.render(&b)
	}
	for _, l := range p.Links {
		b.WriteString("\n")
		writeNote(&b, l.Note)
		b.WriteString("[[link]]\n")
		writeKey(&b, "name", l.Name)
		writeKey(&b, "type", string(l.Type))
		writeKey(&b, "netdev", l.Netdev)
	}
	return b.Bytes()
}

// writeNote writes who set the entry that follows, and when.
func writeNote(b *bytes.Buffer, n Note) {
	if !n.Empty() {
		b.WriteString(n.comment())
	}
}

func writeSelector(b *bytes.Buffer, s Selector) {
	for _, kv := range [][2]string{{"device", s.Device.Text()}, {"guid", s.GUID}, {"pci", s.PCI}, {"netdev", s.Netdev}, {"driver", s.Driver}} {
		if kv[1] != "" {
			writeKey(b, kv[0], kv[1])
		}
	}
}

func writeKey(b *bytes.Buffer, key, value string) {
	fmt.Fprintf(b, "%s = %s\n", key, tomlQuote(value))
}

// tomlQuote writes a TOML basic string. strconv.Quote is not TOML: it emits
// \x escapes, which TOML lacks.
func tomlQuote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\n':
			b.WriteString(`\n`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\u%04X`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// Validate checks that the rendered file would load: the same rules as any
// administrator's file, so rdmad never writes a drop-in that breaks the next
// start. The service writes it with host.WriteManaged (PersistedHeader).
func (p Persisted) Validate() error {
	// TOML holds only UTF-8: a name with another byte would be written as
	// U+FFFD and come back as another name.
	for _, v := range p.names() {
		if !utf8.ValidString(v) {
			return fmt.Errorf("persisted settings are invalid: %s is not UTF-8, which a TOML file cannot hold", value.Quote(v))
		}
	}
	decl, err := parseFile(PersistedName, p.Render())
	if err != nil {
		return fmt.Errorf("persisted settings are invalid: %w", err)
	}
	if _, err := merge([]*fileDecl{decl}); err != nil {
		return fmt.Errorf("persisted settings are invalid: %w", err)
	}
	return nil
}

// names lists every name p holds (selectors, links).
func (p Persisted) names() []string {
	var out []string
	for _, r := range p.RoCE {
		out = append(out, r.Selector.Device.Name, r.Selector.GUID, r.Selector.PCI, r.Selector.Netdev, r.Selector.Driver)
	}
	for _, r := range p.QoS {
		out = append(out, r.Selector.Device.Name, r.Selector.GUID, r.Selector.PCI, r.Selector.Netdev, r.Selector.Driver)
	}
	for _, l := range p.Links {
		out = append(out, l.Name, l.Netdev)
	}
	return out
}

func sortedDSCP(m map[uint8]uint8) []uint8 {
	out := make([]uint8, 0, len(m))
	for d := range m {
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// SetQoS persists trust and/or PFC for one device (port 0: every port),
// as SetRoCE does for RoCE: trust "" and hasPFC false leave that field to
// the other rules; pfc empty with hasPFC turns PFC off.
func (p *Persisted) SetQoS(sel Selector, port int, trust QoSTrust, pfc []uint8, hasPFC bool) {
	if trust == "" && !hasPFC {
		return
	}
	r := QoSRule{Selector: sel, Port: port, Trust: trust, HasPFC: hasPFC}
	if hasPFC {
		r.PFC = append([]uint8{}, pfc...)
	}
	p.QoS = MergeRule(p.QoS, r)
}

// AdminLinkSources returns where the link called name is declared in the
// configuration files of mainFile other than rdmad's drop-in, in merge
// order: those declarations come back whatever rdmad's drop-in says, so a
// persistent removal must be refused. The files are read as they are on
// disk now.
func AdminLinkSources(r Reader, mainFile, name string) ([]Position, error) {
	names, err := dropIns(r, DropInDirFor(mainFile))
	if err != nil {
		return nil, err
	}
	var out []Position
	for _, file := range append([]string{mainFile}, names...) {
		if filepath.Base(file) == PersistedName {
			continue
		}
		data, err := r.ReadFile(file)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", file, err)
		}
		decl, err := parseFile(file, data)
		if err != nil {
			return nil, err
		}
		for _, l := range decl.links {
			if l.Name == name {
				out = append(out, l.Source)
			}
		}
	}
	return out, nil
}

// SetRoCE persists mode and/or TOS for one device (port 0: every port).
// sel.Device is typically one exact device name (Exact); Render escapes
// its glob characters, so the rule selects exactly that device. The entry for the same selector and
// port is updated in place where that gives the same result, keeping what
// is not given (mode "" or tos nil); see MergeRule.
func (p *Persisted) SetRoCE(sel Selector, port int, mode RoCEMode, tos *int) {
	if mode == "" && tos == nil {
		return
	}
	var tosCopy *int
	if tos != nil {
		v := *tos
		tosCopy = &v
	}
	p.RoCE = MergeRule(p.RoCE, RoCERule{Selector: sel, Port: port, Mode: mode, TOS: tosCopy})
}

// AddLink persists a link, replacing one of the same name.
func (p *Persisted) AddLink(l Link) {
	l.Source = Position{}
	for i := range p.Links {
		if p.Links[i].Name == l.Name {
			p.Links[i] = l
			return
		}
	}
	p.Links = append(p.Links, l)
}

// RemoveLink drops the persisted link called name and reports whether there
// was one. A link declared in another file is not here (AdminLinkSources
// finds it).
func (p *Persisted) RemoveLink(name string) bool {
	for i := range p.Links {
		if p.Links[i].Name == name {
			p.Links = append(p.Links[:i:i], p.Links[i+1:]...)
			return true
		}
	}
	return false
}

// SetQoSSettings persists the lossless settings r declares for one device
// (port 0: every port), as SetQoS does for trust and PFC.
func (p *Persisted) SetQoSSettings(sel Selector, port int, r LosslessRule) {
	if !r.declaresAny() {
		return
	}
	p.QoS = MergeRule(p.QoS, QoSRule{Selector: sel, Port: port, LosslessRule: r})
}
