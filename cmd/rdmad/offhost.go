package main

import (
	"fmt"

	"github.com/rdmad/rdmad/daemon/config"
)

// offHost stands in for RDMA netlink when --root is not "/": the actions are
// reported as failed instead of being carried out on the machine rdmad runs on.
type offHost struct{ root string }

func (o offHost) err() error {
	return fmt.Errorf("RDMA netlink is not used with --root %s (it would act on this machine's kernel)", o.root)
}

func (o offHost) LinkAdd(name, typ, netdev string) error { return o.err() }
func (o offHost) LinkDel(name string) error              { return o.err() }
func (o offHost) Mode() (config.NetnsMode, error)        { return "", o.err() }
func (o offHost) SetMode(config.NetnsMode) error         { return o.err() }
