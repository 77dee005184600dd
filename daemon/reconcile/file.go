package reconcile

import (
	"fmt"
	"path"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host"
)

// ManagedFile is a file rdmad writes (the memlock limits.d file, a
// modprobe.d file): its setting's values are the file's content
// (host.FileSnapshot), rdmad's header marks it as rdmad's, and rdmad never
// writes over or removes a file without that header.
type ManagedFile struct {
	Setting Handle[host.FileSnapshot]
	Host    *host.Host
	Rel     string // relative to the root
	Header  string
}

// Keep writes the file as declared (data, which starts with the header)
// when its content differs, and reads it back. The file's directory is
// watched.
func (f ManagedFile) Keep(run Run, subject Subject, data []byte, src config.Position) (Action, Record) {
	act, rec := f.Setting.Converge(run, Converge[host.FileSnapshot]{
		Subject: subject, Want: host.FileSnapshot{Exists: true, Data: data}, Source: src,
		Watch: []string{path.Dir(f.Rel)},
		Read:  f.read,
		Write: func(want host.FileSnapshot) error {
			if _, err := f.Host.WriteManaged(f.Rel, f.Header, want.Data); err != nil {
				return fmt.Errorf("write /%s: %w", f.Rel, err)
			}
			return nil
		},
		Holds: func(have, want host.FileSnapshot) bool { return have.Equal(want) },
	})
	act.To = "/" + f.Rel // reports name the file; its record has the content
	return act, rec
}

func (f ManagedFile) read() (host.FileSnapshot, error) { return f.Host.Snapshot(f.Rel) }

// Drop removes rdmad's file once nothing declares it: what rdmad wrote
// goes with the declaration. A file without rdmad's header is left alone.
// It returns false when there was nothing to remove (or run is read-only:
// then the action is held).
func (f ManagedFile) Drop(run Run, subject Subject) (Action, bool) {
	act := Action{Subject: subject, Kind: f.Setting.Kind(), Setting: f.Setting.Setting(), To: "absent", Status: Changed}
	old, err := f.Host.Snapshot(f.Rel)
	if err == nil && !old.Exists {
		return act, false
	}
	if run != nil && run.ReadOnly() {
		act.From, act.Status, act.Err = old.String(), Held, ErrReadOnly
		return act, err == nil && old.Exists
	}
	removed := false
	if err == nil {
		removed, err = f.Host.RemoveManaged(f.Rel, f.Header)
	}
	if err == nil && !removed {
		return act, false
	}
	act.From, act.Old, act.New = old.String(), old, host.FileSnapshot{}
	if err != nil {
		act.Status, act.Err = Failed, fmt.Errorf("remove /%s: %w", f.Rel, err)
	}
	return act, true
}

// Undo puts the file back as a Changed action of its setting found it.
func (f ManagedFile) Undo(a Action) error {
	snap, ok := f.Setting.Old(a)
	if !ok {
		return fmt.Errorf("/%s before the change is not known", f.Rel)
	}
	if err := f.Host.Restore(f.Rel, f.Header, snap); err != nil {
		return fmt.Errorf("put back /%s: %w", f.Rel, err)
	}
	return nil
}
