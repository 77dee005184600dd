package events

import (
	"errors"
	"strings"
	"sync"
	"testing"
)

// recorder is a Requester that remembers what was asked.
type recorder struct {
	mu   sync.Mutex
	reqs []string
}

func (r *recorder) RequestAll() { r.add("*") }

func (r *recorder) RequestDevice(name string) { r.add("device:" + name) }

func (r *recorder) RequestNetdev(name string) { r.add("netdev:" + name) }

func (r *recorder) RecheckNetdev(name string) { r.add("recheck:" + name) }

func (r *recorder) add(s string) {
	r.mu.Lock()
	r.reqs = append(r.reqs, s)
	r.mu.Unlock()
}

func (r *recorder) got() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.reqs, " ")
}

// uevent renders a kernel uevent datagram.
func uevent(action, devpath string, env ...string) []byte {
	s := action + "@" + devpath + "\x00ACTION=" + action + "\x00DEVPATH=" + devpath + "\x00"
	for _, e := range env {
		s += e + "\x00"
	}
	return []byte(s)
}

const ibPath = "/devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0/infiniband/"

func TestParseUevent(t *testing.T) {
	u, err := ParseUevent(uevent("add", ibPath+"mlx5_0", "SUBSYSTEM=infiniband", "NAME=mlx5_0", "SEQNUM=4711"))
	if err != nil {
		t.Fatal(err)
	}
	if u.Action != "add" || u.Subsystem != "infiniband" || u.Env["NAME"] != "mlx5_0" || u.DevPath != ibPath+"mlx5_0" || u.Env["SEQNUM"] != "4711" {
		t.Errorf("parsed %+v", u)
	}

	// A value may itself contain '='.
	u, err = ParseUevent(uevent("change", "/devices/virtual/net/eth1", "SUBSYSTEM=net", "X=a=b"))
	if err != nil || u.Env["X"] != "a=b" {
		t.Errorf("X = %q, %v", u.Env["X"], err)
	}

	for name, raw := range map[string][]byte{
		"libudev":   append([]byte("libudev\x00\xfe\xed\xca\xfe"), make([]byte, 32)...),
		"empty":     nil,
		"no at":     []byte("ACTION=add\x00SUBSYSTEM=net\x00"),
		"no action": []byte("@/devices/x\x00"),
		"no path":   []byte("add@\x00"),
	} {
		if _, err := ParseUevent(raw); !errors.Is(err, ErrNotKernelUevent) {
			t.Errorf("%s: err = %v, want ErrNotKernelUevent", name, err)
		}
	}
}

func TestRouteUevent(t *testing.T) {
	cases := []struct {
		name string
		msg  []byte
		want string
	}{
		{"ib add", uevent("add", ibPath+"mlx5_0", "SUBSYSTEM=infiniband", "NAME=mlx5_0"), "device:mlx5_0"},
		{"ib remove", uevent("remove", ibPath+"mlx5_0", "SUBSYSTEM=infiniband", "NAME=mlx5_0"), "device:mlx5_0"},
		{"ib add without NAME uses devpath", uevent("add", "/devices/virtual/infiniband/rxe0", "SUBSYSTEM=infiniband"), "device:rxe0"},
		{"ib rename", uevent("move", ibPath+"ib0", "SUBSYSTEM=infiniband", "NAME=ib0", "DEVPATH_OLD="+ibPath+"mlx5_0"), "device:ib0 device:mlx5_0"},
		{"ib bogus name rescans", uevent("add", ibPath+"..", "SUBSYSTEM=infiniband", "NAME=.."), "*"},
		{"ib change ignored", uevent("change", ibPath+"mlx5_0", "SUBSYSTEM=infiniband", "NAME=mlx5_0"), ""},
		{"net add", uevent("add", "/devices/virtual/net/veth0", "SUBSYSTEM=net", "INTERFACE=veth0", "IFINDEX=7"), "netdev:veth0"},
		{"net remove", uevent("remove", "/devices/virtual/net/veth0", "SUBSYSTEM=net", "INTERFACE=veth0"), "netdev:veth0"},
		{"net rename", uevent("move", "/devices/virtual/net/eth1", "SUBSYSTEM=net", "INTERFACE=eth1", "DEVPATH_OLD=/devices/virtual/net/veth0"), "netdev:eth1 netdev:veth0"},
		{"verbs char device ignored", uevent("add", "/devices/virtual/infiniband_verbs/uverbs0", "SUBSYSTEM=infiniband_verbs"), ""},
		{"other subsystem ignored", uevent("add", "/devices/virtual/block/loop0", "SUBSYSTEM=block"), ""},
	}
	for _, c := range cases {
		u, err := ParseUevent(c.msg)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		r := &recorder{}
		asked := RouteUevent(u, r)
		if got := r.got(); got != c.want || asked != (c.want != "") {
			t.Errorf("%s: requests %q (asked %v), want %q", c.name, got, asked, c.want)
		}
	}
}

func BenchmarkParseAndRouteUevent(b *testing.B) {
	msg := uevent("add", ibPath+"mlx5_0", "SUBSYSTEM=infiniband", "NAME=mlx5_0", "SEQNUM=4711", "MAJOR=231", "MINOR=64")
	var r nopRequester
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		u, err := ParseUevent(msg)
		if err != nil {
			b.Fatal(err)
		}
		RouteUevent(u, r)
	}
}

type nopRequester struct{}

func (nopRequester) RequestAll()          {}
func (nopRequester) RequestDevice(string) {}
func (nopRequester) RequestNetdev(string) {}
