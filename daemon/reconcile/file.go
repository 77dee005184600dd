package reconcile

import (
	"bytes"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"

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
func (f ManagedFile) Keep(guard WriteGuard, subject Subject, data []byte, src config.Position) (Action, Record) {
	act, rec := f.Setting.Converge(guard, Target[host.FileSnapshot]{
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
// It returns false when there was nothing to remove (or guard is read-only:
// then the action is held).
func (f ManagedFile) Drop(guard WriteGuard, subject Subject) (Action, bool) {
	act := Action{Subject: subject, Kind: f.Setting.Kind(), Setting: f.Setting.Setting(), To: "absent", Status: Changed}
	old, err := f.Host.Snapshot(f.Rel)
	if err == nil && !old.Exists {
		return act, false
	}
	if guard != nil && guard.ReadOnly() {
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

// CheckRendered is the Valid rule of a file rdmad writes: a snapshot is
// absent (the file is removed), or starts with header and its lines that
// are not comments are exactly what render gives for the values it
// parses from those lines, checked as a configuration's (render returns
// an error for a line it does not know or a value no configuration could
// hold). Comment lines are inert to every reader of these files (pam_limits,
// systemd, modprobe); any other line, an "install" command in modprobe.d
// or "* hard memlock unlimited" in limits.d, is refused.
func CheckRendered(header string, render func(lines []string) ([]byte, error)) func(Value) error {
	return ValueRule(func(s host.FileSnapshot) error {
		if !s.Exists {
			return nil
		}
		if !bytes.HasPrefix(s.Data, []byte(header)) {
			return errors.New("the file does not start with rdmad's header")
		}
		lines := SettingLines(s.Data)
		want, err := render(lines)
		if err != nil {
			return err
		}
		if w := SettingLines(want); !slices.Equal(lines, w) {
			return fmt.Errorf("its lines %q are not what rdmad writes for them (%q)", lines, w)
		}
		return nil
	})
}

// SettingLines are the lines of a file rdmad writes that are not comments
// or empty.
func SettingLines(data []byte) []string {
	var out []string
	for _, l := range strings.Split(string(data), "\n") {
		if l != "" && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return out
}
