package host

import (
	"errors"
	"fmt"
	"io/fs"
)

// FileSnapshot is what one of rdmad's managed files held before a change:
// the Old of a part's action on the file, so the part can put it back.
type FileSnapshot struct {
	Exists bool
	Data   []byte
}

// Snapshot reads rel (bounded, as configuration) for a later Restore. A
// missing file is a snapshot that does not exist.
func (h *Host) Snapshot(rel string) (FileSnapshot, error) {
	data, err := ReadConfigFile(h.Path(rel))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return FileSnapshot{}, nil
	case err != nil:
		return FileSnapshot{}, fmt.Errorf("read %s: %w", h.Path(rel), err)
	}
	return FileSnapshot{Exists: true, Data: data}, nil
}

// Restore puts a managed file back as snap says it was, through
// WriteManaged and RemoveManaged: never over, and never removing, a file
// without rdmad's header.
func (h *Host) Restore(rel, header string, snap FileSnapshot) error {
	if !snap.Exists {
		_, err := h.RemoveManaged(rel, header)
		return err
	}
	_, err := h.WriteManaged(rel, header, snap.Data)
	return err
}
