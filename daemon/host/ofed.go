package host

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"
)

// The sysfs that MLNX_OFED / DOCA-OFED's mlx5 driver adds and upstream
// kernels do not have (upstream keeps per-priority ECN in firmware
// parameters and debugfs only). Read and written here so the qos and roce
// parts see typed values.

// ECN is what the OFED driver's ecn directory of a netdev says about
// ECN/DCQCN: which priorities react to congestion notifications (roce_rp,
// the reaction point) and send them (roce_np, the notification point), and
// how the CNPs it sends are marked.
type ECN struct {
	// Present: the netdev has ecn/roce_rp and ecn/roce_np (OFED's driver).
	Present bool
	// RP and NP have bit N set when priority N is enabled; Unread has bit
	// N set when either file of priority N gave no value (the driver
	// prints nothing when its firmware query fails).
	RP, NP, Unread uint8
	// CNPDSCP and CNPPrio are the DSCP and 802.1p priority of the CNPs the
	// port sends; -1 when the file is absent or gave no value.
	CNPDSCP, CNPPrio int
}

// On is the priorities with both reaction and notification on.
func (e ECN) On() uint8 { return e.RP & e.NP }

// ecnPath is sys/class/net/<netdev>/ecn/<elem...>.
func ecnPath(netdev string, elem ...string) string {
	return path.Join(append([]string{ClassNet, netdev, "ecn"}, elem...)...)
}

// ECNWatch are the directories (relative to the host root) of netdev's
// OFED ECN files: a write to one of them is an event there.
func ECNWatch(netdev string) []string {
	return []string{ecnPath(netdev, ECNReaction, "enable"), ecnPath(netdev, ECNNotification, "enable"), ecnPath(netdev, ECNNotification)}
}

// ECN point names: the reaction point (roce_rp) and the notification
// point (roce_np).
const (
	ECNReaction     = "roce_rp"
	ECNNotification = "roce_np"
)

// ReadECN reads the OFED ECN files of netdev. A netdev without them is
// ECN{Present: false} and no error; a file that holds something other than
// a number is an error naming it.
func (h *Host) ReadECN(netdev string) (ECN, error) {
	e := ECN{CNPDSCP: -1, CNPPrio: -1}
	if !h.Exists(ecnPath(netdev, ECNReaction, "enable")) || !h.Exists(ecnPath(netdev, ECNNotification, "enable")) {
		return e, nil
	}
	e.Present = true
	for p := 0; p < 8; p++ {
		bit := uint8(1) << p
		for _, point := range []struct {
			name string
			mask *uint8
		}{{ECNReaction, &e.RP}, {ECNNotification, &e.NP}} {
			v, ok, err := h.readSmallInt(ecnPath(netdev, point.name, "enable", strconv.Itoa(p)), 0, 1)
			switch {
			case err != nil:
				return e, err
			case !ok:
				e.Unread |= bit
			case v == 1:
				*point.mask |= bit
			}
		}
	}
	var err error
	if e.CNPDSCP, err = h.readOptionalInt(ecnPath(netdev, ECNNotification, "cnp_dscp"), 0, 63); err != nil {
		return e, err
	}
	if e.CNPPrio, err = h.readOptionalInt(ecnPath(netdev, ECNNotification, "cnp_802p_prio"), 0, 7); err != nil {
		return e, err
	}
	return e, nil
}

// readOptionalInt is readSmallInt with -1 for an absent or empty file.
func (h *Host) readOptionalInt(rel string, lo, hi int) (int, error) {
	v, ok, err := h.readSmallInt(rel, lo, hi)
	if err != nil || !ok {
		return -1, err
	}
	return v, nil
}

// readSmallInt reads a "%d\n" attribute in lo..hi. ok is false for an
// absent or empty file; anything else that is not such a number is an
// error naming the file.
func (h *Host) readSmallInt(rel string, lo, hi int) (v int, ok bool, err error) {
	s, err := h.ReadString(rel)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, false, nil
	}
	v, err = strconv.Atoi(s)
	if err != nil || v < lo || v > hi {
		return 0, false, fmt.Errorf("%s: %q is not a number in %d..%d", rel, truncate(s, 32), lo, hi)
	}
	return v, true, nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// WriteECNEnable turns ECN at point (ECNReaction or ECNNotification) of
// priority prio on or off.
func (h *Host) WriteECNEnable(netdev, point string, prio int, on bool) error {
	if point != ECNReaction && point != ECNNotification || prio < 0 || prio > 7 {
		return fmt.Errorf("ecn %s priority %d: no such file", point, prio)
	}
	v := "0"
	if on {
		v = "1"
	}
	return h.WriteString(ecnPath(netdev, point, "enable", strconv.Itoa(prio)), v)
}

// WriteCNPDSCP sets the DSCP of the CNPs netdev sends (0..63).
func (h *Host) WriteCNPDSCP(netdev string, dscp int) error {
	if dscp < 0 || dscp > 63 {
		return fmt.Errorf("CNP DSCP %d is not 0..63", dscp)
	}
	return h.WriteString(ecnPath(netdev, ECNNotification, "cnp_dscp"), strconv.Itoa(dscp))
}

// WriteCNPPrio sets the 802.1p priority of the CNPs netdev sends (0..7).
func (h *Host) WriteCNPPrio(netdev string, prio int) error {
	if prio < 0 || prio > 7 {
		return fmt.Errorf("CNP priority %d is not 0..7", prio)
	}
	return h.WriteString(ecnPath(netdev, ECNNotification, "cnp_802p_prio"), strconv.Itoa(prio))
}

// TrafficClass is OFED's global traffic class of an RDMA port
// (infiniband/<dev>/tc/<port>/traffic_class): when set, the driver gives
// every QP of the port that class, running ones and those that chose
// their own.
type TrafficClass struct {
	Present bool  // the file exists (OFED's mlx5_ib)
	Set     bool  // a global class is set ("Global tclass=N")
	Value   uint8 // the class when Set
}

func (t TrafficClass) String() string {
	switch {
	case !t.Present:
		return "absent"
	case !t.Set:
		return "unset"
	}
	return strconv.Itoa(int(t.Value))
}

// TrafficClassPath is the traffic_class file of an RDMA port.
func TrafficClassPath(dev string, port int) string {
	return path.Join(ClassInfiniband, dev, "tc", strconv.Itoa(port), "traffic_class")
}

// ParseTrafficClass parses the file as the driver prints it: an optional
// "Global tclass=N" line (only while a global class is set), then one line
// per address rule ("dst_ip=.../24,tclass=N"), which are not the global
// class and are left aside.
func ParseTrafficClass(s string) (set bool, value uint8, err error) {
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		rest, ok := strings.CutPrefix(line, "Global tclass=")
		if !ok {
			continue
		}
		v, err := strconv.Atoi(rest)
		if err != nil || v < 0 || v > 255 {
			return false, 0, fmt.Errorf("%q is not a traffic class 0..255", truncate(line, 40))
		}
		return true, uint8(v), nil
	}
	return false, 0, nil
}

// ReadTrafficClass reads the global traffic class of an RDMA port.
func (h *Host) ReadTrafficClass(dev string, port int) (TrafficClass, error) {
	rel := TrafficClassPath(dev, port)
	s, err := h.ReadString(rel)
	if errors.Is(err, fs.ErrNotExist) {
		return TrafficClass{}, nil
	}
	if err != nil {
		return TrafficClass{}, err
	}
	set, v, err := ParseTrafficClass(s)
	if err != nil {
		return TrafficClass{}, fmt.Errorf("%s: %w", rel, err)
	}
	return TrafficClass{Present: true, Set: set, Value: v}, nil
}

// WriteTrafficClass sets the global traffic class of an RDMA port, or
// unsets it (tc.Set false): the driver takes "-1" for no global class
// (traffic_class_store keeps -1, the value it starts with, and prints
// nothing for it).
func (h *Host) WriteTrafficClass(dev string, port int, tc TrafficClass) error {
	v := "-1"
	if tc.Set {
		v = strconv.Itoa(int(tc.Value))
	}
	return h.WriteString(TrafficClassPath(dev, port), v)
}
