package config

import (
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
)

// Error is one problem in one configuration file. Its text is
// "file:line: key: problem", the form compilers and systemd use, so editors
// and operators can jump to it.
type Error struct {
	Pos Position
	Key string // "roce[1].tos" (indices count from 0 in each file); "" for syntax errors
	Msg string
}

func (e *Error) Error() string {
	if e.Key == "" {
		return e.Pos.String() + ": " + e.Msg
	}
	return e.Pos.String() + ": " + e.Key + ": " + e.Msg
}

// setting is one scalar key of a table, remembered with where it was set so
// that merging is key by key and conflicts can name both places.
type setting[T any] struct {
	Value T
	Pos   Position
	Set   bool
}

func (s *setting[T]) override(o setting[T]) {
	if o.Set {
		*s = o
	}
}

func (s setting[T]) or(def T) T {
	if s.Set {
		return s.Value
	}
	return def
}

// fileDecl is what one file declares, before merging.
type fileDecl struct {
	file    string
	modules struct {
		enable    setting[bool]
		directory setting[string]
	}
	memlock struct {
		present  bool     // [memlock] appears, even empty
		pos      Position // where
		enable   setting[bool]
		group    setting[string]
		soft     setting[Limit]
		hard     setting[Limit]
		services setting[bool]
		// checkUnits is check_units, which alone does not make rdmad
		// manage memlock (present stays false for it).
		checkUnits setting[[]string]
	}
	netns struct {
		mode setting[NetnsMode]
	}
	// netnsNote is who set [netns] in rdmad's drop-in (note.go).
	netnsNote Note
	metrics   struct {
		textfile setting[string]
	}
	api   apiDecl
	drift driftDecl
	roce  []RoCERule
	links []Link
	vpi   []VPIRule
	qos   []QoSRule
	// expect and doctor: health.go.
	expect []ExpectRule
	doctor doctorDecl
	// tables names the top-level keys present, for LoadPersisted's check.
	tables []string
}

type decoder struct {
	file  string
	lines lineIndex
	errs  []error
}

// parseFile decodes one file strictly. Every problem found is returned,
// joined, in file order.
//
// Every file reaches the TOML parser through here, whatever it came from
// (the files, the last good snapshot, rdmad's drop-in, bytes a caller
// hands over), and checkNesting runs first.
func parseFile(name string, data []byte) (*fileDecl, error) {
	if err := checkNesting(name, data); err != nil {
		return nil, err
	}
	var raw map[string]any
	if _, err := toml.NewDecoder(strings.NewReader(string(data))).Decode(&raw); err != nil {
		return nil, syntaxError(name, err)
	}
	d := &decoder{file: name, lines: indexLines(string(data))}
	decl := &fileDecl{file: name}
	d.root(decl, raw)
	if len(d.errs) > 0 {
		sort.SliceStable(d.errs, func(i, j int) bool {
			return d.errs[i].(*Error).Pos.Line < d.errs[j].(*Error).Pos.Line
		})
		return nil, errors.Join(firstErrors(name, d.errs)...)
	}
	if filepath.Base(name) == PersistedName {
		readNotes(decl, data)
	}
	return decl, nil
}

// maxErrorsPerFile bounds the problems reported for one file: the error is
// carried by ConfigError, Describe, STATUS= and every log line that quotes
// it (docs/decisions/config.md); the first ones say what is wrong, and
// fixing them shows the next.
const maxErrorsPerFile = 50

// firstErrors keeps the first maxErrorsPerFile problems of a file (in file
// order) and says how many more there are.
func firstErrors(name string, errs []error) []error {
	if len(errs) <= maxErrorsPerFile {
		return errs
	}
	next := errs[maxErrorsPerFile].(*Error).Pos
	return append(errs[:maxErrorsPerFile:maxErrorsPerFile], &Error{Pos: Position{File: name, Line: next.Line},
		Msg: fmt.Sprintf("and %d more problems from here on (only the first %d of a file are listed)", len(errs)-maxErrorsPerFile, maxErrorsPerFile)})
}

func syntaxError(name string, err error) error {
	var pe toml.ParseError
	if errors.As(err, &pe) {
		msg := pe.Message
		if pe.LastKey != "" {
			msg = fmt.Sprintf("%s (after key %q)", msg, pe.LastKey)
		}
		return &Error{Pos: Position{File: name, Line: pe.Position.Line}, Msg: "TOML syntax error: " + msg}
	}
	return &Error{Pos: Position{File: name}, Msg: "TOML syntax error: " + err.Error()}
}

func (d *decoder) pos(path string) Position {
	return Position{File: d.file, Line: d.lines.lookup(path)}
}

func (d *decoder) failf(path, format string, args ...any) {
	d.errs = append(d.errs, &Error{Pos: d.pos(path), Key: path, Msg: fmt.Sprintf(format, args...)})
}

// field decodes one key of a table.
type field struct {
	name   string
	decode func(path string, v any)
}

// table decodes the keys of m through fields, in file order, and reports
// every key it does not know.
func (d *decoder) table(path string, m map[string]any, what string, fields []field) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		li, lj := d.lines.lookup(joinPath(path, keys[i])), d.lines.lookup(joinPath(path, keys[j]))
		if li != lj {
			return li < lj
		}
		return keys[i] < keys[j]
	})
	for _, k := range keys {
		p := joinPath(path, k)
		found := false
		for _, f := range fields {
			if f.name == k {
				f.decode(p, m[k])
				found = true
				break
			}
		}
		if !found {
			d.unknown(p, k, what, fields)
		}
	}
}

func (d *decoder) unknown(path, key, what string, fields []field) {
	names := make([]string, len(fields))
	for i, f := range fields {
		names[i] = f.name
		if path == key { // top level: show how each is written
			names[i] = "[" + f.name + "]"
			if f.name == "roce" || f.name == "link" || f.name == "vpi" || f.name == "qos" || f.name == "expect" {
				names[i] = "[[" + f.name + "]]"
			}
		}
		if strings.EqualFold(f.name, key) {
			d.failf(path, "unknown key; did you mean %s? (keys are case-sensitive)", f.name)
			return
		}
	}
	d.failf(path, "unknown key; %s accepts %s", what, strings.Join(names, ", "))
}

func describe(v any) string {
	switch v := v.(type) {
	case string:
		return fmt.Sprintf("a string (%q)", v)
	case int64:
		return fmt.Sprintf("an integer (%d)", v)
	case float64:
		return fmt.Sprintf("a float (%v)", v)
	case bool:
		return fmt.Sprintf("a boolean (%v)", v)
	case time.Time:
		return "a date-time"
	case map[string]any:
		return "a table"
	case []map[string]any:
		return "an array of tables"
	case []any:
		return "an array"
	}
	return fmt.Sprintf("%T", v)
}

func (d *decoder) str(path string, v any) (string, bool) {
	s, ok := v.(string)
	if !ok {
		d.failf(path, "must be a string, not %s", describe(v))
	}
	return s, ok
}

func (d *decoder) boolean(path string, v any) (bool, bool) {
	b, ok := v.(bool)
	if !ok {
		hint := ""
		if s, isStr := v.(string); isStr && (s == "true" || s == "false") {
			hint = fmt.Sprintf(": write %s without quotes", s)
		}
		d.failf(path, "must be true or false, not %s%s", describe(v), hint)
	}
	return b, ok
}

func (d *decoder) integer(path string, v any, lo, hi int64) (int, bool) {
	n, ok := v.(int64)
	if !ok {
		d.failf(path, "must be an integer, not %s", describe(v))
		return 0, false
	}
	if n < lo || n > hi {
		d.failf(path, "%d is out of range %d..%d", n, lo, hi)
		return 0, false
	}
	return int(n), true
}

func (d *decoder) root(decl *fileDecl, raw map[string]any) {
	d.table("", raw, "the top level", []field{
		{"modules", func(p string, v any) { d.modules(decl, p, v) }},
		{"memlock", func(p string, v any) { d.memlock(decl, p, v) }},
		{"netns", func(p string, v any) { d.netns(decl, p, v) }},
		{"metrics", func(p string, v any) { d.metrics(decl, p, v) }},
		{"api", func(p string, v any) { d.api(decl, p, v) }},
		{"drift", func(p string, v any) { d.drift(decl, p, v) }},
		{"roce", func(p string, v any) {
			for _, e := range d.arrayOfTables(p, v) {
				if r, ok := d.roce(e.path, e.m); ok {
					decl.roce = append(decl.roce, r)
				}
			}
		}},
		{"link", func(p string, v any) {
			for _, e := range d.arrayOfTables(p, v) {
				if l, ok := d.link(e.path, e.m); ok {
					decl.links = append(decl.links, l)
				}
			}
		}},
		{"vpi", func(p string, v any) {
			for _, e := range d.arrayOfTables(p, v) {
				if r, ok := d.vpi(e.path, e.m); ok {
					decl.vpi = append(decl.vpi, r)
				}
			}
		}},
		{"qos", func(p string, v any) {
			for _, e := range d.arrayOfTables(p, v) {
				if r, ok := d.qos(e.path, e.m); ok {
					decl.qos = append(decl.qos, r)
				}
			}
		}},
		{"expect", func(p string, v any) {
			for _, e := range d.arrayOfTables(p, v) {
				if r, ok := d.expect(e.path, e.m); ok {
					decl.expect = append(decl.expect, r)
				}
			}
		}},
		{"doctor", func(p string, v any) { d.doctor(decl, p, v) }},
	})
	for k := range raw {
		decl.tables = append(decl.tables, k)
	}
	sort.Strings(decl.tables)
}

// singleTable checks that v is a [table] (not [[table]] or a scalar).
func (d *decoder) singleTable(path string, v any) (map[string]any, bool) {
	switch m := v.(type) {
	case map[string]any:
		return m, true
	case []map[string]any:
		d.failf(path, "must be a single table: write [%s], not [[%s]]", path, path)
	default:
		d.failf(path, "must be a table: write [%s] on its own line, then its keys", path)
	}
	return nil, false
}

type indexedTable struct {
	path string
	m    map[string]any
}

// arrayOfTables accepts [[x]] tables and inline arrays of inline tables.
func (d *decoder) arrayOfTables(path string, v any) []indexedTable {
	var out []indexedTable
	switch a := v.(type) {
	case []map[string]any:
		for i, m := range a {
			out = append(out, indexedTable{indexPath(path, i), m})
		}
	case []any:
		for i, e := range a {
			p := indexPath(path, i)
			if m, ok := e.(map[string]any); ok {
				out = append(out, indexedTable{p, m})
			} else {
				d.failf(p, "must be a table, not %s", describe(e))
			}
		}
	case map[string]any:
		d.failf(path, "must be an array of tables: write [[%s]], not [%s]", path, path)
	default:
		d.failf(path, "must be an array of tables: write [[%s]] on its own line, then its keys", path)
	}
	return out
}
