package events

import (
	"bytes"
	"path"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// FuzzUevent feeds arbitrary datagrams to the uevent parser and router:
// no panic; a parsed event has an action and a path; and every request
// names a device or netdev that can be a directory entry (or asks for a
// full rescan), so nothing from the socket reaches a path unchecked.
func FuzzUevent(f *testing.F) {
	f.Add(uevent("add", ibPath+"mlx5_0", "SUBSYSTEM=infiniband", "NAME=mlx5_0", "SEQNUM=4711"))
	f.Add(uevent("move", ibPath+"rxe1", "SUBSYSTEM=infiniband", "NAME=rxe1", "DEVPATH_OLD="+ibPath+"rxe0"))
	f.Add(uevent("remove", "/devices/virtual/net/eth1", "SUBSYSTEM=net", "INTERFACE=eth1"))
	f.Add(uevent("add", ibPath+"x", "SUBSYSTEM=infiniband", "NAME=../../etc"))
	f.Add(uevent("add", "/devices/virtual/net/..", "SUBSYSTEM=net"))
	f.Add([]byte("libudev\x00\xfe\xed\xca\xfe"))
	f.Add([]byte("add@/x\x00=\x00==\x00ACTION\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		u, err := ParseUevent(b)
		if err != nil {
			return
		}
		if u.Action == "" || u.DevPath == "" && !bytes.Contains(b, []byte("DEVPATH=")) {
			t.Fatalf("parsed %+v from %q", u, b)
		}
		r := &recorder{}
		asked := RouteUevent(u, r)
		if asked != (r.got() != "") {
			t.Fatalf("RouteUevent said %v but asked %q", asked, r.got())
		}
		for _, req := range r.reqs {
			if req == "*" {
				continue
			}
			_, name, _ := strings.Cut(req, ":")
			if !validName(name) || strings.ContainsAny(name, "/\x00") || name == ".." || name == "." {
				t.Fatalf("request %q from %+v", req, u)
			}
			if name != u.Env["NAME"] && name != u.Env["INTERFACE"] && name != path.Base(u.DevPath) && name != path.Base(u.Env["DEVPATH_OLD"]) {
				t.Fatalf("request %q names nothing the event named: %+v", req, u)
			}
		}
	})
}

// FuzzLinkChanges drives the rtnetlink link-change logic with sequences of
// RTM_NEWLINK/RTM_DELLINK messages built from the fuzzer's bytes and
// decoded as the subscription decodes them (netlink.LinkDeserialize). The
// source must never panic, must report a new, removed or renamed netdev
// (both names), never report a repeat, and keep at most one entry per
// interface index, none for a deleted one.
func FuzzLinkChanges(f *testing.F) {
	// Records: type (even: NEWLINK, odd: DELLINK), index, flags, operstate,
	// name length, name.
	f.Add([]byte("\x00\x03\x00\x02\x04eth1\x00\x03\x43\x06\x04eth1\x00\x03\x43\x06\x06enp1s0\x01\x03\x00\x02\x06enp1s0"))
	f.Add([]byte("\x00\x01\x01\x00\x00\x00\x01\x01\x00\x10aaaaaaaaaaaaaaaa"))
	f.Add([]byte("\x00\x07\x00\x00\x03a\x00b\x01\x07\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s := &LinkSource{links: map[int]linkView{}}
		type state struct {
			name      string
			up, lower bool
			oper      netlink.LinkOperState
			known     bool
		}
		model := map[int]state{}
		for len(data) >= 5 {
			typ, idx, flags, oper, n := data[0], int(data[1]), data[2], data[3], int(data[4])
			data = data[5:]
			n = min(n, len(data))
			name := string(data[:n])
			data = data[n:]

			msgType := uint16(unix.RTM_NEWLINK)
			if typ%2 == 1 {
				msgType = unix.RTM_DELLINK
			}
			var raw []byte
			info := nl.NewIfInfomsg(unix.AF_UNSPEC)
			info.Index = int32(idx)
			info.Flags = uint32(flags&1)*unix.IFF_UP | uint32(flags>>1&1)*unix.IFF_LOWER_UP | uint32(flags>>2)<<8
			raw = append(raw, info.Serialize()...)
			raw = append(raw, nl.NewRtAttr(unix.IFLA_IFNAME, append([]byte(name), 0)).Serialize()...)
			raw = append(raw, nl.NewRtAttr(unix.IFLA_OPERSTATE, []byte{oper % 8}).Serialize()...)
			hdr := unix.NlMsghdr{Type: msgType, Len: uint32(unix.NLMSG_HDRLEN + len(raw))}
			link, err := netlink.LinkDeserialize(&hdr, raw)
			if err != nil {
				continue // the subscription reports it and rescans
			}
			u := netlink.LinkUpdate{IfInfomsg: *nl.DeserializeIfInfomsg(raw), Header: hdr, Link: link}
			a := link.Attrs()
			got := s.changed(u)

			old := model[idx]
			now := state{name: a.Name, up: u.Flags&unix.IFF_UP != 0, lower: u.Flags&unix.IFF_LOWER_UP != 0, oper: a.OperState, known: true}
			var want []string
			switch {
			case msgType == unix.RTM_DELLINK:
				want = []string{a.Name}
				delete(model, idx)
			case !old.known:
				want = []string{a.Name}
				model[idx] = now
			case old.name != now.name:
				want = []string{old.name, now.name}
				model[idx] = now
			case old != now:
				want = []string{now.name}
				model[idx] = now
			}
			if strings.Join(got, "\x00") != strings.Join(want, "\x00") || len(got) != len(want) {
				t.Fatalf("update %d %q (%+v): changed = %q, want %q", idx, name, now, got, want)
			}
			if len(s.links) != len(model) {
				t.Fatalf("source tracks %d links, %d exist", len(s.links), len(model))
			}
		}
	})
}
