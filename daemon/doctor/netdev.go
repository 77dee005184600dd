package doctor

import (
	"path"
	"strconv"

	"github.com/rdmad/rdmad/daemon/host"
)

// netdevState is what a netdev's sysfs says of its link.
type netdevState int

const (
	linkUnknown   netdevState = iota
	linkAdminDown             // IFF_UP clear: ip link set dev X down
	linkNoCarrier             // up, no carrier (IFF_LOWER_UP clear)
	linkCarrier               // up with carrier
)

// iffUp is IFF_UP in /sys/class/net/<if>/flags (dev->flags, printed in
// hex); IFF_LOWER_UP is not among those flags: carrier says it (and
// refuses to be read, EINVAL, while the interface is down).
const iffUp = 0x1

// netdevLink reads a netdev's administrative state and carrier.
func (d *diag) netdevLink(netdev string) netdevState {
	base := path.Join(host.ClassNet, netdev)
	flags, err := strconv.ParseUint(readAttr(d.h, path.Join(base, "flags")), 0, 32)
	if err != nil {
		return linkUnknown
	}
	if flags&iffUp == 0 {
		return linkAdminDown
	}
	switch readAttr(d.h, path.Join(base, "carrier")) {
	case "1":
		return linkCarrier
	case "0":
		return linkNoCarrier
	}
	return linkUnknown
}

// netdevMTU is a netdev's MTU; 0 when it cannot be read.
func (d *diag) netdevMTU(netdev string) int {
	n, err := strconv.Atoi(readAttr(d.h, path.Join(host.ClassNet, netdev, "mtu")))
	if err != nil {
		return 0
	}
	return n
}
