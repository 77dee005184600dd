package qos

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/config/value"
	"github.com/rdmad/rdmad/daemon/dcb"
	"github.com/rdmad/rdmad/daemon/ethtool"
	"github.com/rdmad/rdmad/daemon/reconcile"
)

// The rules a value of each setting read back from found.json passes
// before it is put back (reconcile.Setting.Valid): the netdev is a name a
// netdev can have, what a [[qos]] key declares passes the key's rule, and
// what only the driver reports (a PFC capability, an ETS algorithm rdmad
// never sets, a rate) is within what the kernel's structs hold.

// dcbTools are the commands other managers set a netdev's DCB, pause and
// ECN with: MLNX_OFED's mlnx_qos, iproute2's dcb, lldpad's lldptool.
var dcbTools = []string{"mlnx_qos", "dcb", "lldptool"}

// validAt checks the netdev every value names, then the value's own rule.
func validAt[V reconcile.Value](netdev func(V) string, rule func(V) error) func(reconcile.Value) error {
	return reconcile.ValueRule(func(v V) error {
		if err := value.NetdevName(netdev(v)); err != nil {
			return fmt.Errorf("netdev: %w", err)
		}
		if rule == nil {
			return nil
		}
		return rule(v)
	})
}

func validCap(c uint8) error {
	if c > value.PriorityCount {
		return fmt.Errorf("a capability of %d, more than the %d priorities", c, value.PriorityCount)
	}
	return nil
}

// validEach checks the value of each priority or traffic class against r.
func validEach(what string, r value.Range, m [value.PriorityCount]uint8) error {
	for i, n := range m {
		if err := r.Check(int64(n)); err != nil {
			return fmt.Errorf("%s %d: %w", what, i, err)
		}
	}
	return nil
}

func validApps(apps []dcb.App, selector uint8) error {
	if len(apps) > (value.MaxDSCP+1)*value.PriorityCount {
		return fmt.Errorf("%d APP entries", len(apps))
	}
	for _, a := range apps {
		if a.Selector != selector {
			return fmt.Errorf("an APP entry of selector %d", a.Selector)
		}
		if err := value.Priority(int(a.Priority)); err != nil {
			return err
		}
		if selector == dcb.SelDSCP {
			if err := value.DSCP(int(a.Protocol)); err != nil {
				return err
			}
		} else if err := value.UDPPortRange.Check(int64(a.Protocol)); err != nil {
			return fmt.Errorf("an APP entry's UDP port: %w", err)
		}
	}
	return nil
}

// validTSA accepts the algorithms a [[qos]] rule sets and those a driver
// reports (ETSOf names them as dcb.TSA does).
func validTSA(t config.TSA) error {
	switch s := string(t); {
	case t == config.TSAETS, t == config.TSAStrict, s == "cbs", s == "vendor":
		return nil
	case strings.HasPrefix(s, "tsa-"):
		if n, err := strconv.ParseUint(strings.TrimPrefix(s, "tsa-"), 10, 8); err == nil && strconv.FormatUint(n, 10) == strings.TrimPrefix(s, "tsa-") {
			return nil
		}
	}
	return fmt.Errorf("%q is not a transmission selection algorithm", t)
}

var (
	validPFC   = validAt(func(v PFCValue) string { return v.Netdev }, func(v PFCValue) error { return validCap(v.PFC.Cap) })
	validTrust = validAt(func(v TrustValue) string { return v.Netdev }, func(v TrustValue) error {
		if err := v.Trust.Validate(); err != nil {
			return err
		}
		return validApps(v.DSCP, dcb.SelDSCP)
	})
	validCableLength = validAt(func(v CableLengthValue) string { return v.Netdev }, func(v CableLengthValue) error {
		if err := value.CableLengthRange.Check(int64(v.Metres)); err != nil {
			return err
		}
		return validCap(v.PFC.Cap)
	})
	validPrioTC = validAt(func(v PrioTCValue) string { return v.Netdev }, func(v PrioTCValue) error {
		return validEach("the traffic class of priority", value.TrafficClassRange, v.Map)
	})
	validBandwidth = validAt(func(v BandwidthValue) string { return v.Netdev }, func(v BandwidthValue) error {
		if err := validEach("the share of traffic class", value.PercentRange, v.BW.Percent); err != nil {
			return err
		}
		for _, t := range v.BW.TSA {
			if err := validTSA(t); err != nil {
				return err
			}
		}
		return validCap(v.Cap)
	})
	validMaxrate = validAt(func(v MaxrateValue) string { return v.Netdev }, func(v MaxrateValue) error {
		for i := 0; i < len(v.Driver); i++ {
			if c := v.Driver[i]; !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') || len(v.Driver) > 55 {
				return fmt.Errorf("%q is not a driver name", v.Driver)
			}
		}
		return nil
	})
	validPrioBuffer = validAt(func(v PrioBufferValue) string { return v.Netdev }, func(v PrioBufferValue) error {
		return validEach("the buffer of priority", value.BufferRange, v.Map)
	})
	validBufferSize  = validAt(func(v BufferSizeValue) string { return v.Netdev }, nil)
	validUDPPortPrio = validAt(func(v UDPPortPrioValue) string { return v.Netdev }, func(v UDPPortPrioValue) error {
		for port, prio := range v.Map {
			if err := value.UDPPortRange.Check(int64(port)); err != nil {
				return fmt.Errorf("UDP port: %w", err)
			}
			if err := value.Priority(int(prio)); err != nil {
				return err
			}
		}
		return validApps(v.Apps, dcb.SelDgram)
	})
	validDCBX = validAt(func(v DCBXValue) string { return v.Netdev }, func(v DCBXValue) error {
		if v.Caps&^(dcb.CapHost|dcb.CapLLDManaged|dcb.CapVerCEE|dcb.CapVerIEEE|dcb.CapStatic) != 0 {
			return fmt.Errorf("DCBX mode %#02x has bits no mode has", v.Caps)
		}
		return nil
	})
	validPause        = validAt(func(v PauseValue) string { return v.Netdev }, nil)
	validStormTimeout = validAt(func(v StormTimeoutValue) string { return v.Netdev }, func(v StormTimeoutValue) error {
		if v.MS == ethtool.PFCStormAuto {
			return nil // the driver's own choice, as it reports it
		}
		return value.PFCStormTimeoutRange.Check(int64(v.MS))
	})
	validECN     = validAt(func(v ECNValue) string { return v.Netdev }, nil)
	validCNPDSCP = validAt(func(v CNPValue) string { return v.Netdev }, func(v CNPValue) error { return value.DSCP(v.Value) })
	validCNPPrio = validAt(func(v CNPValue) string { return v.Netdev }, func(v CNPValue) error { return value.Priority(v.Value) })
)
