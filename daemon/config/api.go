package config

import "fmt"

// APIChanges is what the [api] table lets D-Bus clients (rdmactl, Cockpit)
// declare. It is a guard-rail against changes that would beat the site's
// files, not a security boundary: root can edit the files, and polkit stays
// the access control for everyone else.
type APIChanges string

const (
	// APIChangesAll allows runtime and persisted declarations (the
	// default).
	APIChangesAll APIChanges = "all"
	// APIChangesRuntime allows declarations until rdmad stops, never in
	// rdmad's drop-in: what survives a restart is what the files say.
	APIChangesRuntime APIChanges = "runtime"
	// APIChangesNone allows no declaration over D-Bus: the files alone
	// declare the policy.
	APIChangesNone APIChanges = "none"
)

// API is the [api] table.
type API struct {
	// Changes is what D-Bus clients may declare; APIChangesAll when no
	// file says.
	Changes APIChanges
	// Source is where Changes was set (the file that wins); zero when no
	// file sets it.
	Source Position
	// Tables is every [api] table of the files in force, in the order they
	// load: more than one is a doctor warning, since only the last file's
	// changes holds and the others read as if they did.
	Tables []Position
}

// Allows returns nil when a declaration over D-Bus, persisted or not, is
// allowed, else a *NotAllowedError naming the file and line that forbids
// it. Withdrawing a declaration, reloading and reconciling are always
// allowed: they hand the host back to the files.
func (a API) Allows(persist bool) error {
	switch {
	case a.Changes == APIChangesNone, a.Changes == APIChangesRuntime && persist:
		return &NotAllowedError{Changes: a.Changes, Source: a.Source, Persist: persist}
	}
	return nil
}

// Declaring is the fix that declares something: cmd, an rdmactl command
// (persist: it has --persist), when [api] changes lets D-Bus clients make
// it, else inFile, the same declaration made in a configuration file. A
// host whose [api] refuses the command must not be told to run it.
func (a API) Declaring(cmd string, persist bool, inFile string) string {
	if a.Allows(persist) == nil {
		return cmd
	}
	return inFile + " (" + a.Refusal() + ")"
}

// Refusal says which file's [api] changes keeps a fix from proposing an
// rdmactl command, for a fix that leaves the command out.
func (a API) Refusal() string {
	if a.Changes == APIChangesRuntime {
		return fmt.Sprintf(`%s: [api] changes = "runtime" persists no change made over D-Bus`, a.Source)
	}
	return fmt.Sprintf(`%s: [api] changes = "none" takes no declaration over D-Bus`, a.Source)
}

// NotAllowedError is a declaration over D-Bus that [api] changes refuses.
type NotAllowedError struct {
	Changes APIChanges
	Source  Position // where changes is set
	Persist bool     // the refused call asked to persist
}

func (e *NotAllowedError) Error() string {
	if e.Changes == APIChangesRuntime {
		return fmt.Sprintf(`%s: [api] changes = "runtime": changes over D-Bus are not persisted on this host; make the change without persist, or declare it in a configuration file`, e.Source)
	}
	return fmt.Sprintf(`%s: [api] changes = "none": this host takes no declarations over D-Bus; declare it in a configuration file and reload`, e.Source)
}

// api decodes the [api] table of one file.
func (d *decoder) api(decl *fileDecl, path string, v any) {
	decl.api.table = d.pos(path)
	if m, ok := d.singleTable(path, v); ok {
		d.table(path, m, "[api]", []field{
			stringSetting(d, "changes", oneOf(`an [api] changes value: use "all", "runtime" or "none"`,
				string(APIChangesAll), string(APIChangesRuntime), string(APIChangesNone)), &decl.api.changes),
		})
	}
}

// apiDecl is what one file's [api] table says.
type apiDecl struct {
	table   Position // zero when the file has no [api]
	changes setting[APIChanges]
}

// mergeAPI merges the [api] tables of the files in load order: a later
// file's changes wins.
func mergeAPI(decls []*fileDecl) API {
	var changes setting[APIChanges]
	a := API{}
	for _, d := range decls {
		if d.api.table.File != "" {
			a.Tables = append(a.Tables, d.api.table)
		}
		changes.override(d.api.changes)
	}
	a.Changes, a.Source = changes.or(APIChangesAll), changes.Pos
	return a
}
