package host

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// ErrNotManaged is returned (wrapped) when a file rdmad would write or remove
// exists without rdmad's header: rdmad never touches a file it does not own.
var ErrNotManaged = errors.New("exists and was not written by rdmad")

// WriteManaged makes rel hold data, which must start with header, the mark
// of rdmad's files. It writes atomically, only when the content differs, and
// refuses to replace a file that lacks the header. changed says whether it
// wrote.
func (h *Host) WriteManaged(rel, header string, data []byte) (changed bool, err error) {
	if !bytes.HasPrefix(data, []byte(header)) {
		return false, fmt.Errorf("host: /%s: content lacks its header", rel)
	}
	old, err := os.ReadFile(h.Path(rel))
	switch {
	case err == nil && bytes.Equal(old, data):
		return false, nil
	case err == nil && !bytes.HasPrefix(old, []byte(header)):
		return false, fmt.Errorf("/%s %w; remove it or move its settings into rdmad's configuration", rel, ErrNotManaged)
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return false, fmt.Errorf("read /%s: %w", rel, err)
	}
	if err := h.WriteFileAtomic(rel, data, 0o644); err != nil {
		return false, fmt.Errorf("write /%s: %w", rel, err)
	}
	return true, nil
}

// RemoveManaged deletes rel if it is rdmad's (starts with header). A missing
// file or someone else's is left alone: removed is false, err nil.
func (h *Host) RemoveManaged(rel, header string) (removed bool, err error) {
	old, err := os.ReadFile(h.Path(rel))
	if errors.Is(err, fs.ErrNotExist) || (err == nil && !bytes.HasPrefix(old, []byte(header))) {
		return false, nil
	}
	if err == nil {
		err = os.Remove(h.Path(rel))
	}
	if err != nil {
		return false, fmt.Errorf("remove /%s: %w", rel, err)
	}
	return true, nil
}
