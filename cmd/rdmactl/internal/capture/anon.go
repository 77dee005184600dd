package capture

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
)

// An anonymiser replaces the host's identifiers in everything a capture
// holds (file contents and path names): MAC addresses, IPv4 and IPv6
// addresses, GIDs, node, port and system image GUIDs, the host's name and
// serial numbers. Each identifier gets one replacement, whatever the form
// it is written in, so a GID table still matches its netdev: a link-local
// GID is built from its netdev's MAC (EUI-64), and the MAC's replacement
// builds the GID's; an IPv4-mapped GID holds the netdev's address, and the
// address's replacement makes the GID's; a GUID is the same in node_guid
// as in a port's GID and in a [[roce]] guid selector.
//
// The replacements are in ranges that no host uses: MACs locally
// administered (02:00:00:...), IPv4 from 198.18.0.0/15 (RFC 2544), IPv6
// prefixes from 2001:db8::/32 (RFC 3849), GUIDs 0200:0000:NNNN:NNNN.
type anonymiser struct {
	hostnames []string // lower case, longest first
	names     map[string]string
	macs      map[[6]byte][6]byte
	guids     map[[8]byte][8]byte
	prefixes  map[[8]byte][8]byte
	ipv4      map[[4]byte][4]byte
	serials   map[string]string
	replaced  []Replacement
	elems     map[string]string // path elements scrubbed
}

// Replacement is one identifier of the captured host and what the capture
// holds instead.
type Replacement struct {
	Kind string `json:"kind"` // mac, ipv4, ipv6-prefix, guid, hostname, serial
	From string `json:"from"`
	To   string `json:"to"`
}

// Replacement kinds.
const (
	KindMAC      = "mac"
	KindIPv4     = "ipv4"
	KindPrefix   = "ipv6-prefix"
	KindGUID     = "guid"
	KindHostname = "hostname"
	KindSerial   = "serial"
)

// Replaced host names. The first name found is the host's; a name with
// dots gets a domain.
const (
	hostnameReplacement = "captured-host"
	domainReplacement   = "example.org"
)

func newAnonymiser(hostnames []string) *anonymiser {
	a := &anonymiser{names: map[string]string{}, macs: map[[6]byte][6]byte{}, guids: map[[8]byte][8]byte{},
		prefixes: map[[8]byte][8]byte{}, ipv4: map[[4]byte][4]byte{}, serials: map[string]string{},
		elems: map[string]string{}}
	for _, h := range hostnames {
		a.addHostname(h)
	}
	return a
}

// addHostname makes name (and, for a fully qualified one, its first label)
// a word the capture replaces. "localhost" and names of fewer than three
// characters are left: they name no host, and replacing them would change
// words of the files that are not names.
func (a *anonymiser) addHostname(name string) {
	name = strings.ToLower(strings.TrimSpace(name))
	if name == "" || name == "localhost" || strings.HasPrefix(name, "localhost.") || len(name) < 3 {
		return
	}
	if _, ok := a.names[name]; ok {
		return
	}
	short, _, fqdn := strings.Cut(name, ".")
	to := hostnameReplacement
	if fqdn {
		to += "." + domainReplacement
		a.addHostname(short)
	}
	a.names[name] = to
	a.replaced = append(a.replaced, Replacement{KindHostname, name, to})
	a.hostnames = append(a.hostnames, name)
	// Longest first: a domain name is replaced before its first label.
	for i := len(a.hostnames) - 1; i > 0 && len(a.hostnames[i]) > len(a.hostnames[i-1]); i-- {
		a.hostnames[i], a.hostnames[i-1] = a.hostnames[i-1], a.hostnames[i]
	}
}

// Map lists every identifier replaced so far, in the order first met.
func (a *anonymiser) Map() []Replacement { return append([]Replacement(nil), a.replaced...) }

// identifiers are the forms an identifier takes in sysfs, /proc and
// configuration files, longest first (the first alternative that matches
// at a place wins): an IPoIB hardware address (4 bytes of flags and QPN,
// then the port's GID), a GID as sysfs writes it, an IPv6 address in
// another form, a MAC, a GUID as node_guid writes it or as ibstat does (0x and 16
// hex digits), a netdev named after its MAC by systemd (enx...), an IPv4
// address. A match that is part of a longer run of hex groups is left
// (checked in scrub): it is none of these.
var identifiers = regexp.MustCompile(`(?i)` +
	`(\b[0-9a-f]{2}(?::[0-9a-f]{2}){19}\b)` + // 1 IPoIB hardware address
	`|(\b[0-9a-f]{4}(?::[0-9a-f]{4}){7}\b)` + // 2 GID
	`|([0-9a-f:]*::(?:[0-9a-f]{1,4}:)*(?:\d{1,3}(?:\.\d{1,3}){3}|[0-9a-f]{1,4})?` + // 3 IPv6 with ::
	`|\b[0-9a-f]{1,4}(?::[0-9a-f]{1,4}){7}\b)` + // or 8 groups of 1 to 4 digits
	`|(\b[0-9a-f]{2}(?::[0-9a-f]{2}){5}\b)` + // 4 MAC
	`|(\b[0-9a-f]{4}(?::[0-9a-f]{4}){3}\b)` + // 5 GUID
	`|(\b0x[0-9a-f]{16}\b)` + // 6 GUID as ibstat writes it
	`|(\benx[0-9a-f]{12}\b)` + // 7 netdev named after its MAC
	`|(\b\d{1,3}(?:\.\d{1,3}){3}\b)`) // 8 IPv4

// scrub returns b with every identifier replaced; b itself is not changed.
func (a *anonymiser) scrub(b []byte) []byte {
	if !bytes.ContainsAny(b, ":.x") && !a.hasHostname(b) {
		return b // most sysfs attributes: a number, a word
	}
	var out []byte
	last := 0
	for _, m := range identifiers.FindAllSubmatchIndex(b, -1) {
		start, end := m[0], m[1]
		if start == end || !a.bounded(b, start, end) {
			continue
		}
		var repl []byte
		for g := 1; g < len(m)/2; g++ {
			if m[2*g] < 0 {
				continue
			}
			repl = a.replace(g, b[start:end])
			break
		}
		if repl == nil {
			continue
		}
		out = append(out, b[last:start]...)
		out = append(out, repl...)
		last = end
	}
	if out == nil {
		return a.scrubHostnames(b)
	}
	return a.scrubHostnames(append(out, b[last:]...))
}

// bounded reports whether b[start:end] stands alone: not inside a longer
// run of colon-separated hex groups or dotted numbers, nor glued to a
// word.
func (a *anonymiser) bounded(b []byte, start, end int) bool {
	if start > 0 {
		if c := b[start-1]; c == ':' || isWord(c) || c == '.' && isDigit(b[start]) {
			return false
		}
	}
	if end < len(b) {
		switch c := b[end]; {
		case isWord(c):
			return false
		case c == ':' && end+1 < len(b) && isHex(b[end+1]):
			return false
		case c == '.' && end+1 < len(b) && isDigit(b[end+1]):
			return false
		}
	}
	return true
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }
func isHex(c byte) bool   { return isDigit(c) || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }
func isWord(c byte) bool  { return isHex(c) || c >= 'g' && c <= 'z' || c >= 'G' && c <= 'Z' || c == '_' }

// replace is the replacement of s, matched by group g of identifiers, or
// nil to leave it.
func (a *anonymiser) replace(g int, s []byte) []byte {
	switch g {
	case 1:
		raw := hexBytes(s)
		var gid [16]byte
		copy(gid[:], raw[4:])
		gid = a.gid(gid)
		return colonHex(append(raw[:4:4], gid[:]...), 1)
	case 2:
		var gid [16]byte
		copy(gid[:], hexBytes(s))
		gid = a.gid(gid)
		return colonHex(gid[:], 2)
	case 3:
		addr, err := netip.ParseAddr(string(s))
		if err != nil || !addr.Is6() || addr.IsUnspecified() || addr.IsLoopback() {
			return nil
		}
		if addr.Is4In6() {
			v4 := a.v4(addr.Unmap().As4())
			return []byte(netip.AddrFrom16(netip.AddrFrom4(v4).As16()).String())
		}
		return []byte(netip.AddrFrom16(a.gid(addr.As16())).String())
	case 4:
		var mac [6]byte
		copy(mac[:], hexBytes(s))
		if mac == [6]byte{} || mac == [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff} {
			return nil
		}
		mac = a.mac(mac)
		return colonHex(mac[:], 1)
	case 5:
		var guid [8]byte
		copy(guid[:], hexBytes(s))
		if guid == [8]byte{} {
			return nil
		}
		guid = a.guid(guid)
		return colonHex(guid[:], 2)
	case 6:
		var guid [8]byte
		copy(guid[:], hexBytes(s[2:]))
		if guid == [8]byte{} {
			return nil
		}
		guid = a.guid(guid)
		return []byte("0x" + hex.EncodeToString(guid[:]))
	case 7:
		var mac [6]byte
		copy(mac[:], hexBytes(s[3:]))
		mac = a.mac(mac)
		return []byte("enx" + hex.EncodeToString(mac[:]))
	case 8:
		var v4 [4]byte
		for i, f := range strings.Split(string(s), ".") {
			n, err := strconv.Atoi(f)
			if err != nil || n > 255 || len(f) > 1 && f[0] == '0' {
				return nil // a version number, not an address
			}
			v4[i] = byte(n)
		}
		if !publicV4(v4) {
			return nil
		}
		v4 = a.v4(v4)
		return []byte(netip.AddrFrom4(v4).String())
	}
	return nil
}

// publicV4 reports whether v4 can name a host: not 0.x, the loopback,
// multicast, or a netmask (255.x).
func publicV4(v4 [4]byte) bool {
	return v4[0] != 0 && v4[0] != 127 && v4[0] < 224
}

// hexBytes decodes hex digits, skipping separators.
func hexBytes(s []byte) []byte {
	var digits []byte
	for _, c := range s {
		if isHex(c) {
			digits = append(digits, c)
		}
	}
	out, _ := hex.DecodeString(string(bytes.ToLower(digits)))
	return out
}

// colonHex writes b as hex groups of group bytes separated by colons
// (1: a MAC, 2: a GID or GUID as sysfs writes them).
func colonHex(b []byte, group int) []byte {
	var out []byte
	for i := 0; i < len(b); i += group {
		if i > 0 {
			out = append(out, ':')
		}
		out = hex.AppendEncode(out, b[i:i+group])
	}
	return out
}

// gid is the replacement of a GID or IPv6 address: its prefix (the subnet
// prefix of an InfiniBand GID, the network of a RoCE one) and its
// interface ID each replaced, an IPv4-mapped one through its address. The
// all-zero GID (an empty entry) and the link-local prefix stay.
func (a *anonymiser) gid(gid [16]byte) [16]byte {
	if gid == [16]byte{} {
		return gid
	}
	if addr := netip.AddrFrom16(gid); addr.Is4In6() {
		return netip.AddrFrom4(a.v4(addr.Unmap().As4())).As16()
	}
	var prefix, iid [8]byte
	copy(prefix[:], gid[:8])
	copy(iid[:], gid[8:])
	if prefix != [8]byte{0xfe, 0x80} && prefix != [8]byte{} {
		prefix = a.prefix(prefix)
	}
	if iid != [8]byte{} {
		iid = a.guid(iid)
	}
	var out [16]byte
	copy(out[:8], prefix[:])
	copy(out[8:], iid[:])
	return out
}

// guid is the replacement of a GUID or an IPv6 interface ID. One made from
// a MAC (EUI-64: ff:fe in the middle, the universal/local bit flipped) is
// made again from the MAC's replacement, so a netdev's link-local GID
// matches its address after the capture too.
func (a *anonymiser) guid(g [8]byte) [8]byte {
	if g[3] == 0xff && g[4] == 0xfe {
		mac := a.mac([6]byte{g[0] ^ 2, g[1], g[2], g[5], g[6], g[7]})
		return [8]byte{mac[0] ^ 2, mac[1], mac[2], 0xff, 0xfe, mac[3], mac[4], mac[5]}
	}
	if r, ok := a.guids[g]; ok {
		return r
	}
	var r [8]byte
	r[0] = 0x02
	binary.BigEndian.PutUint32(r[4:], uint32(len(a.guids)+1))
	a.guids[g] = r
	a.replaced = append(a.replaced, Replacement{KindGUID, string(colonHex(g[:], 2)), string(colonHex(r[:], 2))})
	return r
}

func (a *anonymiser) mac(m [6]byte) [6]byte {
	if r, ok := a.macs[m]; ok {
		return r
	}
	n := uint32(len(a.macs) + 1)
	r := [6]byte{0x02, 0, 0, byte(n >> 16), byte(n >> 8), byte(n)}
	a.macs[m] = r
	a.replaced = append(a.replaced, Replacement{KindMAC, string(colonHex(m[:], 1)), string(colonHex(r[:], 1))})
	return r
}

func (a *anonymiser) prefix(p [8]byte) [8]byte {
	if r, ok := a.prefixes[p]; ok {
		return r
	}
	r := [8]byte{0x20, 0x01, 0x0d, 0xb8}
	binary.BigEndian.PutUint32(r[4:], uint32(len(a.prefixes)+1))
	a.prefixes[p] = r
	a.replaced = append(a.replaced, Replacement{KindPrefix, string(colonHex(p[:], 2)), string(colonHex(r[:], 2))})
	return r
}

func (a *anonymiser) v4(v [4]byte) [4]byte {
	if r, ok := a.ipv4[v]; ok {
		return r
	}
	n := len(a.ipv4) + 1
	r := [4]byte{198, 18 + byte(n>>16&1), byte(n >> 8), byte(n)}
	a.ipv4[v] = r
	a.replaced = append(a.replaced, Replacement{KindIPv4, netip.AddrFrom4(v).String(), netip.AddrFrom4(r).String()})
	return r
}

// serial is the replacement of a serial number (the whole of a serial
// attribute).
func (a *anonymiser) serial(s string) string {
	s = strings.TrimSpace(s)
	if s == "" {
		return s
	}
	if r, ok := a.serials[s]; ok {
		return r
	}
	r := fmt.Sprintf("SERIAL%06d", len(a.serials)+1)
	a.serials[s] = r
	a.replaced = append(a.replaced, Replacement{KindSerial, s, r})
	return r
}

func (a *anonymiser) hasHostname(b []byte) bool {
	if len(a.hostnames) == 0 {
		return false
	}
	lower := bytes.ToLower(b)
	for _, h := range a.hostnames {
		if bytes.Contains(lower, []byte(h)) {
			return true
		}
	}
	return false
}

// scrubHostnames replaces the host's names where they stand as a name:
// not inside a longer name (letters, digits, '-' and '_' around it).
func (a *anonymiser) scrubHostnames(b []byte) []byte {
	if !a.hasHostname(b) {
		return b
	}
	for _, h := range a.hostnames {
		lower := bytes.ToLower(b)
		var out []byte
		last := 0
		for i := 0; ; {
			j := bytes.Index(lower[i:], []byte(h))
			if j < 0 {
				break
			}
			start, end := i+j, i+j+len(h)
			i = end
			if start > 0 && isNameChar(b[start-1]) || end < len(b) && isNameChar(b[end]) {
				continue
			}
			out = append(out, b[last:start]...)
			out = append(out, a.names[h]...)
			last = end
		}
		if out != nil {
			b = append(out, b[last:]...)
		}
	}
	return b
}

func isNameChar(c byte) bool { return isWord(c) || c == '-' }

// scrubPath is the path rel with each of its elements scrubbed: a path's
// elements repeat (ports, 1, gid_attrs), so each is scrubbed once.
func (a *anonymiser) scrubPath(rel string) string {
	var b strings.Builder
	for i, e := range strings.Split(rel, "/") {
		if i > 0 {
			b.WriteByte('/')
		}
		s, ok := a.elems[e]
		if !ok {
			s = string(a.scrub([]byte(e)))
			a.elems[e] = s
		}
		b.WriteString(s)
	}
	return b.String()
}

// Text is s with the replacements made so far and any new ones: what a
// text about the captured host (rdmad's report, doctor's findings) reads
// as about the capture.
func (a *anonymiser) Text(s string) string { return string(a.scrub([]byte(s))) }
