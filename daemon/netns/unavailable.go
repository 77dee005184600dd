package netns

import (
	"fmt"

	"github.com/rdmad/rdmad/daemon/config"
)

// Unavailable is a Kernel whose every verb fails with err, named as
// RDMANetlink names it: rdmad under a --root, where RDMA netlink would
// switch the netns mode of the machine rdmad runs on.
func Unavailable(err error) Kernel { return unavailable{err} }

type unavailable struct{ err error }

func (u unavailable) Mode() (config.NetnsMode, error) {
	return "", fmt.Errorf("rdma system show netns: %w", u.err)
}

func (u unavailable) SetMode(m config.NetnsMode) error {
	return fmt.Errorf("rdma system set netns %s: %w", m, u.err)
}
