package ethtool

import (
	"bytes"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vishvananda/netlink/nl"
)

// golden reads a hex file written by testdata/capture.sh; lines starting
// with # are comments (the tunable files name the ifreq's interface there).
func golden(t *testing.T, name string) (b []byte, comments []string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var hexText strings.Builder
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "#") {
			comments = append(comments, strings.TrimSpace(strings.TrimPrefix(line, "#")))
			continue
		}
		hexText.WriteString(strings.Join(strings.Fields(line), ""))
	}
	b, err = hex.DecodeString(hexText.String())
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return b, comments
}

// masked zeroes what varies between runs: the sequence number and port
// id (bytes 8..15 of the nlmsghdr), and the padding after each u8
// attribute, which ethtool's libmnl leaves as it found it (the kernel
// ignores padding; rdmad's framing zeroes it).
func masked(b []byte) []byte {
	out := append([]byte(nil), b...)
	if len(out) < 20 {
		return out
	}
	copy(out[8:16], make([]byte, 8))
	// Walk the attributes after the nlmsghdr and genlmsghdr.
	ne := nl.NativeEndian()
	for off := 20; off+4 <= len(out); {
		l := int(ne.Uint16(out[off:]))
		if l < 4 {
			break
		}
		if l == 5 && off+8 <= len(out) {
			copy(out[off+5:off+8], []byte{0, 0, 0})
		}
		off += (l + 3) &^ 3
	}
	return out
}

func TestGoldenPauseRequestsMatchEthtool(t *testing.T) {
	for _, c := range []struct {
		file  string
		build func(family uint16) []byte
	}{
		{"pause_get_veth0.hex", func(f uint16) []byte { return PauseGetRequest(f, "veth0").Serialize() }},
		{"pause_set_veth0_rx-off_tx-off.hex", func(f uint16) []byte { return PauseSetRequest(f, "veth0", false, false).Serialize() }},
		{"pause_set_veth0_rx-on_tx-on.hex", func(f uint16) []byte { return PauseSetRequest(f, "veth0", true, true).Serialize() }},
	} {
		want, _ := golden(t, c.file)
		// The family id the capturing kernel gave ethtool is in the file.
		family := nl.NativeEndian().Uint16(want[4:6])
		got := c.build(family)
		if !bytes.Equal(masked(got), masked(want)) {
			t.Errorf("%s differs from ethtool's:\n got  % x\n want % x", c.file, masked(got), masked(want))
		}
		r, err := ParseRequest(got)
		if err != nil || r.Ifname != "veth0" || r.Type != family || r.Autoneg != nil {
			t.Errorf("%s decoded: %+v %v (autoneg must never be sent)", c.file, r, err)
		}
	}
}

func TestGoldenTunableMatchesEthtool(t *testing.T) {
	for _, c := range []struct {
		file string
		got  []byte
	}{
		{"tunable_set_veth0_100.hex", TunableRequest(true, 100)},
		{"tunable_get_veth0.hex", TunableRequest(false, 100)},
	} {
		want, comments := golden(t, c.file)
		if len(comments) != 1 || comments[0] != "ifr_name veth0" {
			t.Errorf("%s: ifreq %q", c.file, comments)
		}
		if !bytes.Equal(c.got, want) {
			t.Errorf("%s differs from ethtool's:\n got  % x\n want % x", c.file, c.got, want)
		}
	}
	// The layout the C compiler gives struct ethtool_tunable, and the
	// constants, as the codec uses them.
	layout, err := os.ReadFile(filepath.Join("testdata", "ethtool_tunable_layout.txt"))
	if err != nil {
		t.Fatal(err)
	}
	want := "sizeof=16 cmd=0 id=4 type_id=8 len=12 data=16 ETHTOOL_GTUNABLE=0x48 ETHTOOL_STUNABLE=0x49 ETHTOOL_PFC_PREVENTION_TOUT=3 ETHTOOL_TUNABLE_U16=2 SIOCETHTOOL=0x8946"
	if strings.TrimSpace(string(layout)) != want {
		t.Errorf("struct ethtool_tunable as compiled:\n %s\nthe codec assumes:\n %s", layout, want)
	}
	tu, err := ParseTunable(TunableRequest(true, 8000))
	if err != nil || !tu.Set || tu.Value != 8000 {
		t.Errorf("round trip: %+v %v", tu, err)
	}
}
