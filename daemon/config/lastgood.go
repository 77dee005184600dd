package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"
	"time"
)

// LastGoodFile is where rdmad keeps the last configuration that loaded,
// relative to the host root: its state directory (StateDirectory=rdmad).
const LastGoodFile = "var/lib/rdmad/last-good-config.json"

// LastGoodHeader starts the last good configuration file: the mark of a
// file rdmad wrote (it never replaces a file without it).
const LastGoodHeader = "# rdmad: the last configuration that loaded, applied at start when the files do not load. Written by rdmad; do not edit.\n"

// Snapshot is a configuration that loaded completely: the bytes of each of
// its files under the name it was read from. Loading a snapshot parses the
// same bytes under the same names again, so every file:line it reports is
// the one the administrator's file had when it was saved.
type Snapshot struct {
	MainFile string         `json:"main_file"`
	Saved    time.Time      `json:"saved"`
	Files    []SnapshotFile `json:"files"` // in the order they were merged
}

// SnapshotFile is one file of a Snapshot.
type SnapshotFile struct {
	Name string `json:"name"`
	Data []byte `json:"data"`
}

// LoadSnapshot is Load that also returns the bytes it parsed, for
// SaveLastGood. The snapshot is nil when the configuration does not load.
func LoadSnapshot(r Reader, mainFile string) (*Policy, *Snapshot, error) {
	rec := &recordingReader{Reader: r, read: map[string][]byte{}}
	p, err := Load(rec, mainFile)
	if err != nil {
		return nil, nil, err
	}
	s := &Snapshot{MainFile: mainFile, Files: make([]SnapshotFile, 0, len(p.Files))}
	for _, name := range p.Files {
		s.Files = append(s.Files, SnapshotFile{Name: name, Data: rec.read[name]})
	}
	return p, s, nil
}

type recordingReader struct {
	Reader
	read map[string][]byte
}

func (r *recordingReader) ReadFile(name string) ([]byte, error) {
	b, err := r.Reader.ReadFile(name)
	if err == nil {
		r.read[name] = b
	}
	return b, err
}

// Load parses the snapshot's files again, as Load parsed them when they
// were saved.
func (s *Snapshot) Load() (*Policy, error) {
	return Load(snapshotReader{s}, s.MainFile)
}

// Same reports whether two snapshots hold the same files (names and bytes).
func (s *Snapshot) Same(o *Snapshot) bool {
	if s == nil || o == nil || s.MainFile != o.MainFile || len(s.Files) != len(o.Files) {
		return false
	}
	for i := range s.Files {
		if s.Files[i].Name != o.Files[i].Name || !bytes.Equal(s.Files[i].Data, o.Files[i].Data) {
			return false
		}
	}
	return true
}

// Marshal renders the snapshot as the last good configuration file:
// LastGoodHeader, then JSON (file contents base64, byte for byte).
func (s *Snapshot) Marshal() []byte {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil { // cannot happen: strings, bytes and a time
		panic(err)
	}
	return append(append([]byte(LastGoodHeader), b...), '\n')
}

// ParseSnapshot reads a last good configuration file written by Marshal.
func ParseSnapshot(name string, data []byte) (*Snapshot, error) {
	if !bytes.HasPrefix(data, []byte(LastGoodHeader)) {
		return nil, fmt.Errorf("%s was not written by rdmad (no header)", name)
	}
	var s Snapshot
	dec := json.NewDecoder(bytes.NewReader(data[len(LastGoodHeader):]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if s.MainFile == "" {
		return nil, fmt.Errorf("%s: no main file named", name)
	}
	for _, f := range s.Files {
		if f.Name != s.MainFile && filepath.Dir(f.Name) != DropInDirFor(s.MainFile) {
			return nil, fmt.Errorf("%s: %s is neither the main file nor a drop-in beside it", name, f.Name)
		}
	}
	return &s, nil
}

// Verify refuses a snapshot rdmad must not apply in place of mainFile's
// files: one saved for another main file (a copy planted to stand for
// files rdmad never read), one naming a file twice, or one holding a file
// larger than maxFile, the bound the files themselves are read with.
func (s *Snapshot) Verify(mainFile string, maxFile int) error {
	if s.MainFile != mainFile {
		return fmt.Errorf("the last good configuration was saved for %s, not the configured main file %s", s.MainFile, mainFile)
	}
	seen := make(map[string]bool, len(s.Files))
	for _, f := range s.Files {
		if seen[f.Name] {
			return fmt.Errorf("the last good configuration holds %s twice", f.Name)
		}
		seen[f.Name] = true
		if len(f.Data) > maxFile {
			return fmt.Errorf("the last good copy of %s is %d bytes, larger than the %d a configuration file may be", f.Name, len(f.Data), maxFile)
		}
	}
	return nil
}

// snapshotReader serves a snapshot's files by their names.
type snapshotReader struct{ s *Snapshot }

func (r snapshotReader) ReadFile(name string) ([]byte, error) {
	for _, f := range r.s.Files {
		if f.Name == name {
			return f.Data, nil
		}
	}
	return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
}

func (r snapshotReader) ReadDir(dir string) ([]string, error) {
	var names []string
	for _, f := range r.s.Files {
		if filepath.Dir(f.Name) == dir && f.Name != r.s.MainFile {
			names = append(names, filepath.Base(f.Name))
		}
	}
	if names == nil {
		return nil, &fs.PathError{Op: "open", Path: dir, Err: fs.ErrNotExist}
	}
	sort.Strings(names)
	return names, nil
}

// WithFile is a Reader that shows the files of r plus one more: file,
// as if it were in the drop-in directory dropInDir under the base name as
// (rdmad --check-config --with FILE --as NAME: Ansible's validate hands
// over a temporary file with another name).
func WithFile(r Reader, dropInDir, file, as string) Reader {
	return withReader{Reader: r, dir: dropInDir, file: file, as: filepath.Join(dropInDir, as)}
}

type withReader struct {
	Reader
	dir, file, as string
}

func (w withReader) ReadFile(name string) ([]byte, error) {
	if name != w.as {
		return w.Reader.ReadFile(name)
	}
	b, err := w.Reader.ReadFile(w.file)
	if errors.Is(err, fs.ErrNotExist) {
		// Load skips a drop-in that vanished since the listing; the file
		// to check is no such drop-in: a typo in a validate command must
		// not pass it.
		return nil, fmt.Errorf("the file to check, %s, does not exist", w.file)
	}
	return b, err
}

func (w withReader) ReadDir(dir string) ([]string, error) {
	names, err := w.Reader.ReadDir(dir)
	if dir != w.dir {
		return names, err
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	base := filepath.Base(w.as)
	for _, n := range names {
		if n == base {
			return names, nil
		}
	}
	names = append(names, base)
	sort.Strings(names)
	return names, nil
}
