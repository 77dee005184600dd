package dcb_test

import (
	"errors"
	"reflect"
	"syscall"
	"testing"

	"github.com/rdmad/rdmad/daemon/dcb"
	"github.com/rdmad/rdmad/daemon/dcb/dcbtest"
)

// The attributes of linux/dcbnl.h the tests build by hand.
const (
	attrIEEEETS     = 1  // DCB_ATTR_IEEE_ETS
	attrIEEEPFC     = 2  // DCB_ATTR_IEEE_PFC
	attrIEEEMaxrate = 7  // DCB_ATTR_IEEE_MAXRATE
	attrDCBBuffer   = 10 // DCB_ATTR_DCB_BUFFER
)

func TestParseGetReply(t *testing.T) {
	pfc := dcb.PFC{Cap: 8, Enabled: 1<<3 | 1<<4, Delay: 32}
	in := dcb.IEEE{PFC: &pfc, Apps: []dcb.App{dcb.DSCP(26, 3), {Selector: 1, Priority: 5, Protocol: 0x8906}, dcb.DSCP(48, 6)}, DCBX: dcb.CapHost | dcb.CapVerIEEE, HasDCBX: true}
	ie, err := dcb.ParseGet(dcbtest.EncodeGetReply("ens1f0np0", in))
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
	// A driver without dcb.PFC and an empty table.
	ie, err = dcb.ParseGet(dcbtest.EncodeGetReply("eth0", dcb.IEEE{}))
	if err != nil || ie.PFC != nil || len(ie.Apps) != 0 || ie.HasDCBX {
		t.Errorf("empty reply: %+v %v", ie, err)
	}
}

func TestParseRefusesMalformed(t *testing.T) {
	if _, err := dcb.ParseGet([]byte{0, dcb.CmdIEEEGet}); err == nil {
		t.Error("short dcbmsg accepted")
	}
	if _, err := dcb.ParseGet(dcbtest.EncodeDCBXReply(dcb.CapHost)); err == nil {
		t.Error("GDCBX reply taken for IEEE_GET")
	}
	// A PFC attribute shorter than struct ieee_pfc.
	msg := dcbtest.EncodeGetReply("x", dcb.IEEE{PFC: &dcb.PFC{}})
	bad := append([]byte(nil), msg...)
	// Find the PFC attribute header (len 140, type 2) and shorten its length.
	for i := 0; i+4 <= len(bad); i++ {
		if bad[i] == 140 && bad[i+1] == 0 && bad[i+2] == attrIEEEPFC && bad[i+3] == 0 {
			bad[i] = 12
			break
		}
	}
	if _, err := dcb.ParseGet(bad); err == nil {
		t.Error("short ieee_pfc accepted")
	}
	if _, err := dcb.ParseDCBX(dcbtest.ReplyMsg(dcb.CmdGDCBX, "")); err == nil {
		t.Error("GDCBX reply without DCB_ATTR_DCBX accepted")
	}
}

func TestSetStatusByte(t *testing.T) {
	if err := dcb.ParseSetStatus(dcbtest.EncodeSetReply(dcb.CmdIEEESet, 0), dcb.CmdIEEESet); err != nil {
		t.Errorf("status 0: %v", err)
	}
	err := dcb.ParseSetStatus(dcbtest.EncodeSetReply(dcb.CmdIEEESet, -int(syscall.EINVAL)), dcb.CmdIEEESet)
	var se *dcb.StatusError
	if !errors.As(err, &se) || se.Status != -22 || !errors.Is(err, syscall.EINVAL) {
		t.Errorf("status -EINVAL: %v", err)
	}
	if err := dcb.ParseSetStatus(dcbtest.EncodeSetReply(dcb.CmdIEEEDel, -int(syscall.EOPNOTSUPP)), dcb.CmdIEEEDel); !dcb.Unsupported(err) {
		t.Errorf("status -EOPNOTSUPP: %v", err)
	}
	if err := dcb.ParseSetStatus(dcbtest.ReplyMsg(dcb.CmdIEEESet, ""), dcb.CmdIEEESet); err == nil {
		t.Error("reply without status accepted")
	}
	if err := dcb.ParseSetStatus(dcbtest.EncodeSetReply(dcb.CmdIEEESet, 0), dcb.CmdIEEEDel); err == nil {
		t.Error("reply to another command accepted")
	}
}

func TestDCBXReply(t *testing.T) {
	caps, err := dcb.ParseDCBX(dcbtest.EncodeDCBXReply(dcb.CapLLDManaged | dcb.CapVerIEEE))
	if err != nil || caps != dcb.CapLLDManaged|dcb.CapVerIEEE {
		t.Errorf("caps %#x %v", caps, err)
	}
}

func TestBits(t *testing.T) {
	if b := dcb.Bits(0x08); !reflect.DeepEqual(b, []uint8{3}) {
		t.Errorf("Bits(0x08) = %v", b)
	}
	if b := dcb.Bits(0x81); !reflect.DeepEqual(b, []uint8{0, 7}) {
		t.Errorf("Bits(0x81) = %v", b)
	}
	if b := dcb.Bits(0); b == nil || len(b) != 0 {
		t.Errorf("Bits(0) = %#v, want an empty list", b)
	}
}

func TestParseRequestRoundTrip(t *testing.T) {
	p := dcb.PFC{Cap: 8, Enabled: 0x18}
	r, err := dcbtest.ParseRequest(dcb.PFCRequest("eth0", p).Serialize())
	if err != nil || r.Ifname != "eth0" || r.Cmd != dcb.CmdIEEESet || r.PFC == nil || *r.PFC != p {
		t.Errorf("PFC request: %+v %v", r, err)
	}
	apps := []dcb.App{dcb.DSCP(26, 3), dcb.DSCP(0, 0), dcb.DgramPort(dcb.RoCEv2Port, 3)}
	r, err = dcbtest.ParseRequest(dcb.AppRequest("eth0", true, apps...).Serialize())
	if err != nil || r.Cmd != dcb.CmdIEEEDel || !reflect.DeepEqual(r.Apps, apps) {
		t.Errorf("APP request: %+v %v", r, err)
	}
	r, err = dcbtest.ParseRequest(dcb.DCBXSetRequest("eth0", dcb.CapHost|dcb.CapVerIEEE).Serialize())
	if err != nil || r.Cmd != dcb.CmdSDCBX || !r.HasDCBX || r.DCBX != 0x09 || r.Type != 0x4f {
		t.Errorf("SDCBX request: %+v %v", r, err)
	}
}

func TestSDCBXStatus(t *testing.T) {
	if err := dcb.ParseSDCBXStatus(dcbtest.EncodeSDCBXReply(0), 9); err != nil {
		t.Errorf("status 0: %v", err)
	}
	var re *dcb.DCBXRefusedError
	if err := dcb.ParseSDCBXStatus(dcbtest.EncodeSDCBXReply(1), 1); !errors.As(err, &re) || re.Mode != 1 || re.Status != 1 {
		t.Errorf("status 1: %v", err)
	}
	if err := dcb.ParseSDCBXStatus(dcbtest.EncodeSetReply(dcb.CmdIEEESet, 0), 9); err == nil {
		t.Error("IEEE SET reply taken for SDCBX")
	}
	if err := dcb.ParseSDCBXStatus(dcbtest.ReplyMsg(dcb.CmdSDCBX, ""), 9); err == nil {
		t.Error("SDCBX reply without status accepted")
	}
}

func TestAppMaps(t *testing.T) {
	ie := dcb.IEEE{Apps: []dcb.App{dcb.DSCP(26, 3), dcb.DgramPort(dcb.RoCEv2Port, 3), dcb.DgramPort(dcb.RoCEv2Port, 5), {Selector: 1, Priority: 4, Protocol: 0x8915}}}
	if m := ie.DgramPortMap(); len(m) != 1 || m[dcb.RoCEv2Port] != 5 {
		t.Errorf("datagram map %v", m)
	}
	if m := ie.DSCPMap(); len(m) != 1 || m[26] != 3 {
		t.Errorf("DSCP map %v", m)
	}
	// DSCP is six bits: an entry for 64 or more (which a driver would
	// not take, but a hostile or broken reply may hold) is no DSCP.
	ie = dcb.IEEE{Apps: []dcb.App{dcb.DSCP(63, 7), {Selector: dcb.SelDSCP, Priority: 1, Protocol: 64}, {Selector: dcb.SelDSCP, Priority: 2, Protocol: 255}}}
	if m := ie.DSCPMap(); !reflect.DeepEqual(m, map[uint8]uint8{63: 7}) {
		t.Errorf("DSCP map of 63, 64 and 255: %v, want 63 only", m)
	}
	if s := dcb.DgramPort(4791, 3).String(); s != "dgram-port-prio 4791:3" {
		t.Errorf("String %q", s)
	}
}

// TestParseRefusesShortObjects: each dcb.IEEE object shorter than its struct
// is an error, not a partial value.
func TestParseRefusesShortObjects(t *testing.T) {
	for _, attr := range []int{attrIEEEETS, attrIEEEMaxrate, attrDCBBuffer} {
		if _, err := dcb.ParseGet(dcbtest.ReplyMsg(dcb.CmdIEEEGet, "x", dcbtest.IEEEAttr(attr, []byte{1, 2, 3}))); err == nil {
			t.Errorf("attribute %d of 3 bytes accepted", attr)
		}
	}
}

// FuzzParseGet: no reply, however malformed, panics the decoder.
func FuzzParseGet(f *testing.F) {
	pfc := dcb.PFC{Enabled: 8}
	f.Add(dcbtest.EncodeGetReply("eth0", dcb.IEEE{PFC: &pfc, Apps: []dcb.App{dcb.DSCP(26, 3)}, HasDCBX: true}))
	f.Add(dcbtest.EncodeDCBXReply(1))
	f.Add(dcbtest.EncodeSetReply(dcb.CmdIEEESet, -22))
	f.Add(dcbtest.EncodeGetReply("eth0", dcb.IEEE{ETS: &dcb.ETS{Cap: 8}, Maxrate: &dcb.Maxrate{}, Buffer: &dcb.Buffer{}, Apps: []dcb.App{dcb.DgramPort(dcb.RoCEv2Port, 3)}}))
	f.Add(dcbtest.EncodeSDCBXReply(1))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = dcb.ParseGet(b)
		_, _ = dcb.ParseDCBX(b)
		_ = dcb.ParseSetStatus(b, dcb.CmdIEEESet)
		_ = dcb.ParseSDCBXStatus(b, 9)
	})
}

// TestParseBoundaries: a reply that is exactly a dcbmsg is a reply (with
// no attributes), and an empty attribute at the end of a list is an
// attribute, not the end of the list (daemon/nlattr's test holds the
// attribute decoder to the same).
func TestParseBoundaries(t *testing.T) {
	if _, err := dcb.ParseGet([]byte{0, dcb.CmdIEEEGet, 0, 0}); err != nil {
		t.Errorf("a reply of exactly a dcbmsg: %v", err)
	}
	// DCB_ATTR_IEEE with an empty APP table as its last attribute, then an
	// empty DCB_ATTR_DCBX: both read, the mode 0.
	ie, err := dcb.ParseGet([]byte{0, dcb.CmdIEEEGet, 0, 0, 8, 0, 0x0d, 0x80, 4, 0, 0x03, 0x80, 5, 0, 0x0e, 0, 3, 0, 0, 0})
	if err != nil || !ie.HasDCBX || ie.DCBX != 3 || ie.Apps != nil {
		t.Errorf("an empty last attribute: %+v, %v", ie, err)
	}
}
