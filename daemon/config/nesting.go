package config

import "fmt"

// maxNesting is how deep a key path may go in a configuration file: the
// parts of the table header, of a dotted key, and each array and inline
// table entered, counted together. rdmad's schema goes 3 deep
// (qos[0].dscp_prio.26; 4 written inline as qos = [{dscp_prio = {...}}]);
// 6 leaves room for a layout the schema then refuses with a precise error.
const maxNesting = 6

// checkNesting refuses a file that nests deeper than maxNesting, at the
// line where it does, before any TOML parser sees it. BurntSushi/toml's
// cost grows with the square of the depth of dotted keys, table headers
// and inline tables (measured in docs/decisions/config.md, "Nesting is
// bounded before parsing"), and rdmad parses its files at every start and
// reload: one such root-owned drop-in would kill it before the last good
// policy applied. This is one pass over the bytes, with no recursion and a
// stack bounded by maxNesting, so its cost is linear whatever the file.
//
// It follows TOML's lexical rules where nesting could hide (strings of all
// four kinds, comments, quoted and dotted keys, headers, arrays, inline
// tables) and is lenient elsewhere: text that is not TOML is left for the
// parser to refuse, which stops at its first error.
//
// The same pass bounds the breadth: BurntSushi/toml keeps, for every key,
// its path and the tables it implies, so depth alone does not bound its
// memory. A file may hold at most maxKeyParts key parts and array
// elements, which bounds what parsing it costs (the shapes measured are in
// docs/decisions/config.md and docs/performance.md).
func checkNesting(name string, data []byte) error {
	n := nestScanner{src: data, line: 1}
	depth := n.scan()
	switch {
	case n.units > maxKeyParts:
		return &Error{Pos: Position{File: name, Line: n.over},
			Msg: fmt.Sprintf("holds more than %d key parts and array elements (rdmad bounds what one file may cost to parse; a rule for each of 1,024 devices takes a third of it): split it into drop-ins; the file is refused before it is parsed", maxKeyParts)}
	case depth > maxNesting:
		return &Error{Pos: Position{File: name, Line: n.line},
			Msg: fmt.Sprintf("nests deeper than %d levels (table header and dotted key parts, arrays and inline tables counted together; rdmad's deepest setting, qos.dscp_prio.N, is 3): the file is refused before it is parsed", maxNesting)}
	}
	return nil
}

// maxKeyParts bounds the key parts (each part of every table header and
// key) and array elements of one file. A [[roce]] rule is about 6, a
// [[qos]] rule with its arrays about 28: a rule of each for every one of
// 1,024 devices is 35,000.
const maxKeyParts = 65536

// nestFrame is an array or inline table being read, and the depth of the
// key path it stands at.
type nestFrame struct {
	array bool
	depth int
}

type nestScanner struct {
	src   []byte
	pos   int
	line  int
	stack []nestFrame // at most maxNesting+1 frames: deeper is refused
	units int         // key parts and array elements read so far
	over  int         // the line where units passed maxKeyParts
}

// count counts a key part or array element.
func (n *nestScanner) count() {
	if n.units++; n.units == maxKeyParts+1 {
		n.over = n.line
	}
}

// scan reads the whole file and returns maxNesting+1 at the first place
// that nests deeper than maxNesting (n.line is its line), else 0.
func (n *nestScanner) scan() int {
	header := 0 // key parts of the table header in force
	for n.pos < len(n.src) {
		if n.units > maxKeyParts {
			return 0
		}
		start := n.pos
		if len(n.stack) > 0 {
			if d := n.inContainer(); d > maxNesting {
				return d
			}
		} else {
			n.skipSpace(true)
			switch c := n.peek(0); {
			case n.pos >= len(n.src):
			case c == '[':
				n.pos++
				if n.peek(0) == '[' {
					n.pos++
				}
				header = n.key()
				if header > maxNesting {
					return header
				}
				n.skipLine()
			case isBareKeyChar(c) || c == '"' || c == '\'':
				d := header + n.key()
				if d > maxNesting {
					return d
				}
				n.skipSpace(false)
				if n.peek(0) != '=' {
					n.skipLine()
					break
				}
				n.pos++
				if d := n.value(d); d > maxNesting {
					return d
				}
				if len(n.stack) == 0 {
					n.skipLine()
				}
			default:
				n.skipLine()
			}
		}
		if n.pos == start { // never on TOML; guarantees progress
			n.pos++
		}
	}
	return 0
}

// inContainer reads one step inside the innermost array or inline table:
// its end, a separator, or one element (a value; a key = value in an
// inline table). It returns the depth reached.
func (n *nestScanner) inContainer() int {
	top := n.stack[len(n.stack)-1]
	n.skipSpace(true)
	switch c := n.peek(0); {
	case n.pos >= len(n.src):
		return 0
	case c == ']' && top.array, c == '}' && !top.array:
		n.pos++
		n.stack = n.stack[:len(n.stack)-1]
		if len(n.stack) == 0 {
			n.skipLine()
		}
		return 0
	case c == ',':
		n.pos++
		return 0
	case top.array:
		n.count()
		return n.value(top.depth + 1)
	default:
		k := n.key()
		if k == 0 {
			n.pos++ // not a key: not TOML, the parser says why
			return 0
		}
		d := top.depth + k
		if d > maxNesting {
			return d
		}
		n.skipSpace(false)
		if n.peek(0) != '=' {
			n.pos++ // not TOML: step on, the parser says why
			return 0
		}
		n.pos++
		return n.value(d)
	}
}

// value reads the start of a value whose key path is depth deep: a string
// or scalar whole, an array or inline table by pushing a frame (its
// elements are read by inContainer). An array's elements are one deeper;
// an inline table's keys add their own parts.
func (n *nestScanner) value(depth int) int {
	n.skipSpace(false)
	switch n.peek(0) {
	case '"', '\'':
		n.str()
	case '[':
		n.pos++
		if depth+1 > maxNesting {
			return depth + 1
		}
		n.stack = append(n.stack, nestFrame{array: true, depth: depth})
	case '{':
		n.pos++
		n.stack = append(n.stack, nestFrame{depth: depth})
	default:
		for n.pos < len(n.src) {
			switch n.src[n.pos] {
			case ' ', '\t', '\r', '\n', ',', ']', '}', '#':
				return depth
			}
			n.pos++
		}
	}
	return depth
}

// key reads a key (bare or quoted parts joined by dots, blanks around the
// dots) and returns how many parts it has.
func (n *nestScanner) key() int {
	parts := 0
	for n.pos < len(n.src) {
		n.skipSpace(false)
		switch c := n.peek(0); {
		case c == '"' || c == '\'':
			n.str()
		case isBareKeyChar(c):
			for n.pos < len(n.src) && isBareKeyChar(n.src[n.pos]) {
				n.pos++
			}
		default:
			return parts
		}
		parts++
		n.count()
		if parts > maxNesting {
			return parts
		}
		n.skipSpace(false)
		if n.peek(0) != '.' {
			return parts
		}
		n.pos++
	}
	return parts
}

// str skips a string of any of TOML's four kinds, counting the lines a
// multi-line one spans. Basic strings end at an unescaped quote, literal
// ones at the next quote; single-line ones also at a line break (an error
// the parser reports).
func (n *nestScanner) str() {
	q := n.src[n.pos]
	escapes := q == '"'
	if n.peek(1) == q && n.peek(2) == q {
		n.pos += 3
		for n.pos < len(n.src) {
			switch c := n.src[n.pos]; {
			case c == '\\' && escapes:
				n.pos++
				if n.peek(0) == '\n' {
					n.line++
				}
			case c == '\n':
				n.line++
			case c == q && n.peek(1) == q && n.peek(2) == q:
				n.pos += 3
				// Up to two quotes may directly precede the closing three.
				for i := 0; i < 2 && n.peek(0) == q; i++ {
					n.pos++
				}
				return
			}
			n.pos++
		}
		n.pos = len(n.src)
		return
	}
	n.pos++
	for n.pos < len(n.src) {
		switch c := n.src[n.pos]; {
		case c == '\\' && escapes && n.peek(1) != '\n':
			n.pos += 2
			continue
		case c == q:
			n.pos++
			return
		case c == '\n':
			return
		}
		n.pos++
	}
	n.pos = min(n.pos, len(n.src))
}

func (n *nestScanner) peek(off int) byte {
	if n.pos+off < len(n.src) {
		return n.src[n.pos+off]
	}
	return 0
}

// skipSpace skips blanks, and with newlines also line breaks and comments.
func (n *nestScanner) skipSpace(newlines bool) {
	for n.pos < len(n.src) {
		switch c := n.src[n.pos]; {
		case c == ' ' || c == '\t' || c == '\r':
			n.pos++
		case c == '\n' && newlines:
			n.line++
			n.pos++
		case c == '#' && newlines:
			for n.pos < len(n.src) && n.src[n.pos] != '\n' {
				n.pos++
			}
		default:
			return
		}
	}
}

// skipLine moves past the end of the line (a trailing comment, or text
// that is not TOML, which the parser refuses).
func (n *nestScanner) skipLine() {
	for n.pos < len(n.src) {
		c := n.src[n.pos]
		n.pos++
		if c == '\n' {
			n.line++
			return
		}
	}
}
