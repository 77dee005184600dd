package config

import (
	"bytes"
	"strings"
	"time"
)

// Note is who last changed an entry of rdmad's own declarations (the
// runtime overlay, rdmad's drop-in) over D-Bus, and when. rdmad's drop-in
// keeps it as a comment line above the entry ("# set by ..."), read back
// when the file loads; rdmactl status shows it.
type Note struct {
	// By is the caller in a few words, one line of printable text
	// ("root (uid 0), pid 4242 busctl, session-3.scope").
	By string
	At time.Time // to the second, UTC
}

// Empty reports whether nothing is known of the change.
func (n Note) Empty() bool { return n.By == "" && n.At.IsZero() }

// notePrefix opens a note's comment line in rdmad's drop-in.
const notePrefix = "# set by "

// comment is the note's line in rdmad's drop-in: one line whatever By
// holds (a control character becomes '?': a newline would end the comment
// and put the rest in the TOML).
func (n Note) comment() string {
	by := strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return '?'
		}
		return r
	}, n.By)
	return notePrefix + by + ", at " + n.At.UTC().Format(time.RFC3339) + "\n"
}

// parseNote reads a note's comment line; false for any other line.
func parseNote(line string) (Note, bool) {
	rest, ok := strings.CutPrefix(line, notePrefix)
	if !ok {
		return Note{}, false
	}
	by, at, ok := cutLast(rest, ", at ")
	if !ok {
		return Note{By: rest}, true
	}
	t, err := time.Parse(time.RFC3339, strings.TrimSpace(at))
	if err != nil {
		return Note{By: rest}, true
	}
	return Note{By: by, At: t.UTC()}, true
}

func cutLast(s, sep string) (before, after string, ok bool) {
	i := strings.LastIndex(s, sep)
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+len(sep):], true
}

// readNotes gives the entries of rdmad's drop-in the notes above them: a
// note line directly before an entry's table header ([[roce]], [[qos]],
// [[link]], [netns]) is that entry's, the entries taken in file order as
// the decoder keeps them.
func readNotes(decl *fileDecl, data []byte) {
	var pending *Note
	var roce, qos, link int
	for _, raw := range bytes.Split(data, []byte("\n")) {
		line := strings.TrimSpace(string(raw))
		if n, ok := parseNote(line); ok {
			pending = &n
			continue
		}
		var note Note
		if pending != nil {
			note = *pending
		}
		switch line {
		case "[[roce]]":
			if roce < len(decl.roce) {
				decl.roce[roce].Note = note
			}
			roce++
		case "[[qos]]":
			if qos < len(decl.qos) {
				decl.qos[qos].Note = note
			}
			qos++
		case "[[link]]":
			if link < len(decl.links) {
				decl.links[link].Note = note
			}
			link++
		case "[netns]":
			decl.netnsNote = note
		}
		pending = nil
	}
}
