package compose

import (
	"fmt"

	"github.com/rdmad/rdmad/daemon/dcb"
	"github.com/rdmad/rdmad/daemon/ethtool"
	"github.com/rdmad/rdmad/daemon/fixturekernel"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/links"
	"github.com/rdmad/rdmad/daemon/netns"
)

// KernelFor chooses the kernel interfaces rdmad acts through on h: the
// real ones (RealKernel) on the machine's own root, the off-host ones for
// any other root (rdmad --root).
func KernelFor(h *host.Host) Kernel {
	if h.Root == "/" {
		return RealKernel()
	}
	return offHostKernel(h, RealKernel())
}

// offHostKernel is k for a --root that is not "/". A fixture root has no
// kernel of its own: RDMA netlink would create links or switch the netns
// mode of the machine rdmad runs on, DCB netlink and ethtool would set PFC
// and trust on its adapters (a fixture's ens1f0np0 may well be a real
// adapter's name here). Those actions fail, named; DCB and ethtool are
// served from the fixture's own state file where it carries one
// (fixturekernel.File).
func offHostKernel(h *host.Host, k Kernel) Kernel {
	notHere := fmt.Errorf("netlink is not used with --root %s (it would act on this machine's kernel)", h.Root)
	k.Links, k.Netns = links.Unavailable(notHere), netns.Unavailable(notHere)
	if fixturekernel.Present(h) {
		fk := fixturekernel.New(h)
		k.DCB, k.Ethtool = fk, fk
		return k
	}
	noState := fmt.Errorf("%w, and the fixture has no %s to serve DCB and ethtool from", notHere, fixturekernel.File)
	k.DCB, k.Ethtool = dcb.Unavailable(noState), ethtool.Unavailable(noState)
	return k
}
