package qos

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"

	"github.com/rdmad/rdmad/daemon/config/value"
	"github.com/rdmad/rdmad/daemon/host"
)

// The sysfs that MLNX_OFED / DOCA-OFED's mlx5 driver adds and upstream
// kernels do not have (upstream keeps per-priority ECN in firmware
// parameters and debugfs only), read through host's bounded readers and
// parsed here, where its values are judged.

// OFEDECN is what the OFED driver's ecn directory of a netdev says about
// ECN/DCQCN: which priorities react to congestion notifications (roce_rp,
// the reaction point) and send them (roce_np, the notification point), and
// how the CNPs it sends are marked.
type OFEDECN struct {
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
func (e OFEDECN) On() uint8 { return e.RP & e.NP }

// ECN point names: the reaction point (roce_rp) and the notification
// point (roce_np).
const (
	ecnReaction     = "roce_rp"
	ecnNotification = "roce_np"
)

// ecnPath is sys/class/net/<netdev>/ecn/<elem...>.
func ecnPath(netdev string, elem ...string) string {
	return path.Join(append([]string{host.ClassNet, netdev, "ecn"}, elem...)...)
}

// ecnWatch are the directories (relative to the host root) of netdev's
// OFED ECN files: a write to one of them is an event there.
func ecnWatch(netdev string) []string {
	return []string{ecnPath(netdev, ecnReaction, "enable"), ecnPath(netdev, ecnNotification, "enable"), ecnPath(netdev, ecnNotification)}
}

// readOFEDECN reads the OFED ECN files of netdev. A netdev without them is
// OFEDECN{Present: false} and no error; a file that holds something other
// than a number in its range is an error naming it.
func readOFEDECN(h *host.Host, netdev string) (OFEDECN, error) {
	e := OFEDECN{CNPDSCP: -1, CNPPrio: -1}
	if !h.Exists(ecnPath(netdev, ecnReaction, "enable")) || !h.Exists(ecnPath(netdev, ecnNotification, "enable")) {
		return e, nil
	}
	e.Present = true
	enable := value.Range{Min: 0, Max: 1}
	for p := 0; p < 8; p++ {
		bit := uint8(1) << p
		for _, point := range []struct {
			name string
			mask *uint8
		}{{ecnReaction, &e.RP}, {ecnNotification, &e.NP}} {
			v, ok, err := readSmallInt(h, ecnPath(netdev, point.name, "enable", strconv.Itoa(p)), enable)
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
	if e.CNPDSCP, err = readOptionalInt(h, ecnPath(netdev, ecnNotification, "cnp_dscp"), value.DSCPRange); err != nil {
		return e, err
	}
	if e.CNPPrio, err = readOptionalInt(h, ecnPath(netdev, ecnNotification, "cnp_802p_prio"), value.PriorityRange); err != nil {
		return e, err
	}
	return e, nil
}

// readOptionalInt is readSmallInt with -1 for an absent or empty file.
func readOptionalInt(h *host.Host, rel string, r value.Range) (int, error) {
	v, ok, err := readSmallInt(h, rel, r)
	if err != nil || !ok {
		return -1, err
	}
	return v, nil
}

// readSmallInt reads a "%d\n" attribute in r. ok is false for an absent
// or empty file; anything else that is not such a number is an error
// naming the file.
func readSmallInt(h *host.Host, rel string, r value.Range) (v int, ok bool, err error) {
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
	if err != nil || r.Check(int64(v)) != nil {
		return 0, false, fmt.Errorf("%s: %s is not a number in %s", rel, value.Quote(s), r)
	}
	return v, true, nil
}

// writeECNEnable turns ECN at point (ecnReaction or ecnNotification) of
// priority prio on or off.
func writeECNEnable(h *host.Host, netdev, point string, prio int, on bool) error {
	if point != ecnReaction && point != ecnNotification || value.Priority(prio) != nil {
		return fmt.Errorf("ecn %s priority %d: no such file", point, prio)
	}
	v := "0"
	if on {
		v = "1"
	}
	return h.WriteString(ecnPath(netdev, point, "enable", strconv.Itoa(prio)), v)
}

// writeCNPDSCP sets the DSCP of the CNPs netdev sends.
func writeCNPDSCP(h *host.Host, netdev string, dscp int) error {
	if err := value.DSCP(dscp); err != nil {
		return fmt.Errorf("CNP %w", err)
	}
	return h.WriteString(ecnPath(netdev, ecnNotification, "cnp_dscp"), strconv.Itoa(dscp))
}

// writeCNPPriority sets the 802.1p priority of the CNPs netdev sends.
func writeCNPPriority(h *host.Host, netdev string, prio int) error {
	if err := value.Priority(prio); err != nil {
		return fmt.Errorf("CNP %w", err)
	}
	return h.WriteString(ecnPath(netdev, ecnNotification, "cnp_802p_prio"), strconv.Itoa(prio))
}
