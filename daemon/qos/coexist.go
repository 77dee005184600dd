package qos

import (
	"fmt"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/reconcile"
)

// lldpad's socket and units, as openlldp has them: lldpad.socket listens on
// the abstract datagram socket @/com/intel/lldpad (include/clif_sock.h),
// listed in /proc/net/unix; lldpad.service binds it itself when started
// without the socket unit.
const LLDPadSocket = "@/com/intel/lldpad"

// LLDPadUnits are openlldp's units, the socket first.
var LLDPadUnits = []string{"lldpad.socket", "lldpad.service"}

// CoexistLLDPad judges lldpad beside rdmad's [[qos]]: lldpad negotiates DCB
// (PFC, ETS, APP) with the switch on the ports it is enabled on, and
// [[qos]] sets PFC and DSCP trust. Which netdevs lldpad manages is
// qos-owner's business, per port; this says once, for the host, that two
// DCB agents run. socketUnit is the unit file (relative to the root) of
// lldpad's that backs its socket listed in /proc/net/unix, "" when the
// socket is not listed or no unit of lldpad is installed and unmasked: an
// abstract socket has no owner or permissions, so any local user can bind
// lldpad's name, and it counts only with a root-owned unit to back it. ok
// is false when lldpad is not seen at all.
func CoexistLLDPad(h *host.Host, pol *config.Policy, socketUnit string) (n reconcile.Note, ok bool) {
	var seen []string
	if pid, running := LLDPadPID(h); running {
		seen = append(seen, "pid "+pid+" in /"+LLDPadPIDFile)
	}
	if socketUnit != "" {
		seen = append(seen, "its socket "+LLDPadSocket+" in /proc/net/unix, from /"+socketUnit)
	}
	if len(seen) == 0 {
		return reconcile.Note{}, false
	}
	var configures string
	if groups, err := LLDPadGroups(h); err != nil {
		configures = "its /" + LLDPadConfFile + " cannot be read here, so which interfaces it configures is not known"
	} else {
		var ifs []string
		for _, g := range groups {
			if g == "." || g == ".." || strings.Contains(g, "/") {
				continue
			}
			// The netdev's entry itself (a symlink into /sys/devices).
			if _, err := os.Lstat(h.Path(path.Join("sys/class/net", g))); err == nil {
				ifs = append(ifs, g)
			}
		}
		configures = "its /" + LLDPadConfFile + " configures no interface of this host"
		if len(ifs) > 0 {
			configures = "its /" + LLDPadConfFile + " configures " + reconcile.ShortList(ifs, 8)
		}
	}
	who := fmt.Sprintf("lldpad runs (%s) and %s", strings.Join(seen, ", "), configures)
	hostWide := reconcile.HostSubject()
	if len(pol.QoS) == 0 {
		return reconcile.Note{ID: "coexist-lldpad", Subject: hostWide, Severity: reconcile.SeverityOK,
			Finding: who + "; rdmad declares no [[qos]]: DCB is lldpad's"}, true
	}
	var files []string
	for _, r := range pol.QoS {
		if f := r.Source.File; !slices.Contains(files, f) {
			files = append(files, f)
		}
	}
	rules := "rdmad's [[qos]] at " + pol.QoS[0].Source.String()
	if len(files) > 1 {
		rules = "rdmad's [[qos]] in " + strings.Join(files, ", ")
	}
	return reconcile.Note{ID: "coexist-lldpad", Subject: hostWide, Severity: reconcile.SeverityWarn,
		Finding: fmt.Sprintf("DCB has two agents on this host: %s; %s sets PFC and trust, except on netdevs lldpad configures (qos-owner names them)",
			who, rules),
		Fix: "give DCB one owner: rdmad: systemctl disable --now lldpad.service lldpad.socket (no DCBX with the switch then: set the switch's PFC to match); or lldpad: remove the [[qos]] rules from " + strings.Join(files, ", ") +
			" and set PFC with lldptool (lldptool -T -i IF -V PFC enabled=3)"}, true
}
