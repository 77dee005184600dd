package main

import (
	"fmt"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/dcb"
	"github.com/rdmad/rdmad/daemon/ethtool"
)

// offHost stands in for RDMA netlink, DCB netlink and ethtool when --root
// is not "/":
// the actions are reported as failed instead of being carried out on the
// machine rdmad runs on (a fixture's ens1f0np0 may well be a real adapter's
// name here).
type offHost struct{ root string }

func (o offHost) err() error {
	return fmt.Errorf("netlink is not used with --root %s (it would act on this machine's kernel)", o.root)
}

func (o offHost) LinkAdd(name, typ, netdev string) error { return o.err() }
func (o offHost) LinkDel(name string) error              { return o.err() }
func (o offHost) Mode() (config.NetnsMode, error)        { return "", o.err() }
func (o offHost) SetMode(config.NetnsMode) error         { return o.err() }

func (o offHost) Get(string) (dcb.IEEE, error)         { return dcb.IEEE{}, o.err() }
func (o offHost) DCBX(string) (uint8, error)           { return 0, o.err() }
func (o offHost) SetPFC(string, dcb.PFC) error         { return o.err() }
func (o offHost) SetETS(string, dcb.ETS) error         { return o.err() }
func (o offHost) SetMaxrate(string, dcb.Maxrate) error { return o.err() }
func (o offHost) SetBuffer(string, dcb.Buffer) error   { return o.err() }
func (o offHost) SetApp(string, dcb.App) error         { return o.err() }
func (o offHost) DelApp(string, dcb.App) error         { return o.err() }
func (o offHost) SetDCBX(string, uint8) error          { return o.err() }

func (o offHost) Pause(string) (ethtool.Pause, error)     { return ethtool.Pause{}, o.err() }
func (o offHost) SetPause(string, bool, bool) error       { return o.err() }
func (o offHost) PFCStormTimeout(string) (uint16, error)  { return 0, o.err() }
func (o offHost) SetPFCStormTimeout(string, uint16) error { return o.err() }
