package config

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path/filepath"
	"sort"
	"strings"
)

// DefaultModulesDirectory is [modules] directory when no file sets it.
const DefaultModulesDirectory = "/etc/rdma/modules"

// DefaultMemlockGroup is [memlock] group when no file sets it.
const DefaultMemlockGroup = "rdma"

// DropInDirFor returns the drop-in directory that belongs to a main file:
// rdmad.d beside it.
func DropInDirFor(mainFile string) string {
	return filepath.Join(filepath.Dir(mainFile), "rdmad.d")
}

// Reader reads configuration files by absolute path. The daemon's one is
// host.Files, whose reads are bounded in size and refuse anything but a
// regular file, so a FIFO or an endless device dropped into rdmad.d cannot
// wedge rdmad.
type Reader interface {
	ReadFile(name string) ([]byte, error)
	// ReadDir lists the names of a directory's entries that are not
	// directories, sorted.
	ReadDir(name string) ([]string, error)
}

// Load reads the main file and then the drop-ins beside it in
// rdmad.d/*.toml, in lexical order, with rdmad's own PersistedName always
// last. A missing main file or drop-in directory is not an error: defaults
// apply. Problems in any file are reported together, each naming file,
// line and key.
func Load(r Reader, mainFile string) (*Policy, error) {
	dropInDir := DropInDirFor(mainFile)
	names, err := dropIns(r, dropInDir)
	if err != nil {
		return nil, err
	}
	names = append([]string{mainFile}, names...)

	var decls []*fileDecl
	var errs []error
	for _, name := range names {
		data, err := r.ReadFile(name)
		if errors.Is(err, fs.ErrNotExist) {
			continue // no main file, or a drop-in removed since the listing
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("read %s: %w", name, err))
			continue
		}
		decl, err := parseFile(name, data)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		decls = append(decls, decl)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	p, err := merge(decls)
	if err != nil {
		return nil, err
	}
	p.MainFile, p.DropInDir = mainFile, dropInDir
	return p, nil
}

// NothingDeclared is the policy of a daemon whose files do not load and
// that has no last good configuration: it declares nothing, not even the
// modules lists (the administrator may have meant [modules] enable =
// false), so rdmad changes nothing on the host until the files load.
func NothingDeclared(mainFile string) *Policy {
	return &Policy{
		Files: []string{}, MainFile: mainFile, DropInDir: DropInDirFor(mainFile),
		Modules: Modules{Enable: false, Directory: DefaultModulesDirectory},
	}
}

// dropIns lists dir/*.toml in lexical (byte) order, PersistedName last.
// Hidden files are skipped: they are editor and atomic-write temporaries.
func dropIns(r Reader, dir string) ([]string, error) {
	ents, err := r.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read drop-in directory %s: %w", dir, err)
	}
	var names []string
	persisted := false
	for _, n := range ents {
		if !strings.HasSuffix(n, ".toml") || strings.HasPrefix(n, ".") {
			continue
		}
		if n == PersistedName {
			persisted = true
			continue
		}
		names = append(names, n)
	}
	sort.Strings(names)
	if persisted {
		names = append(names, PersistedName)
	}
	for i, n := range names {
		names[i] = filepath.Join(dir, n)
	}
	return names, nil
}

// Parse validates one file's content on its own (defaults for everything it
// does not set), as Load would for a configuration made of that file only.
func Parse(name string, data []byte) (*Policy, error) {
	decl, err := parseFile(name, data)
	if err != nil {
		return nil, err
	}
	return merge([]*fileDecl{decl})
}

// merge applies the files in order: scalar keys one by one, arrays of tables
// appended, a later [[link]] replacing an earlier one of the same name.
func merge(decls []*fileDecl) (*Policy, error) {
	var (
		modEnable, memEnable, memServices setting[bool]
		modDir, memGroup, textfile        setting[string]
		memSoft, memHard                  setting[Limit]
		netnsMode                         setting[NetnsMode]
		memPresent                        bool
		checkUnits                        setting[[]string]
		memPos                            Position
	)
	p := &Policy{Files: []string{}}
	var netnsDecls []Position
	var netnsNote Note
	for _, d := range decls {
		p.Files = append(p.Files, d.file)
		modEnable.override(d.modules.enable)
		modDir.override(d.modules.directory)
		if d.memlock.present {
			memPresent, memPos = true, d.memlock.pos
		}
		memEnable.override(d.memlock.enable)
		memGroup.override(d.memlock.group)
		memSoft.override(d.memlock.soft)
		memHard.override(d.memlock.hard)
		memServices.override(d.memlock.services)
		checkUnits.override(d.memlock.checkUnits)
		netnsMode.override(d.netns.mode)
		if d.netns.mode.Set {
			netnsDecls = append(netnsDecls, d.netns.mode.Pos)
			netnsNote = d.netnsNote
		}
		textfile.override(d.metrics.textfile)
		p.RoCE = append(p.RoCE, d.roce...)
		p.VPI = append(p.VPI, d.vpi...)
		p.QoS = append(p.QoS, d.qos...)
		p.Expect = append(p.Expect, d.expect...)
		for _, l := range d.links {
			var old *Link
			if p.Links, old = replaceLink(p.Links, l); old != nil {
				p.ShadowedLinks = append(p.ShadowedLinks, ShadowedLink{Link: *old, By: l.Source})
			}
		}
	}
	p.Modules = Modules{Enable: modEnable.or(true), Directory: modDir.or(DefaultModulesDirectory)}
	p.Netns = Netns{Mode: netnsMode.Value, Source: netnsMode.Pos, Note: netnsNote}
	p.NetnsDeclarations = netnsDecls
	p.Metrics = Metrics{Textfile: textfile.Value}
	p.Doctor = mergeDoctor(decls)
	p.MemlockCheckUnits = UnitList{Names: checkUnits.Value, Source: checkUnits.Pos}
	p.API = mergeAPI(decls)
	p.Drift = mergeDrift(decls)

	var errs []error
	if memPresent && memEnable.or(true) {
		p.Memlock = &Memlock{
			Group:    memGroup.or(DefaultMemlockGroup),
			Soft:     memSoft.or(Limit{Unlimited: true}),
			Hard:     memHard.or(Limit{Unlimited: true}),
			Services: memServices.or(false),
			Source:   memPos,
		}
		if err := checkSoftHard(memSoft, memHard, p.Memlock); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, checkLinkNetdevs(p.Links)...)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return p, nil
}

// checkSoftHard reports a soft limit above the hard one once the files are
// merged, blaming the key that was set (soft when both were).
func checkSoftHard(soft, hard setting[Limit], m *Memlock) error {
	if !m.Soft.above(m.Hard) {
		return nil
	}
	where := func(s setting[Limit]) string {
		if !s.Set {
			return "the default"
		}
		return "set at " + s.Pos.String()
	}
	if soft.Set {
		return &Error{Pos: soft.Pos, Key: "memlock.soft",
			Msg: fmt.Sprintf("%s is above memlock.hard %s (%s); the soft limit cannot exceed the hard one", m.Soft.Human(), m.Hard.Human(), where(hard))}
	}
	return &Error{Pos: hard.Pos, Key: "memlock.hard",
		Msg: fmt.Sprintf("%s is below memlock.soft %s (%s); set soft as well", m.Hard.Human(), m.Soft.Human(), where(soft))}
}

// replaceLink adds l to links, in place of an earlier link of the same
// name, which it returns.
func replaceLink(links []Link, l Link) ([]Link, *Link) {
	for i, old := range links {
		if old.Name == l.Name {
			slog.Debug("config: link redeclared, later declaration wins",
				"link", l.Name, "earlier", old.Source.String(), "later", l.Source.String())
			return append(append(links[:i:i], links[i+1:]...), l), &old
		}
	}
	return append(links, l), nil
}

// checkLinkNetdevs refuses two links of one type on one netdev: the kernel
// would refuse the second (rxe and siw allow one device per netdev).
func checkLinkNetdevs(links []Link) []error {
	var errs []error
	for i, l := range links {
		for _, earlier := range links[:i] {
			if earlier.Type == l.Type && earlier.Netdev == l.Netdev {
				errs = append(errs, &Error{Pos: l.Source, Key: fmt.Sprintf("link %q", l.Name),
					Msg: fmt.Sprintf("netdev %s already has %s link %q (declared at %s); the kernel allows one %s device per netdev",
						l.Netdev, l.Type, earlier.Name, earlier.Source, l.Type)})
			}
		}
	}
	return errs
}

// LinkSource returns where the link called name is declared.
func (p *Policy) LinkSource(name string) (Position, bool) {
	for _, l := range p.Links {
		if l.Name == name {
			return l.Source, true
		}
	}
	return Position{}, false
}

// FromDBus reports whether a declaration was made over D-Bus: at runtime,
// or persisted in rdmad's drop-in.
func FromDBus(pos Position) bool { return pos.IsRuntime() || IsPersistedFile(pos) }

// IsPersistedFile reports whether a declaration comes from rdmad's own
// drop-in, the only file rdmad may rewrite.
func IsPersistedFile(pos Position) bool {
	return filepath.Base(pos.File) == PersistedName
}
