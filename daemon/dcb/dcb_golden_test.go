package dcb

import (
	"bytes"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// golden reads a hex file written by testdata/capture.sh.
func golden(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	b, err := hex.DecodeString(strings.Join(strings.Fields(string(data)), ""))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return b
}

// masked zeroes the netlink sequence number and port id (bytes 8..15 of
// the nlmsghdr): dcb draws them from the clock and the socket, rdmad from
// a counter; nothing else may differ.
func masked(b []byte) []byte {
	out := append([]byte(nil), b...)
	if len(out) >= 16 {
		copy(out[8:16], make([]byte, 8))
	}
	return out
}

func compareGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	want := golden(t, name)
	if !bytes.Equal(masked(got), masked(want)) {
		t.Errorf("%s differs from iproute2's dcb:\n got  % x\n want % x", name, masked(got), masked(want))
	}
}

func TestGoldenRequestsMatchIproute2(t *testing.T) {
	compareGolden(t, "ieee_get_veth0.hex", GetRequest("veth0").Serialize())
	compareGolden(t, "app_add_veth0_26-3.hex", AppRequest("veth0", false, []App{DSCP(26, 3)}).Serialize())
	compareGolden(t, "app_add_veth0_26-3_48-6.hex", AppRequest("veth0", false, []App{DSCP(26, 3), DSCP(48, 6)}).Serialize())
	compareGolden(t, "app_del_veth0_26-3.hex", AppRequest("veth0", true, []App{DSCP(26, 3)}).Serialize())
}

// TestPFCSetMatchesUAPIStruct checks the PFC SET against the C compiler's
// struct ieee_pfc (testdata/ieee_pfc_struct.hex, same field values) inside
// the framing dcb uses for every IEEE SET (the APP golden files): nlmsghdr
// RTM_SETDCB, dcbmsg DCB_CMD_IEEE_SET, DCB_ATTR_IFNAME, then a nested
// DCB_ATTR_IEEE holding DCB_ATTR_IEEE_PFC.
func TestPFCSetMatchesUAPIStruct(t *testing.T) {
	p := PFC{Cap: 8, Enabled: 0x18, MBC: 1, Delay: 0x1234}
	for i := 0; i < MaxPrio; i++ {
		p.Requests[i] = 0x0102030405060700 + uint64(i)
		p.Indications[i] = 0x1112131415161700 + uint64(i)
	}
	st := golden(t, "ieee_pfc_struct.hex")
	if len(st) != sizeofPFC {
		t.Fatalf("sizeof(struct ieee_pfc) = %d, codec uses %d", len(st), sizeofPFC)
	}
	if got := p.marshal(); !bytes.Equal(got, st) {
		t.Errorf("struct ieee_pfc:\n got  % x\n want % x", got, st)
	}
	// The framing: the APP SET's first 32 bytes (header, dcbmsg, ifname)
	// with the length fixed up, then DCB_ATTR_IEEE|NLA_F_NESTED around
	// DCB_ATTR_IEEE_PFC (4 + 136 bytes).
	app := golden(t, "app_add_veth0_26-3.hex")
	want := append([]byte(nil), app[:32]...)
	total := 32 + 4 + 4 + sizeofPFC
	want[0], want[1], want[2], want[3] = byte(total), byte(total>>8), 0, 0
	want = append(want, byte(4+4+sizeofPFC), 0, 0x0d, 0x80, byte(4+sizeofPFC), 0, attrIEEEPFC, 0)
	want = append(want, st...)
	got := PFCRequest("veth0", p).Serialize()
	if !bytes.Equal(masked(got), masked(want)) {
		t.Errorf("PFC SET:\n got  % x\n want % x", masked(got), masked(want))
	}
	// Round trip through the reply decoder.
	ie, err := ParseGet(EncodeGetReply("veth0", IEEE{PFC: &p}))
	if err != nil || ie.PFC == nil || *ie.PFC != p {
		t.Errorf("PFC round trip: %+v, %v", ie.PFC, err)
	}
}
