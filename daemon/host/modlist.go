package host

import "strings"

// ModuleListLine is one module line of a modules list.
type ModuleListLine struct {
	Line int    // 1-based line number in the file
	Name string // the whole line, white space around it removed
}

// Valid reports whether Name is a module name modprobe accepts as one (and
// nothing it could take for an option or a path). A line such as
// "mlx5_ib # x" is not: a comment only starts a line.
func (l ModuleListLine) Valid() bool { return ValidModuleName(l.Name) }

// ParseModuleList reads a modules list (/etc/rdma/modules/*.conf, the
// modules-load.d(5) format) exactly as systemd-modules-load, which
// rdma-core's rdma-load-modules@ units run, does: one module per line,
// white space around it ignored, a line whose first character (after that
// white space) is '#' or ';' a comment, and nothing else a comment: the
// rest of a line is the module's name, valid or not. It is the one parser
// of the format: the modules part loads what it returns, doctor reads the
// same. Lines are split by hand: a bufio.Scanner stops at a line over
// 64 KiB and would silently drop the modules after it.
func ParseModuleList(data []byte) []ModuleListLine {
	var out []ModuleListLine
	for i, l := range strings.Split(string(data), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || l[0] == '#' || l[0] == ';' {
			continue
		}
		out = append(out, ModuleListLine{Line: i + 1, Name: l})
	}
	return out
}

// ValidModuleName accepts what modprobe accepts as a module name and
// nothing that could be taken for an option or a path.
func ValidModuleName(m string) bool {
	if m == "" || len(m) > 64 || m[0] == '-' {
		return false
	}
	for _, c := range m {
		if !(c == '_' || c == '-' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return false
		}
	}
	return true
}
