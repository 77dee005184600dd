package host

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"strings"
)

// FileSnapshot is what one of rdmad's managed files held before a change:
// the Old of a part's action on the file, so the part can put it back.
type FileSnapshot struct {
	Exists bool
	Data   []byte
}

// String summarises the content for reports and rdmactl: "absent", or its
// first line that is not a comment (with how many more follow).
func (s FileSnapshot) String() string {
	if !s.Exists {
		return "absent"
	}
	var lines []string
	for _, l := range strings.Split(string(s.Data), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			lines = append(lines, l)
		}
	}
	switch len(lines) {
	case 0:
		return fmt.Sprintf("%d bytes, no setting", len(s.Data))
	case 1:
		return lines[0]
	case 2:
		return lines[0] + " (+1 line)"
	}
	return fmt.Sprintf("%s (+%d lines)", lines[0], len(lines)-1)
}

// Equal reports whether two snapshots hold the same file.
func (s FileSnapshot) Equal(o FileSnapshot) bool {
	return s.Exists == o.Exists && bytes.Equal(s.Data, o.Data)
}

// Snapshot reads rel (bounded, as configuration) for a later Restore. A
// missing file is a snapshot that does not exist. The error of one that
// cannot be read is ReadConfigFile's, which names the path and the step.
func (h *Host) Snapshot(rel string) (FileSnapshot, error) {
	data, err := ReadConfigFile(h.Path(rel))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return FileSnapshot{}, nil
	case err != nil:
		return FileSnapshot{}, err
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
