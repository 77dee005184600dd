package host

import (
	"errors"
	"fmt"
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
