package reconcile

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host"
)

// Removing a declaration undoes it. Before its first change to a setting
// on a boot, rdmad records the value the kernel held (the Old of the
// first action that changed it) in found.json, keyed by the subject's
// stable identity (node GUID or PCI address plus port for a port; the
// link's or netdev's name; the host) and tagged with the boot id. When the
// setting is no longer declared, the part that keeps it puts the recorded
// value back with its typed undo, so the host looks as a boot without the
// rule would leave it. What cannot be put back (the part's undo fails: a
// netns switch while other namespaces exist, a soft link in use) is
// reported (State.Unrestored: doctor's undo-partial), not retried. Entries
// of another boot are dropped: a reboot already gave the kernel's values.

// FoundFile is where rdmad keeps what it found, relative to the root (the
// unit's StateDirectory).
const FoundFile = "var/lib/rdmad/found.json"

// BootIDFile names the boot found.json's entries belong to.
const BootIDFile = "proc/sys/kernel/random/boot_id"

// FoundHeader starts found.json; rdmad never writes over a file without it.
const FoundHeader = "# rdmad: the value of each setting before rdmad first changed it this boot, put back when no file declares it any more. Written by rdmad; do not edit.\n"

// Bounds of found.json: the entries it keeps and the bytes it is read with.
const (
	MaxFoundEntries = 1 << 16
	maxFoundSize    = 64 << 20
)

// FoundEntry is one value rdmad found, or one it could not put back.
type FoundEntry struct {
	// Subject is the subject as named when it was found; for a device or
	// a port, Device is its stable identity ("guid 0002:c903:00f1:0001",
	// "pci 0000:3b:00.0"), and the subject's name is looked up again.
	Subject Subject `json:"subject"`
	Device  string  `json:"device,omitempty"`
	Setting string  `json:"setting"`
	// Value is the value in its part's type, as JSON; Text as shown.
	Value json.RawMessage `json:"value"`
	Text  string          `json:"text"`
	Found time.Time       `json:"found"`
	// Error is why it could not be put back (unrestored entries only).
	Error string `json:"error,omitempty"`
}

func (e *FoundEntry) key() string {
	s := e.Subject
	return strings.Join([]string{strconv.Itoa(int(s.Kind)), e.Device, strconv.Itoa(s.Port), s.Link, s.Netdev, e.Setting}, "\x00")
}

// foundFile is found.json after its header.
type foundFile struct {
	BootID     string        `json:"boot_id"`
	Found      []*FoundEntry `json:"found"`
	Unrestored []*FoundEntry `json:"unrestored,omitempty"`
}

// Found is what rdmad found this boot (found.json), loaded at start and
// saved after each pass that changed it.
type Found struct {
	host *host.Host
	log  *slog.Logger

	mu         sync.Mutex
	boot       string
	entries    map[string]*FoundEntry
	unrestored map[string]*FoundEntry
	// gone is when each device identity the entries name was first seen
	// gone (FoundGoneAfter); one seen again is deleted.
	gone  map[string]time.Time
	dirty bool
	full  bool // MaxFoundEntries reached (logged once)
	// refused: found.json was there at start without rdmad's header, so
	// its entries were not loaded; each save looks again (the header put
	// back: they are merged; the file gone: a new one is written).
	refused bool
	// problem is why found.json cannot be kept (refused, or the last save
	// failed): State.FoundError, doctor's undo-partial; logged once per
	// distinct error.
	problem error
}

// errFoundNotRdmads is why a found.json without rdmad's header is neither
// used nor replaced.
var errFoundNotRdmads = errors.New("was not written by rdmad (no header): rdmad neither puts back what it holds nor writes over it")

// OpenFound loads found.json below h's root. The file is trusted as the
// last good configuration is (root's, not writable by group or others, no
// symlink, bounded); one that is not, or that does not parse, is logged and
// treated as empty (the next save replaces it); one of another boot is
// dropped. One without rdmad's header is not rdmad's: refused (not used,
// not written over) until it has the header again or is gone.
func OpenFound(h *host.Host, log *slog.Logger) *Found {
	f := &Found{host: h, log: log, entries: map[string]*FoundEntry{}, unrestored: map[string]*FoundEntry{}, gone: map[string]time.Time{}}
	if id, err := h.ReadString(BootIDFile); err == nil {
		f.boot = strings.TrimSpace(id)
	}
	if f.boot == "" {
		// Without the boot's id an entry cannot be told from one of
		// another boot: record nothing, put nothing back.
		log.Warn("the boot id cannot be read: rdmad records nothing it finds, and a removed declaration will leave what rdmad set", "file", h.Path(BootIDFile))
		return f
	}
	ff, err := f.read()
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return f
	case errors.Is(err, errFoundNotRdmads):
		f.refused = true
		f.setProblem(err)
		return f
	case err != nil:
		log.Warn("the values found before rdmad changed them cannot be used: a removed declaration will leave what rdmad set", "file", h.Path(FoundFile), "err", err)
		return f
	case ff.BootID != f.boot:
		log.Info("dropped the values found on another boot", "file", h.Path(FoundFile), "entries", len(ff.Found))
		f.dirty = true
		return f
	}
	f.merge(ff)
	return f
}

// read reads and parses found.json.
func (f *Found) read() (*foundFile, error) {
	b, err := f.host.ReadTrustedFileLimit(FoundFile, maxFoundSize)
	if err != nil {
		return nil, err
	}
	name := f.host.Path(FoundFile)
	if !bytes.HasPrefix(b, []byte(FoundHeader)) {
		return nil, fmt.Errorf("%s %w", name, errFoundNotRdmads)
	}
	var ff foundFile
	if err := json.Unmarshal(b[len(FoundHeader):], &ff); err != nil {
		return nil, fmt.Errorf("%s does not parse: %w", name, err)
	}
	return &ff, nil
}

// merge takes the entries of ff into f, over what f holds for the same
// key (under f.mu, or before f is shared): an entry read from the file
// was found first. The bound only keeps new keys out.
func (f *Found) merge(ff *foundFile) {
	for _, e := range ff.Found {
		if e == nil {
			continue
		}
		if _, have := f.entries[e.key()]; have || len(f.entries) < MaxFoundEntries {
			f.entries[e.key()] = e
		}
	}
	for _, e := range ff.Unrestored {
		if e == nil {
			continue
		}
		if _, have := f.unrestored[e.key()]; have || len(f.unrestored) < MaxFoundEntries {
			f.unrestored[e.key()] = e
		}
	}
}

// Problem is why found.json cannot be kept (nil when nothing stands in
// the way): a removed declaration then puts back only what this rdmad
// found since it started.
func (f *Found) Problem() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.problem
}

// setProblem records how keeping found.json stands (under f.mu, or before
// f is shared): a new error is logged at error priority once (it is tried
// again after every pass: the journal would fill), its end at info.
func (f *Found) setProblem(err error) {
	old := f.problem
	f.problem = err
	switch {
	case err != nil && (old == nil || old.Error() != err.Error()):
		f.log.Error("the values found before rdmad changed them cannot be kept: a removed declaration puts back only what this rdmad found since it started; retried after every pass",
			"file", f.host.Path(FoundFile), "err", err)
	case err == nil && old != nil:
		f.log.Info("the values found before rdmad changed them are kept again", "file", f.host.Path(FoundFile))
	}
}

// Entries lists the values found, by subject and setting.
func (f *Found) Entries() []FoundEntry {
	f.mu.Lock()
	defer f.mu.Unlock()
	return sortedEntries(f.entries)
}

// Unrestored lists what could not be put back when its declaration went.
func (f *Found) Unrestored() []FoundEntry {
	f.mu.Lock()
	defer f.mu.Unlock()
	return sortedEntries(f.unrestored)
}

func sortedEntries(m map[string]*FoundEntry) []FoundEntry {
	keys := slices.Sorted(maps.Keys(m))
	out := make([]FoundEntry, len(keys))
	for i, k := range keys {
		out[i] = *m[k]
	}
	return out
}

// save writes found.json when it changed (atomically, rdmad's header
// first), or when it could not be kept (refused at start, or the last save
// failed). A failure is logged once; the next pass tries again. Passes
// save one at a time; f.mu is not held while the file is read or written.
func (f *Found) save() {
	f.mu.Lock()
	if !f.dirty && f.problem == nil {
		f.mu.Unlock()
		return
	}
	refused := f.refused
	f.mu.Unlock()
	if refused {
		ff, err := f.read()
		f.mu.Lock()
		if errors.Is(err, errFoundNotRdmads) {
			f.setProblem(err) // still not rdmad's: left as it is
			f.mu.Unlock()
			return
		}
		if err == nil && ff.BootID == f.boot {
			f.merge(ff) // the header is back: its values were found first
		}
		f.refused, f.dirty = false, true
		f.mu.Unlock()
	}
	f.mu.Lock()
	ff := foundFile{BootID: f.boot, Found: []*FoundEntry{}}
	for _, k := range slices.Sorted(maps.Keys(f.entries)) {
		ff.Found = append(ff.Found, f.entries[k])
	}
	for _, k := range slices.Sorted(maps.Keys(f.unrestored)) {
		ff.Unrestored = append(ff.Unrestored, f.unrestored[k])
	}
	f.dirty = false
	f.mu.Unlock()
	b, err := json.MarshalIndent(ff, "", " ")
	if err == nil {
		_, err = f.host.WriteManaged(FoundFile, FoundHeader, append(append([]byte(FoundHeader), b...), '\n'))
	}
	if errors.Is(err, host.ErrNotManaged) {
		err = fmt.Errorf("%s %w", f.host.Path(FoundFile), errFoundNotRdmads)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err != nil {
		f.dirty = true
		// A file without the header took its place: looked at again,
		// and merged if the header comes back, as one found at start.
		f.refused = errors.Is(err, errFoundNotRdmads)
	}
	f.setProblem(err)
}

// DeviceIdentity is a device's stable identity in found.json: its node
// GUID, else its PCI address, else (a device with neither) its name.
func DeviceIdentity(d *host.Device) string {
	if g := d.NodeGUID; g != "" && strings.Trim(g, "0:") != "" {
		return "guid " + g
	}
	if d.PCIAddress != "" {
		return "pci " + d.PCIAddress
	}
	return "name " + d.Name
}

// foundScope is what a pass knows of the devices it judged.
type foundScope struct {
	byName map[string]string // device name -> identity (devices read this pass)
	byID   map[string]string // identity -> device name
}

// keepFound records the values the pass's actions changed that were not
// recorded yet this boot, and puts back the recorded value of every
// setting of a subject the pass judged that is no longer declared. It runs
// at the end of a pass that may write, before the state is stored; the
// restores are actions of the pass.
func (r *Reconciler) keepFound(ctx context.Context, pol *config.Policy, res *passResult) {
	f := r.found
	if f.boot == "" {
		return // OpenFound said why
	}
	sc := foundScope{byName: map[string]string{}, byID: map[string]string{}}
	for n, d := range res.working {
		id := DeviceIdentity(d)
		sc.byName[n], sc.byID[id] = id, n
	}
	now := time.Now().UTC().Truncate(time.Second)
	r.dropGone(res, &sc)

	// What this pass changed for the first time this boot.
	note := func(a Action) {
		if (a.Status != Changed && a.Status != Failed) || a.Setting == nil || a.Old == nil || a.restore {
			return
		}
		e := &FoundEntry{Subject: a.Subject, Setting: a.Setting.Name, Text: a.Old.String(), Found: now}
		if a.Subject.Kind == SubjectPort || a.Subject.Kind == SubjectDevice {
			id, ok := sc.byName[a.Subject.Device]
			if !ok {
				if id, ok = res.unregistered[a.Subject.Device]; !ok {
					return
				}
			}
			e.Device = id
		}
		raw, err := json.Marshal(a.Old)
		if err != nil {
			return
		}
		e.Value = raw
		f.mu.Lock()
		defer f.mu.Unlock()
		k := e.key()
		if _, ok := f.entries[k]; ok {
			return
		}
		if len(f.entries) >= MaxFoundEntries && !f.evictGone() {
			if !f.full {
				f.full = true
				r.log.Warn("too many values found to record: the next ones will not be put back when their declaration goes", "max", MaxFoundEntries)
			}
			return
		}
		f.entries[k] = e
		f.dirty = true
	}
	for _, a := range res.hostActs {
		note(a)
	}
	for _, acts := range res.acts {
		for _, a := range acts {
			note(a)
		}
	}

	if pol.DeclaresNothing() {
		return // the files do not load: rdmad changes nothing, undoes nothing
	}
	declared := map[string]bool{}
	mark := func(rec Record) {
		if !rec.IsDeclared() || rec.Setting == nil {
			return
		}
		e := FoundEntry{Subject: rec.Subject, Setting: rec.Setting.Name}
		if rec.Subject.Kind == SubjectPort || rec.Subject.Kind == SubjectDevice {
			e.Device = sc.byName[rec.Subject.Device]
		}
		declared[e.key()] = true
	}
	for _, rec := range res.hostRecs {
		mark(rec)
	}
	for _, recs := range res.recs {
		for _, rec := range recs {
			mark(rec)
		}
	}

	f.mu.Lock()
	var undo []*FoundEntry
	for k, e := range f.entries {
		switch {
		case declared[k]:
			continue
		case e.Device != "":
			name, judged := sc.byID[e.Device]
			if !judged {
				continue // the device was not read in this pass (or is gone)
			}
			if s := e.Subject; s.Kind == SubjectPort {
				if s.Device = name; r.heldNamed(s, e.Setting) {
					continue // put back after the hold
				}
			}
		case e.Subject.Kind == SubjectHost:
			// A host-wide file's records may be on the ports it affects:
			// the policy says whether anything still declares it.
			if st := r.settingNamed(e.Setting); st == nil || pol.Declares(st.Key) {
				continue
			}
		}
		undo = append(undo, e)
	}
	for k := range f.unrestored {
		if declared[k] {
			delete(f.unrestored, k) // declared again: nothing to report
			f.dirty = true
		}
	}
	f.mu.Unlock()
	slices.SortFunc(undo, func(a, b *FoundEntry) int { return strings.Compare(a.key(), b.key()) })

	for _, e := range undo {
		if ctx.Err() != nil {
			return
		}
		r.restore(ctx, res, &sc, e)
	}
}

// restore puts back one value found, through its setting's part.
func (r *Reconciler) restore(ctx context.Context, res *passResult, sc *foundScope, e *FoundEntry) {
	f := r.found
	s := e.Subject
	if e.Device != "" {
		s.Device = sc.byID[e.Device]
	}
	forget := func() {
		f.mu.Lock()
		delete(f.entries, e.key())
		f.dirty = true
		f.mu.Unlock()
	}
	st := r.settingNamed(e.Setting)
	if st == nil || st.decode == nil {
		forget() // a setting this rdmad does not keep
		return
	}
	v, err := st.decode(e.Value)
	if err == nil && st.Valid != nil {
		err = st.Valid(v)
	}
	if err != nil {
		// Not a value of the setting, or not one a configuration could
		// declare: never written. Reported (doctor's undo-partial) like
		// a value that could not be put back.
		forget()
		err = fmt.Errorf("%s holds a value for it that no configuration could declare, so rdmad does not put it back: %w", f.host.Path(FoundFile), err)
		r.log.Warn("a value found.json holds is not put back", "subject", s.String(), "setting", st.Name, "err", err)
		u := *e
		u.Subject, u.Error = s, err.Error()
		f.mu.Lock()
		f.unrestored[u.key()] = &u
		f.dirty = true
		f.mu.Unlock()
		return
	}
	a := Action{Subject: s, Kind: st.Kind, Setting: st, To: v.String(), New: v, Old: v, Status: Changed,
		Source: "no longer declared: the value found before rdmad changed it", restore: true}
	var observed Value
	if rec, ok := findRecord(res, s, st); ok && rec.Observed != nil {
		observed = rec.Observed
		a.From = rec.Observed.String()
		if a.From == e.Text {
			forget() // the kernel holds it already
			return
		}
	}
	p, ok := r.owners[st.Kind]
	if !ok {
		err = fmt.Errorf("no part keeps %s", st.Name)
	} else {
		err = p.Undo(ctx, a)
	}
	forget()
	if err != nil {
		a.Status, a.Err = Failed, fmt.Errorf("put back %s %s found before rdmad changed it: %w", st.Title, v, err)
		u := *e
		u.Subject, u.Error = s, a.Err.Error()
		f.mu.Lock()
		f.unrestored[u.key()] = &u
		f.mu.Unlock()
	} else {
		observed = v
	}
	if observed != nil {
		setObserved(res, s, st, observed)
	}
	if s.Kind == SubjectPort || s.Kind == SubjectDevice {
		res.acts[s.Device] = append(res.acts[s.Device], a)
	} else {
		res.hostActs = append(res.hostActs, a)
	}
}

// settingNamed is the setting of that name some part keeps.
func (r *Reconciler) settingNamed(name string) *Setting {
	for _, st := range r.Settings() {
		if st.Name == name {
			return st
		}
	}
	return nil
}

func findRecord(res *passResult, s Subject, st *Setting) (Record, bool) {
	for _, recs := range [][]Record{res.recs[s.Device], res.hostRecs} {
		for _, rec := range recs {
			if rec.Subject == s && rec.Setting == st {
				return rec, true
			}
		}
	}
	return Record{}, false
}

func setObserved(res *passResult, s Subject, st *Setting, v Value) {
	for _, recs := range [][]Record{res.recs[s.Device], res.hostRecs} {
		for i := range recs {
			if recs[i].Subject == s && recs[i].Setting == st {
				recs[i].Observed = v
			}
		}
	}
}
