package config

import (
	"fmt"
	"path/filepath"
	"strings"
	"unicode/utf8"
)

// MaxCandidateSize bounds a candidate drop-in handed over in memory
// (org.rdmad1.Manager.Plan): the size a file of the drop-in directory
// may have.
const MaxCandidateSize = 1 << 20

// CheckDropInName says why name cannot be a drop-in's name, nil when it
// can: rdmad reads only rdmad.d/NAME.toml, neither hidden nor in a
// directory of its own, so a name a caller gives can only ever stand for
// one file of the drop-in directory.
func CheckDropInName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("empty; want NAME.toml")
	case !utf8.ValidString(name) || strings.ContainsFunc(name, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return fmt.Errorf("not valid UTF-8 text without control characters")
	case len(name) > 255:
		return fmt.Errorf("%d bytes; a file name has at most 255", len(name))
	case strings.ContainsRune(name, '/') || name != filepath.Base(name):
		return fmt.Errorf("%q names a directory; want a file name in rdmad.d/ (NAME.toml)", name)
	case strings.HasPrefix(name, "."):
		return fmt.Errorf("%q is hidden; rdmad skips hidden drop-ins", name)
	case !strings.HasSuffix(name, ".toml") || name == ".toml":
		return fmt.Errorf("%q does not end in .toml; rdmad reads only rdmad.d/NAME.toml", name)
	}
	return nil
}

// WithData is a Reader that shows the files of r plus one more whose
// content is data: as if it were in the drop-in directory dropInDir under
// the base name as, in place of a drop-in of that name. Nothing is
// opened for it (org.rdmad1.Manager.Plan hands the bytes over, never a
// path); as must pass CheckDropInName.
func WithData(r Reader, dropInDir string, data []byte, as string) Reader {
	return dataReader{withReader{Reader: r, dir: dropInDir, as: filepath.Join(dropInDir, as)}, data}
}

type dataReader struct {
	withReader
	data []byte
}

func (d dataReader) ReadFile(name string) ([]byte, error) {
	if name == d.as {
		return d.data, nil
	}
	return d.Reader.ReadFile(name)
}

// Problems lists the problems of a load's error one by one (an
// errors.Join tree flattened), each a *Error where it has a file:line.
func Problems(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, Problems(e)...)
		}
		return out
	}
	if err == nil {
		return nil
	}
	return []error{err}
}
