package config

import (
	"strconv"
	"strings"
)

// lineIndex maps a key path to the line where it is declared. Paths use the
// spelling of error messages: "memlock", "memlock.soft", "roce[1]",
// "roce[1].tos" (indices count from 0 within one file).
//
// BurntSushi/toml keeps positions privately and keys them without array
// indices, so every [[roce]] table would share one "roce.tos" line; this small
// scanner recovers exact lines. It runs only on text the TOML parser has
// already accepted, so it can be lenient; it must merely never loop or panic.
type lineIndex map[string]int

// lookup returns the line of path, or of its nearest declared ancestor
// (a key inside an inline table falls back to the table's key).
func (ix lineIndex) lookup(path string) int {
	for path != "" {
		if l, ok := ix[path]; ok {
			return l
		}
		path = parentPath(path)
	}
	return 0
}

// parentPath drops the last component: "roce[1].tos" -> "roce[1]" -> "roce".
func parentPath(p string) string {
	if strings.HasSuffix(p, "]") {
		if i := strings.LastIndexByte(p, '['); i > 0 {
			return p[:i]
		}
	}
	if i := strings.LastIndexByte(p, '.'); i >= 0 {
		return p[:i]
	}
	return ""
}

func joinPath(parent, key string) string {
	if !isBareKey(key) {
		key = strconv.Quote(key)
	}
	if parent == "" {
		return key
	}
	return parent + "." + key
}

func indexPath(p string, i int) string { return p + "[" + strconv.Itoa(i) + "]" }

func isBareKey(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		if !isBareKeyChar(k[i]) {
			return false
		}
	}
	return true
}

func isBareKeyChar(c byte) bool {
	return c == '_' || c == '-' || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') || ('0' <= c && c <= '9')
}

type scanner struct {
	src    string
	pos    int
	line   int
	index  lineIndex
	arrays map[string]int // indexed path of an array of tables -> tables seen
	// open is the arrays and inline tables being read, innermost last: the
	// scanner keeps its own stack rather than recursing, so no input
	// nests it deeper than the memory of the frames.
	open []frame
}

// frame is an array or inline table being read: the path of its key and,
// for an array, the index of its next element.
type frame struct {
	array bool
	path  string
	next  int
}

func indexLines(src string) lineIndex {
	s := &scanner{src: src, line: 1, index: lineIndex{}, arrays: map[string]int{}}
	table := ""
	for s.pos < len(s.src) {
		start := s.pos
		if len(s.open) > 0 {
			s.inContainer()
		} else {
			s.skipBlank(true)
			if s.pos >= len(s.src) {
				break
			}
			if s.src[s.pos] == '[' {
				table = s.header()
			} else {
				s.keyValue(table)
			}
			if len(s.open) == 0 {
				s.skipLine()
			}
		}
		if s.pos == start { // cannot happen on valid TOML; guarantees progress
			s.pos++
		}
	}
	return s.index
}

// inContainer reads one step inside the innermost array or inline table:
// its end (and, for the outermost, the rest of its line), a separator, or
// one element (a value; a key = value in an inline table).
func (s *scanner) inContainer() {
	top := &s.open[len(s.open)-1]
	s.skipBlank(true)
	switch c := s.peek(0); {
	case s.pos >= len(s.src):
	case c == ']' && top.array, c == '}' && !top.array:
		s.pos++
		s.open = s.open[:len(s.open)-1]
		if len(s.open) == 0 {
			s.skipLine()
		}
	case c == ',':
		s.pos++
	case top.array:
		elem := indexPath(top.path, top.next)
		top.next++
		if c == '{' {
			s.index[elem] = s.line
		}
		s.value(elem) // may push: top is not used after this
	default:
		s.keyValue(top.path)
	}
}

func (s *scanner) peek(off int) byte {
	if s.pos+off < len(s.src) {
		return s.src[s.pos+off]
	}
	return 0
}

// skipBlank skips spaces and tabs, and with newlines also line breaks and
// comments.
func (s *scanner) skipBlank(newlines bool) {
	for s.pos < len(s.src) {
		switch c := s.src[s.pos]; {
		case c == ' ' || c == '\t' || c == '\r':
			s.pos++
		case c == '\n' && newlines:
			s.line++
			s.pos++
		case c == '#' && newlines:
			for s.pos < len(s.src) && s.src[s.pos] != '\n' {
				s.pos++
			}
		default:
			return
		}
	}
}

// skipLine moves past the end of the current line (a trailing comment).
func (s *scanner) skipLine() {
	for s.pos < len(s.src) {
		c := s.src[s.pos]
		s.pos++
		if c == '\n' {
			s.line++
			return
		}
	}
}

// header reads [a.b] or [[a.b]] and returns the indexed path of the table.
func (s *scanner) header() string {
	line := s.line
	s.pos++ // [
	array := s.peek(0) == '['
	if array {
		s.pos++
	}
	keys := indexedParts(s.keyParts())
	p := ""
	for i, k := range keys {
		p = joinPath(p, k)
		last := i == len(keys)-1
		if n, ok := s.arrays[p]; ok && !(last && array) {
			p = indexPath(p, n-1) // [a.b] under [[a]] refers to the last a
		}
		if last && array {
			n := s.arrays[p]
			s.arrays[p] = n + 1
			if _, seen := s.index[p]; !seen {
				s.index[p] = line // the array as a whole: its first table
			}
			p = indexPath(p, n)
		}
	}
	if _, seen := s.index[p]; !seen {
		s.index[p] = line
	}
	return p
}

// indexedParts is the parts of a key that are indexed: maxNesting, as
// deep as checkNesting lets a file reach the parser. Deeper keys (only in
// text the guard did not see) are found at the line of their ancestor,
// and joining their paths costs nothing quadratic.
func indexedParts(keys []string) []string { return keys[:min(len(keys), maxNesting)] }

// keyParts reads a dotted key (bare or quoted parts) up to '=' or ']'.
func (s *scanner) keyParts() []string {
	var parts []string
	for s.pos < len(s.src) {
		s.skipBlank(false)
		switch c := s.peek(0); {
		case c == '"':
			parts = append(parts, s.basicString())
		case c == '\'':
			parts = append(parts, s.literalString())
		case isBareKeyChar(c):
			start := s.pos
			for s.pos < len(s.src) && isBareKeyChar(s.src[s.pos]) {
				s.pos++
			}
			parts = append(parts, s.src[start:s.pos])
		default:
			return parts
		}
		s.skipBlank(false)
		if s.peek(0) != '.' {
			return parts
		}
		s.pos++
	}
	return parts
}

// keyValue reads key = value, recording the key and, when the value is an
// array or inline table, opening it for inContainer.
func (s *scanner) keyValue(table string) {
	line := s.line
	keys := indexedParts(s.keyParts())
	if len(keys) == 0 {
		return
	}
	p := table
	for _, k := range keys {
		p = joinPath(p, k)
		if _, seen := s.index[p]; !seen {
			s.index[p] = line
		}
	}
	s.skipBlank(false)
	if s.peek(0) != '=' {
		return
	}
	s.pos++
	s.skipBlank(false)
	s.value(p)
}

// value reads a string or scalar whole; an array or inline table is
// opened (pushed) and its elements read by inContainer.
func (s *scanner) value(p string) {
	switch c := s.peek(0); c {
	case '"':
		if strings.HasPrefix(s.src[s.pos:], `"""`) {
			s.multiline(`"""`, true)
		} else {
			s.basicString()
		}
	case '\'':
		if strings.HasPrefix(s.src[s.pos:], `'''`) {
			s.multiline(`'''`, false)
		} else {
			s.literalString()
		}
	case '[', '{':
		if len(s.open) >= maxNesting {
			s.skipNested() // only on text the nesting guard did not see
			return
		}
		s.pos++
		s.open = append(s.open, frame{array: c == '[', path: p})
	default:
		for s.pos < len(s.src) {
			switch s.src[s.pos] {
			case ' ', '\t', '\r', '\n', ',', ']', '}', '#':
				return
			}
			s.pos++
		}
	}
}

// skipNested skips an array or inline table whole, recording nothing in
// it: lines are indexed maxNesting deep, as deep as checkNesting lets a
// file reach the parser, so no text costs more than a pass over it.
func (s *scanner) skipNested() {
	depth := 0
	for s.pos < len(s.src) {
		s.skipBlank(true)
		switch c := s.peek(0); {
		case s.pos >= len(s.src):
			return
		case c == '"' || c == '\'':
			s.value("")
			continue
		case c == '[' || c == '{':
			depth++
		case c == ']' || c == '}':
			depth--
		}
		s.pos++
		if depth <= 0 {
			return
		}
	}
}

// basicString reads "..." and returns its value (escapes decoded where Go
// agrees with TOML; the raw text otherwise).
func (s *scanner) basicString() string {
	start := s.pos
	s.pos++
	for s.pos < len(s.src) {
		switch s.src[s.pos] {
		case '\\':
			s.pos += 2
			continue
		case '"':
			s.pos++
			raw := s.src[start:s.pos]
			if v, err := strconv.Unquote(raw); err == nil {
				return v
			}
			return raw[1 : len(raw)-1]
		case '\n':
			return s.src[start+1 : s.pos]
		}
		s.pos++
	}
	if s.pos > len(s.src) {
		s.pos = len(s.src)
	}
	return s.src[min(start+1, len(s.src)):s.pos]
}

func (s *scanner) literalString() string {
	start := s.pos + 1
	s.pos++
	for s.pos < len(s.src) && s.src[s.pos] != '\'' && s.src[s.pos] != '\n' {
		s.pos++
	}
	v := s.src[min(start, len(s.src)):s.pos]
	if s.peek(0) == '\'' {
		s.pos++
	}
	return v
}

// multiline skips a """ or ”' string, counting the lines it spans.
func (s *scanner) multiline(delim string, escapes bool) {
	s.pos += len(delim)
	for s.pos < len(s.src) {
		c := s.src[s.pos]
		switch {
		case c == '\\' && escapes:
			if s.peek(1) == '\n' {
				s.line++
			}
			s.pos += 2
			continue
		case c == '\n':
			s.line++
		case strings.HasPrefix(s.src[s.pos:], delim):
			s.pos += len(delim)
			// Up to two quotes may directly precede the closing delimiter.
			for i := 0; i < 2 && s.peek(0) == delim[0]; i++ {
				s.pos++
			}
			return
		}
		s.pos++
	}
	s.pos = min(s.pos, len(s.src))
}
