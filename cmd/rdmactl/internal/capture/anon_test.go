package capture

import (
	"strings"
	"testing"
)

// Each identifier gets one replacement whatever its form, and what is not
// an identifier (a PCI address, a firmware version, a kernel release)
// stays as it is.
func TestAnonymiserReplacesEachIdentifierOnce(t *testing.T) {
	a := newAnonymiser([]string{"node7.cluster.example.com"})
	cases := []struct{ in, want string }{
		// A netdev's MAC, its EUI-64 link-local GID, a netdev named
		// after it.
		{"b8:59:9f:d4:2e:70\n", "02:00:00:00:00:01\n"},
		{"fe80:0000:0000:0000:ba59:9fff:fed4:2e70", "fe80:0000:0000:0000:0000:00ff:fe00:0001"},
		{"B8:59:9F:D4:2E:70", "02:00:00:00:00:01"},
		{"enxb8599fd42e70", "enx020000000001"},
		// An IPv4 address, in text and in a RoCE v2 GID (sysfs's form
		// and IPv6's).
		{"addr 10.20.1.1/24", "addr 198.18.0.1/24"},
		{"0000:0000:0000:0000:0000:ffff:0a14:0101", "0000:0000:0000:0000:0000:ffff:c612:0001"},
		{"::ffff:10.20.1.1", "::ffff:198.18.0.1"},
		// An IPv6 address: its prefix and its interface ID (the MAC's).
		{"fd12:3456:789a:0001:ba59:9fff:fed4:2e70", "2001:0db8:0000:0001:0000:00ff:fe00:0001"},
		{"fd12:3456:789a:1:ba59:9fff:fed4:2e70", "2001:db8:0:1:0:ff:fe00:1"},
		{"fd12:3456:789a:1::5", "2001:db8:0:1:200::1"}, // the interface ID 0:0:0:5 is the first GUID met
		// A GUID as node_guid and ibstat write it, and in an
		// InfiniBand GID of a site's subnet prefix.
		{"0002:c903:0031:7e50", "0200:0000:0000:0002"},
		{"guid = \"0x0002C90300317E50\"", "guid = \"0x0200000000000002\""},
		{"fec0:0000:0000:0001:0002:c903:0031:7e50", "2001:0db8:0000:0002:0200:0000:0000:0002"},
		// IPoIB's hardware address: flags and QPN, then the port's GID.
		{"80:00:02:08:fe:80:00:00:00:00:00:00:00:02:c9:03:00:31:7e:50", "80:00:02:08:fe:80:00:00:00:00:00:00:02:00:00:00:00:00:00:02"},
		// The host's names, where they stand as names.
		{"node7 mlx5_0", "captured-host mlx5_0"},
		{"NODE7.cluster.example.com", "captured-host.example.org"},
		{"node77 node7-a xnode7 node7_b", "node77 node7-a xnode7 node7_b"},
		// Not identifiers.
		{"0000:3b:00.0", "0000:3b:00.0"},
		{"16.35.2000", "16.35.2000"},
		{"6.1.0-28-amd64", "6.1.0-28-amd64"},
		{"v1.2.3.4 1.2.3.4.5", "v1.2.3.4 1.2.3.4.5"},
		{"MT_0000000080 0x2651e848", "MT_0000000080 0x2651e848"},
		{"127.0.0.1 0.0.0.0 255.255.255.0 224.0.0.1", "127.0.0.1 0.0.0.0 255.255.255.0 224.0.0.1"},
		{"0000:0000:0000:0000:0000:0000:0000:0000", "0000:0000:0000:0000:0000:0000:0000:0000"},
		{"00:00:00:00:00:00 ff:ff:ff:ff:ff:ff", "00:00:00:00:00:00 ff:ff:ff:ff:ff:ff"},
		{"aa:bb:cc:dd:ee:ff:11", "aa:bb:cc:dd:ee:ff:11"}, // 7 groups: no MAC
		{"std::string ::1 ::", "std::string ::1 ::"},
		{"12:34:56", "12:34:56"},
	}
	for _, c := range cases {
		if got := a.Text(c.in); got != c.want {
			t.Errorf("%q: got %q, want %q", c.in, got, c.want)
		}
	}
	// The map names each identifier once.
	kinds := map[string]int{}
	for _, r := range a.Map() {
		kinds[r.Kind]++
	}
	want := map[string]int{KindMAC: 1, KindIPv4: 1, KindPrefix: 2, KindGUID: 2, KindHostname: 2}
	for k, n := range want {
		if kinds[k] != n {
			t.Errorf("map has %d of kind %s, want %d: %v", kinds[k], k, n, a.Map())
		}
	}
}

func TestAnonymiserSerials(t *testing.T) {
	a := newAnonymiser(nil)
	if got := a.serial("0x0066bd70\n"); got != "SERIAL000001" {
		t.Errorf("serial = %q", got)
	}
	if got := a.serial("0x0066bd70"); got != "SERIAL000001" {
		t.Errorf("the same serial again = %q", got)
	}
	if got := a.serial("MT1234X5678"); got != "SERIAL000002" {
		t.Errorf("another serial = %q", got)
	}
}

// Names that are words of the files are not the host's to replace.
func TestAnonymiserLeavesNamesThatAreNotHosts(t *testing.T) {
	a := newAnonymiser([]string{"localhost", "ab", ""})
	in := "localhost ab rdma"
	if got := a.Text(in); got != in {
		t.Errorf("%q became %q", in, got)
	}
	if len(a.Map()) != 0 {
		t.Errorf("map: %v", a.Map())
	}
	if !strings.Contains(hostnameReplacement, "host") {
		t.Error("the replacement names no host")
	}
}
