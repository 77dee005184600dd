package config

import (
	"errors"
	"fmt"
	"math"
	"path"
	"strconv"
	"strings"
)

// ParseLimit parses a memlock limit as written in rdmad.toml: "unlimited" or
// "infinity", or a size in bytes with an optional K, M, G or T suffix (base
// 1024; "G", "GB" and "GiB" all mean 2^30; case does not matter). Zero is
// refused: it forbids locking any memory, which no RDMA application survives.
func ParseLimit(s string) (Limit, error) {
	t := strings.TrimSpace(s)
	switch strings.ToLower(t) {
	case "unlimited", "infinity":
		return Limit{Unlimited: true}, nil
	case "":
		return Limit{}, errors.New(`empty: write "unlimited" or a size such as "64G"`)
	}
	i := 0
	for i < len(t) && '0' <= t[i] && t[i] <= '9' {
		i++
	}
	if i == 0 {
		return Limit{}, fmt.Errorf(`%q is not a size: write "unlimited" or a number with an optional K, M, G or T suffix, such as "64G"`, s)
	}
	n, err := strconv.ParseUint(t[:i], 10, 64)
	if err != nil {
		return Limit{}, fmt.Errorf("%q is too large", s)
	}
	if i < len(t) && (t[i] == '.' || t[i] == ',') {
		return Limit{}, fmt.Errorf("%q: fractions are not supported; use a smaller unit (1536M, not 1.5G)", s)
	}
	unit := strings.ToUpper(strings.TrimSpace(t[i:]))
	unit = strings.TrimSuffix(strings.TrimSuffix(unit, "IB"), "B")
	if strings.HasSuffix(strings.ToUpper(t), "IB") && unit == "" {
		unit = "invalid" // a bare "iB" has no multiplier to qualify
	}
	var shift uint
	switch unit {
	case "":
	case "K":
		shift = 10
	case "M":
		shift = 20
	case "G":
		shift = 30
	case "T":
		shift = 40
	default:
		return Limit{}, fmt.Errorf("%q has an unknown unit %q: use K, M, G or T (base 1024)", s, strings.TrimSpace(t[i:]))
	}
	if n > math.MaxUint64>>shift {
		return Limit{}, fmt.Errorf("%q is too large", s)
	}
	if n == 0 {
		return Limit{}, errors.New(`0 forbids locking any memory, which breaks every RDMA application: to leave limits alone, remove [memlock] or set enable = false`)
	}
	return Limit{Bytes: n << shift}, nil
}

// Human renders the limit the way rdmad.toml spells it: "unlimited", or the
// largest exact unit ("64G", "1536M", "1000").
func (l Limit) Human() string {
	if l.Unlimited {
		return "unlimited"
	}
	units := []struct {
		shift  uint
		suffix string
	}{{40, "T"}, {30, "G"}, {20, "M"}, {10, "K"}}
	for _, u := range units {
		if l.Bytes != 0 && l.Bytes%(1<<u.shift) == 0 {
			return fmt.Sprintf("%d%s", l.Bytes>>u.shift, u.suffix)
		}
	}
	return strconv.FormatUint(l.Bytes, 10)
}

// above reports whether l is a larger limit than m.
func (l Limit) above(m Limit) bool {
	switch {
	case m.Unlimited:
		return false
	case l.Unlimited:
		return true
	}
	return l.Bytes > m.Bytes
}

// MaxGlob bounds a selector's pattern (device, pci, netdev). The names it
// matches are short (an RDMA device's at most 64 bytes, a netdev's 15),
// and matching a pattern costs up to its length at every position of a
// name: unbounded, one rule could cost seconds at every port of a large
// host (org.rdmad1.Manager.Plan takes candidates from any local user).
const MaxGlob = 256

// validGlob checks a path.Match pattern for one name (no '/').
func validGlob(pattern string) error {
	if pattern == "" {
		return errors.New("must not be empty")
	}
	if len(pattern) > MaxGlob {
		return fmt.Errorf("%d bytes; a pattern has at most %d (the names it matches have at most 64)", len(pattern), MaxGlob)
	}
	if strings.Contains(pattern, "/") {
		return fmt.Errorf("%q contains '/', which no device or interface name has", pattern)
	}
	if _, err := path.Match(pattern, ""); err != nil {
		return fmt.Errorf("%q is not a valid glob pattern (unclosed '[' or trailing '\\'?)", pattern)
	}
	return nil
}

// normalizeGUID accepts a node GUID as sysfs prints it (0002:c903:0031:7c51)
// or as ibstat/ibv_devinfo print it (0x0002c90300317c51) and returns the sysfs
// form in lower case, which is what Selector.Matches compares against.
func normalizeGUID(s string) (string, error) {
	hex := strings.ToLower(strings.TrimSpace(s))
	if strings.HasPrefix(hex, "0x") {
		hex = hex[2:]
	} else {
		groups := strings.Split(hex, ":")
		if len(groups) != 4 {
			return "", fmt.Errorf("%q is not a node GUID: write it as in sysfs node_guid (xxxx:xxxx:xxxx:xxxx) or as ibstat prints it (0x followed by 16 hex digits)", s)
		}
		for _, g := range groups {
			if len(g) != 4 {
				return "", fmt.Errorf("%q is not a node GUID: each of the 4 groups has 4 hex digits (xxxx:xxxx:xxxx:xxxx)", s)
			}
		}
		hex = strings.Join(groups, "")
	}
	if len(hex) != 16 {
		return "", fmt.Errorf("%q is not a node GUID: a GUID has 16 hex digits", s)
	}
	for i := 0; i < len(hex); i++ {
		if !isHex(hex[i]) {
			return "", fmt.Errorf("%q is not a node GUID: %q is not a hex digit", s, hex[i])
		}
	}
	return hex[0:4] + ":" + hex[4:8] + ":" + hex[8:12] + ":" + hex[12:16], nil
}

func isHex(c byte) bool { return ('0' <= c && c <= '9') || ('a' <= c && c <= 'f') }

// normalizePCI checks a PCI address glob. The short form lspci prints
// ("3b:00.0", no domain) gets domain 0000, as lspci assumes; the result is
// lower case because sysfs names are.
func normalizePCI(s string) (string, error) {
	p := strings.ToLower(strings.TrimSpace(s))
	if err := validGlob(p); err != nil {
		return "", err
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		if !isHex(c) && !strings.ContainsRune(":.*?[]!-^\\", rune(c)) {
			return "", fmt.Errorf("%q is not a PCI address: expected a form like \"0000:3b:00.0\" (globs allowed), found %q", s, c)
		}
	}
	if strings.Count(p, ":") == 1 && !strings.HasPrefix(p, "*") {
		p = "0000:" + p
	}
	return p, nil
}

// validDriver checks a kernel driver name (mlx5_core, rdma_rxe, hfi1...).
func validDriver(s string) error {
	if s == "" || len(s) > 55 { // MODULE_NAME_LEN - 1 bounds module-backed drivers
		return fmt.Errorf("%q is not a driver name", s)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !isBareKeyChar(c) {
			return fmt.Errorf("%q is not a driver name: %q is not allowed (driver names are letters, digits, '_' and '-'); to match several drivers use one rule per driver", s, c)
		}
	}
	return nil
}

// validGroupName follows the portable rule shadow-utils and systemd agree on:
// 1..32 characters, a letter or '_' first, then letters, digits, '_', '-'
// or '.', not all digits.
func validGroupName(s string) error {
	if strings.HasPrefix(s, "@") {
		return fmt.Errorf("%q: write the group name without the '@' that limits.conf uses", s)
	}
	if s == "" || len(s) > 32 {
		return fmt.Errorf("%q is not a valid group name (1..32 characters)", s)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		letter := c == '_' || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z')
		if i == 0 && !letter {
			return fmt.Errorf("%q is not a valid group name: it must start with a letter or '_'", s)
		}
		if !letter && !('0' <= c && c <= '9') && c != '-' && c != '.' {
			return fmt.Errorf("%q is not a valid group name: %q is not allowed", s, c)
		}
	}
	return nil
}

// escapeGlob quotes the path.Match metacharacters of a literal name, so a
// rule written for one device matches exactly that device.
func escapeGlob(name string) string {
	var b strings.Builder
	// Byte by byte: the metacharacters are ASCII, and a device name may
	// hold bytes that are not UTF-8, which must stay as they are.
	for i := 0; i < len(name); i++ {
		if strings.IndexByte(`*?[]\`, name[i]) >= 0 {
			b.WriteByte('\\')
		}
		b.WriteByte(name[i])
	}
	return b.String()
}

// unescapeGlob reverses escapeGlob.
func unescapeGlob(pattern string) string {
	var b strings.Builder
	for i := 0; i < len(pattern); i++ {
		if pattern[i] == '\\' && i+1 < len(pattern) {
			i++
		}
		b.WriteByte(pattern[i])
	}
	return b.String()
}

// TextfileSuffix is the suffix node_exporter's textfile collector reads.
const TextfileSuffix = ".prom"

// textfilePath checks a [metrics] textfile path and cleans it: "" (off),
// or an absolute file path ending in .prom, the only files the textfile
// collector reads.
func textfilePath(s string) (string, error) {
	if s == "" {
		return "", nil
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return "", fmt.Errorf("%q contains a control character", s)
		}
	}
	if !path.IsAbs(s) {
		return "", fmt.Errorf("%q must be an absolute path (the host root is prefixed by rdmad)", s)
	}
	clean := path.Clean(s)
	base := path.Base(clean)
	if strings.HasSuffix(s, "/") || !strings.HasSuffix(base, TextfileSuffix) || base == TextfileSuffix {
		return "", fmt.Errorf("%q must name a file ending in %s: node_exporter's textfile collector reads only *%s files (e.g. \"/var/lib/prometheus/node-exporter/rdmad.prom\")", s, TextfileSuffix, TextfileSuffix)
	}
	return clean, nil
}
