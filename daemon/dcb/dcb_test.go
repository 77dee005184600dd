package dcb

import (
	"errors"
	"reflect"
	"syscall"
	"testing"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

func TestParseGetReply(t *testing.T) {
	pfc := PFC{Cap: 8, Enabled: Mask([]uint8{3, 4}), Delay: 32}
	in := IEEE{PFC: &pfc, Apps: []App{DSCP(26, 3), {Selector: 1, Priority: 5, Protocol: 0x8906}, DSCP(48, 6)}, DCBX: CapHost | CapVerIEEE, HasDCBX: true}
	ie, err := ParseGet(EncodeGetReply("ens1f0np0", in))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(ie, in) {
		t.Fatalf("got %+v\nwant %+v", ie, in)
	}
	if got := ie.PFC.Priorities(); !reflect.DeepEqual(got, []uint8{3, 4}) {
		t.Errorf("priorities %v", got)
	}
	if m := ie.DSCPMap(); len(m) != 2 || m[26] != 3 || m[48] != 6 {
		t.Errorf("DSCP map %v", m)
	}
	// A driver without PFC and an empty table.
	ie, err = ParseGet(EncodeGetReply("eth0", IEEE{}))
	if err != nil || ie.PFC != nil || len(ie.Apps) != 0 || ie.HasDCBX {
		t.Errorf("empty reply: %+v %v", ie, err)
	}
}

func TestParseRefusesMalformed(t *testing.T) {
	if _, err := ParseGet([]byte{0, CmdIEEEGet}); err == nil {
		t.Error("short dcbmsg accepted")
	}
	if _, err := ParseGet(EncodeDCBXReply(CapHost)); err == nil {
		t.Error("GDCBX reply taken for IEEE_GET")
	}
	// A PFC attribute shorter than struct ieee_pfc.
	msg := EncodeGetReply("x", IEEE{PFC: &PFC{}})
	bad := append([]byte(nil), msg...)
	// Find the PFC attribute header (len 140, type 2) and shorten its length.
	for i := 0; i+4 <= len(bad); i++ {
		if bad[i] == 140 && bad[i+1] == 0 && bad[i+2] == attrIEEEPFC && bad[i+3] == 0 {
			bad[i] = 12
			break
		}
	}
	if _, err := ParseGet(bad); err == nil {
		t.Error("short ieee_pfc accepted")
	}
	if _, err := ParseDCBX(replyMsg(CmdGDCBX, "")); err == nil {
		t.Error("GDCBX reply without DCB_ATTR_DCBX accepted")
	}
}

func TestSetStatusByte(t *testing.T) {
	if err := ParseSetStatus(EncodeSetReply(CmdIEEESet, 0), CmdIEEESet); err != nil {
		t.Errorf("status 0: %v", err)
	}
	err := ParseSetStatus(EncodeSetReply(CmdIEEESet, -int(syscall.EINVAL)), CmdIEEESet)
	var se *StatusError
	if !errors.As(err, &se) || se.Status != -22 || !errors.Is(err, syscall.EINVAL) {
		t.Errorf("status -EINVAL: %v", err)
	}
	if err := ParseSetStatus(EncodeSetReply(CmdIEEEDel, -int(syscall.EOPNOTSUPP)), CmdIEEEDel); !Unsupported(err) {
		t.Errorf("status -EOPNOTSUPP: %v", err)
	}
	if err := ParseSetStatus(replyMsg(CmdIEEESet, ""), CmdIEEESet); err == nil {
		t.Error("reply without status accepted")
	}
	if err := ParseSetStatus(EncodeSetReply(CmdIEEESet, 0), CmdIEEEDel); err == nil {
		t.Error("reply to another command accepted")
	}
}

func TestDCBXReply(t *testing.T) {
	caps, err := ParseDCBX(EncodeDCBXReply(CapLLDManaged | CapVerIEEE))
	if err != nil || caps != CapLLDManaged|CapVerIEEE {
		t.Errorf("caps %#x %v", caps, err)
	}
}

func TestMaskBits(t *testing.T) {
	if m := Mask([]uint8{3}); m != 0x08 {
		t.Errorf("Mask([3]) = %#x", m)
	}
	if b := Bits(0x81); !reflect.DeepEqual(b, []uint8{0, 7}) {
		t.Errorf("Bits(0x81) = %v", b)
	}
	if b := Bits(0); b == nil || len(b) != 0 {
		t.Errorf("Bits(0) = %#v, want an empty list", b)
	}
}

func TestParseRequestRoundTrip(t *testing.T) {
	p := PFC{Cap: 8, Enabled: 0x18}
	r, err := ParseRequest(PFCRequest("eth0", p).Serialize())
	if err != nil || r.Ifname != "eth0" || r.Cmd != CmdIEEESet || r.PFC == nil || *r.PFC != p {
		t.Errorf("PFC request: %+v %v", r, err)
	}
	apps := []App{DSCP(26, 3), DSCP(0, 0), DgramPort(RoCEv2Port, 3)}
	r, err = ParseRequest(AppRequest("eth0", true, apps...).Serialize())
	if err != nil || r.Cmd != CmdIEEEDel || !reflect.DeepEqual(r.Apps, apps) {
		t.Errorf("APP request: %+v %v", r, err)
	}
	r, err = ParseRequest(DCBXSetRequest("eth0", CapHost|CapVerIEEE).Serialize())
	if err != nil || r.Cmd != CmdSDCBX || !r.HasDCBX || r.DCBX != 0x09 || r.Type != 0x4f {
		t.Errorf("SDCBX request: %+v %v", r, err)
	}
}

func TestSDCBXStatus(t *testing.T) {
	if err := ParseSDCBXStatus(EncodeSDCBXReply(0), 9); err != nil {
		t.Errorf("status 0: %v", err)
	}
	var re *DCBXRefusedError
	if err := ParseSDCBXStatus(EncodeSDCBXReply(1), 1); !errors.As(err, &re) || re.Mode != 1 || re.Status != 1 {
		t.Errorf("status 1: %v", err)
	}
	if err := ParseSDCBXStatus(EncodeSetReply(CmdIEEESet, 0), 9); err == nil {
		t.Error("IEEE SET reply taken for SDCBX")
	}
	if err := ParseSDCBXStatus(replyMsg(CmdSDCBX, ""), 9); err == nil {
		t.Error("SDCBX reply without status accepted")
	}
}

func TestAppMaps(t *testing.T) {
	ie := IEEE{Apps: []App{DSCP(26, 3), DgramPort(RoCEv2Port, 3), DgramPort(RoCEv2Port, 5), {Selector: 1, Priority: 4, Protocol: 0x8915}}}
	if m := ie.DgramPortMap(); len(m) != 1 || m[RoCEv2Port] != 5 {
		t.Errorf("datagram map %v", m)
	}
	if m := ie.DSCPMap(); len(m) != 1 || m[26] != 3 {
		t.Errorf("DSCP map %v", m)
	}
	if s := DgramPort(4791, 3).String(); s != "dgram-port-prio 4791:3" {
		t.Errorf("String %q", s)
	}
}

// TestParseRefusesShortObjects: each IEEE object shorter than its struct
// is an error, not a partial value.
func TestParseRefusesShortObjects(t *testing.T) {
	for _, attr := range []int{attrIEEEETS, attrIEEEMaxrate, attrDCBBuffer} {
		ieee := nl.NewRtAttr(unix.NLA_F_NESTED|attrIEEE, nil)
		ieee.AddRtAttr(attr, []byte{1, 2, 3})
		if _, err := ParseGet(replyMsg(CmdIEEEGet, "x", ieee)); err == nil {
			t.Errorf("attribute %d of 3 bytes accepted", attr)
		}
	}
}

// FuzzParseGet: no reply, however malformed, panics the decoder.
func FuzzParseGet(f *testing.F) {
	pfc := PFC{Enabled: 8}
	f.Add(EncodeGetReply("eth0", IEEE{PFC: &pfc, Apps: []App{DSCP(26, 3)}, HasDCBX: true}))
	f.Add(EncodeDCBXReply(1))
	f.Add(EncodeSetReply(CmdIEEESet, -22))
	f.Add(EncodeGetReply("eth0", IEEE{ETS: &ETS{Cap: 8}, Maxrate: &Maxrate{}, Buffer: &Buffer{}, Apps: []App{DgramPort(RoCEv2Port, 3)}}))
	f.Add(EncodeSDCBXReply(1))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = ParseGet(b)
		_, _ = ParseDCBX(b)
		_ = ParseSetStatus(b, CmdIEEESet)
		_ = ParseSDCBXStatus(b, 9)
	})
}
