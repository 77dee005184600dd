package host

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// ErrNotManaged is returned (wrapped) when a file rdmad would write or remove
// exists without rdmad's header: rdmad never touches a file it does not own.
var ErrNotManaged = errors.New("exists and was not written by rdmad")

// WriteManaged makes rel hold data, which must start with header, the mark
// of rdmad's files. It writes atomically, only when the content differs, and
// refuses to replace a file that lacks the header. changed says whether it
// wrote.
func (h *Host) WriteManaged(rel, header string, data []byte) (changed bool, err error) {
	return WriteManaged(h.Path(rel), header, data)
}

// WriteManaged is the path-based form of Host.WriteManaged, for rdmad's
// drop-in beside a --config file that may lie outside the root.
func WriteManaged(name, header string, data []byte) (changed bool, err error) {
	changed, err = WriteFile(name, data, 0o644, WriteOptions{Header: header, SkipSame: true})
	if err != nil && !errors.Is(err, ErrNotManaged) {
		return false, fmt.Errorf("write %s: %w", name, err)
	}
	return changed, err
}

// RemoveManaged deletes rel if it is rdmad's (starts with header). A missing
// file or someone else's is left alone: removed is false, err nil.
func (h *Host) RemoveManaged(rel, header string) (removed bool, err error) {
	return RemoveManaged(h.Path(rel), header)
}

// RemoveManaged is the path-based form of Host.RemoveManaged, through the
// directory's descriptor (safewrite.go).
func RemoveManaged(name, header string) (removed bool, err error) {
	return removeAt(name, header, false)
}

// ErrUntrusted is returned (wrapped) by Trusted.
var ErrUntrusted = errors.New("can be changed by users other than root")

// Trusted checks that rel and its directory belong to root (or to the user
// rdmad runs as) and are not writable by group or others: what rdmad
// acts on with its privileges must not be anyone's to change.
func (h *Host) Trusted(rel string) error {
	for _, p := range []string{h.Path(rel), filepath.Dir(h.Path(rel))} {
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			return &fs.PathError{Op: "stat", Path: p, Err: err}
		}
		if (st.Uid != 0 && int(st.Uid) != os.Geteuid()) || st.Mode&0o022 != 0 {
			return fmt.Errorf("%s (owner uid %d, mode %#o) %w", p, st.Uid, st.Mode&0o777, ErrUntrusted)
		}
	}
	return nil
}
