package links

import "fmt"

// Unavailable is a Netlink whose every verb fails with err, named as
// RDMANetlink names it: rdmad under a --root, where RDMA netlink would
// create or delete links on the machine rdmad runs on.
func Unavailable(err error) Netlink { return unavailable{err} }

type unavailable struct{ err error }

func (u unavailable) LinkAdd(name, typ, netdev string) error {
	return fmt.Errorf("rdma link add %s type %s netdev %s: %w", name, typ, netdev, u.err)
}

func (u unavailable) LinkDel(name string) error {
	return fmt.Errorf("rdma link delete %s: %w", name, u.err)
}
