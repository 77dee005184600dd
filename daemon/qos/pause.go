package qos

import (
	"fmt"
	"strconv"

	"github.com/rdmad/rdmad/daemon/ethtool"
)

// Global pause and the PFC storm timeout: ethtool settings of the port's
// netdev, beside its DCB.

// PauseValue is a netdev's global 802.3x pause: rx and tx are what [[qos]]
// pause declares (both on or both off); autonegotiation is shown but never
// written (mlx5 refuses it on).
type PauseValue struct {
	Netdev string
	Pause  ethtool.Pause
}

func (p PauseValue) String() string {
	switch {
	case p.Pause.RX && p.Pause.TX:
		return "on"
	case p.Pause.Off():
		return "off"
	}
	return fmt.Sprintf("rx %s tx %s", onOff(p.Pause.RX), onOff(p.Pause.TX))
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// DeclaredPause is the value pause = on declares.
func DeclaredPause(netdev string, on bool) PauseValue {
	return PauseValue{Netdev: netdev, Pause: ethtool.Pause{RX: on, TX: on}}
}

// PauseHolds compares rx and tx.
func PauseHolds(have, want PauseValue) bool {
	return have.Pause.RX == want.Pause.RX && have.Pause.TX == want.Pause.TX
}

// ReadPause reads a netdev's pause; a netdev without it (veth, virtio) is
// an error naming it.
func ReadPause(k ethtool.Kernel, netdev string) (PauseValue, error) {
	p, err := k.Pause(netdev)
	if err != nil {
		if ethtool.Unsupported(err) {
			return PauseValue{}, fmt.Errorf("%s has no global pause setting (its driver has no get_pauseparam): %w", netdev, err)
		}
		return PauseValue{}, err
	}
	return PauseValue{Netdev: netdev, Pause: p}, nil
}

// StormTimeoutValue is the PFC storm prevention timeout of a netdev.
type StormTimeoutValue struct {
	Netdev string
	MS     uint16
}

func (s StormTimeoutValue) String() string {
	switch s.MS {
	case 0:
		return "off"
	case ethtool.PFCStormAuto:
		return "auto"
	}
	return strconv.Itoa(int(s.MS)) + " ms"
}

// ReadStormTimeout reads a netdev's PFC storm timeout; a netdev without
// the tunable is an error naming it.
func ReadStormTimeout(k ethtool.Kernel, netdev string) (StormTimeoutValue, error) {
	ms, err := k.PFCStormTimeout(netdev)
	if err != nil {
		if ethtool.Unsupported(err) {
			return StormTimeoutValue{}, fmt.Errorf("%s has no PFC storm prevention (its driver has no pfc-prevention-tout tunable): %w", netdev, err)
		}
		return StormTimeoutValue{}, err
	}
	return StormTimeoutValue{Netdev: netdev, MS: ms}, nil
}
