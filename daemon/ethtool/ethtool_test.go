package ethtool

import (
	"errors"
	"syscall"
	"testing"

	"github.com/vishvananda/netlink/nl"
)

func TestParsePauseReplyAndNotification(t *testing.T) {
	for _, cmd := range []uint8{CmdPauseGetReply, CmdPauseNtf} {
		in := Pause{Autoneg: false, RX: true, TX: false}
		m, err := ParsePause(EncodePause(cmd, 7, "ens1f0np0", in))
		if err != nil || m.Cmd != cmd || m.Ifindex != 7 || m.Ifname != "ens1f0np0" || m.Pause != in {
			t.Errorf("cmd %d: %+v %v", cmd, m, err)
		}
		n, err := ParseNotification(EncodePause(cmd, 7, "ens1f0np0", in))
		if err != nil || n.Ifname != "ens1f0np0" || n.Ifindex != 7 || n.Pause() != (cmd == CmdPauseNtf) {
			t.Errorf("notification %d: %+v %v", cmd, n, err)
		}
	}
	if _, err := ParsePause(EncodePause(13, 1, "x", Pause{})); err == nil {
		t.Error("a features notification taken for pause")
	}
	if _, err := ParsePause([]byte{CmdPauseNtf, 1}); err == nil {
		t.Error("short message accepted")
	}
	// A header without a name.
	b := genlmsg{CmdPauseNtf, Version, 0, 0}.Serialize()
	b = append(b, nl.NewRtAttr(attrPauseRX, []byte{1}).Serialize()...)
	if _, err := ParsePause(b); err == nil {
		t.Error("pause message without a netdev accepted")
	}
	if p := (Pause{RX: true}); p.Off() || p.String() != "autoneg off rx on tx off" {
		t.Errorf("Pause %v off=%v", p, p.Off())
	}
}

func TestParseTunableRefusesOthers(t *testing.T) {
	b := TunableRequest(true, 100)
	nl.NativeEndian().PutUint32(b[4:], 1) // ETHTOOL_RX_COPYBREAK
	if _, err := ParseTunable(b); err == nil {
		t.Error("another tunable accepted")
	}
	if _, err := ParseTunable(b[:10]); err == nil {
		t.Error("short buffer accepted")
	}
	if _, err := TunableValue(b[:10]); err == nil {
		t.Error("short GTUNABLE buffer accepted")
	}
}

func TestNetlinkThroughSeams(t *testing.T) {
	var sent [][]byte
	k := Netlink{
		Family: func() (uint16, error) { return 0x15, nil },
		Transport: func(req *nl.NetlinkRequest, resType uint16) ([][]byte, error) {
			sent = append(sent, req.Serialize())
			if resType != 0x15 {
				t.Errorf("reply type %#x, want the family", resType)
			}
			r, _ := ParseRequest(req.Serialize())
			switch {
			case r.Ifname == "veth0":
				return nil, syscall.EOPNOTSUPP
			case r.Cmd == CmdPauseGet:
				return [][]byte{EncodePause(CmdPauseGetReply, 3, r.Ifname, Pause{RX: true, TX: true})}, nil
			}
			return nil, nil
		},
		Ioctl: func(ifname string, data []byte) error {
			if ifname == "veth0" {
				return syscall.EOPNOTSUPP
			}
			tu, err := ParseTunable(data)
			if err != nil {
				return syscall.EINVAL
			}
			if !tu.Set {
				nl.NativeEndian().PutUint16(data[16:], 100)
			}
			return nil
		},
	}
	if p, err := k.Pause("ens1f0np0"); err != nil || !p.RX || !p.TX {
		t.Errorf("pause %+v %v", p, err)
	}
	if err := k.SetPause("ens1f0np0", false, false); err != nil {
		t.Error(err)
	}
	if ms, err := k.PFCStormTimeout("ens1f0np0"); err != nil || ms != 100 {
		t.Errorf("timeout %d %v", ms, err)
	}
	if err := k.SetPFCStormTimeout("ens1f0np0", 200); err != nil {
		t.Error(err)
	}
	for _, err := range []error{
		func() error { _, err := k.Pause("veth0"); return err }(),
		k.SetPause("veth0", false, false),
		func() error { _, err := k.PFCStormTimeout("veth0"); return err }(),
		k.SetPFCStormTimeout("veth0", 100),
	} {
		if !Unsupported(err) {
			t.Errorf("veth0: %v, want unsupported", err)
		}
	}
	if err := k.SetPFCStormTimeout("a-name-longer-than-ifnamsiz", 100); err == nil {
		t.Error("a name longer than IFNAMSIZ reached the ioctl")
	}
	if len(sent) != 4 {
		t.Errorf("%d requests sent", len(sent))
	}
	noFamily := Netlink{Family: func() (uint16, error) { return 0, ErrNoFamily }}
	if _, err := noFamily.Pause("eth0"); !Unsupported(err) || !errors.Is(err, ErrNoFamily) {
		t.Errorf("no family: %v", err)
	}
}

// FuzzParse: no message, however malformed, panics the decoders.
func FuzzParse(f *testing.F) {
	f.Add(EncodePause(CmdPauseNtf, 1, "eth0", Pause{RX: true}))
	f.Add(PauseSetRequest(0x15, "eth0", false, false).Serialize())
	f.Add(TunableRequest(true, 100))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = ParsePause(b)
		_, _ = ParseNotification(b)
		_, _ = ParseRequest(b)
		_, _ = ParseTunable(b)
	})
}
