package qos

import (
	"fmt"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/dcb"
	"github.com/rdmad/rdmad/daemon/host"
)

// ECN (DCQCN) per priority and the marking of the CNPs a port sends,
// through the sysfs MLNX_OFED / DOCA-OFED's mlx5 driver adds. Upstream
// kernels keep these in firmware: the persistent route is the firmware
// parameters, which rdmad does not write.

// ECNValue is the priorities of a netdev with ECNValue reaction and notification
// both on.
type ECNValue struct {
	Netdev string
	On     uint8 // bit N: priority N has both on
	// RP and NP are each point's priorities as read (what undo puts back).
	RP, NP uint8
}

func (e ECNValue) String() string { return FormatPrios(dcb.Bits(e.On)) }

// ECNHolds: both points hold exactly the declared priorities.
func ECNHolds(have, want ECNValue) bool { return have.RP == want.On && have.NP == want.On }

// DeclaredECN is what ecn = prios declares.
func DeclaredECN(netdev string, prios []uint8) ECNValue {
	m := config.PrioMask(prios)
	return ECNValue{Netdev: netdev, On: m, RP: m, NP: m}
}

// UpstreamECN is why ECN settings do not apply to a netdev without the
// OFED files, and the persistent route.
func UpstreamECN(netdev, driver string, port int) error {
	return fmt.Errorf("%s (%s) has no per-priority ECNValue enable in sysfs (MLNX_OFED/DOCA-OFED drivers add it; upstream keeps ECNValue in firmware): set it persistently with mlxconfig -d <device> set ROCE_CC_PRIO_MASK_P%d=<mask> CNP_DSCP_P%d=<dscp> CNP_802P_PRIO_P%d=<prio> and a firmware reset", netdev, driver, port, port, port)
}

// ReadECN reads the ECN of a netdev; a netdev without the OFED files is
// an error saying so (the setting does not apply there).
func ReadECN(h *host.Host, netdev string) (ECNValue, OFEDECN, error) {
	e, err := readOFEDECN(h, netdev)
	if err != nil {
		return ECNValue{}, e, err
	}
	if !e.Present {
		return ECNValue{}, e, errNoOFED
	}
	if e.Unread != 0 {
		return ECNValue{}, e, fmt.Errorf("%s: the driver gave no ECNValue state for priorities %s (its firmware query failed)", netdev, FormatPrios(dcb.Bits(e.Unread)))
	}
	return ECNValue{Netdev: netdev, On: e.On(), RP: e.RP, NP: e.NP}, e, nil
}

var errNoOFED = fmt.Errorf("no OFED ECNValue files")

// WriteECN sets each point's priorities to want's, writing only the
// files that differ.
func WriteECN(h *host.Host, netdev string, have, want ECNValue) error {
	for p := 0; p < 8; p++ {
		bit := uint8(1) << p
		for _, pt := range []struct {
			name       string
			have, want uint8
		}{{ecnReaction, have.RP, want.RP}, {ecnNotification, have.NP, want.NP}} {
			if pt.have&bit == pt.want&bit {
				continue
			}
			if err := writeECNEnable(h, netdev, pt.name, p, pt.want&bit != 0); err != nil {
				return fmt.Errorf("ecn %s priority %d of %s: %w", pt.name, p, netdev, err)
			}
		}
	}
	return nil
}

// CNPValue is the DSCP or the 802.1p priority of the CNPs a netdev sends.
type CNPValue struct {
	Netdev string
	Value  int
}

func (c CNPValue) String() string { return fmt.Sprint(c.Value) }
