package qos

import "github.com/rdmad/rdmad/daemon/reconcile"

// dcbNotice is what announces a change made through DCB netlink: dcbnl
// multicasts the netdev's DCB state on RTNLGRP_DCB after every IEEE set or
// delete, by any process, whatever the driver (net/dcb/dcbnl.c,
// dcbnl_ieee_set and dcbnl_ieee_del, then dcbnl_ieee_notify).
const dcbNotice = "net/dcb/dcbnl.c: dcbnl_ieee_set/dcbnl_ieee_del call dcbnl_ieee_notify (RTM_SETDCB on RTNLGRP_DCB)"

// Notifications is how another process's change of each lossless setting
// reaches rdmad, on every driver. The DCBX mode (dcbnl_setdcbx sends no
// notification) and the PFC storm timeout (an ethtool tunable set by
// ioctl, which announces nothing) are found by the verify read-back only;
// a change a driver's firmware makes on its own (DCBX with a switch) is
// not announced either.
var Notifications = []reconcile.Notification{
	{Setting: PFC.Setting(), Notice: reconcile.NoticeDCB, Follows: dcbNotice},
	{Setting: Trust.Setting(), Notice: reconcile.NoticeDCB, Follows: dcbNotice},
	{Setting: CableLength.Setting(), Notice: reconcile.NoticeDCB, Follows: dcbNotice},
	{Setting: PrioTC.Setting(), Notice: reconcile.NoticeDCB, Follows: dcbNotice},
	{Setting: Bandwidth.Setting(), Notice: reconcile.NoticeDCB, Follows: dcbNotice},
	{Setting: Maxrate.Setting(), Notice: reconcile.NoticeDCB, Follows: dcbNotice},
	{Setting: PrioBuffer.Setting(), Notice: reconcile.NoticeDCB, Follows: dcbNotice},
	{Setting: BufferSize.Setting(), Notice: reconcile.NoticeDCB, Follows: dcbNotice},
	{Setting: UDPPortPrio.Setting(), Notice: reconcile.NoticeDCB, Follows: dcbNotice},
	{Setting: DCBX.Setting(), Notice: reconcile.NoticeNone, Follows: "net/dcb/dcbnl.c: dcbnl_setdcbx sends no notification"},
	{Setting: Pause.Setting(), Notice: reconcile.NoticeEthtool,
		Follows: "net/ethtool: ETHTOOL_MSG_PAUSE_NTF to the monitor group after ETHTOOL_MSG_PAUSE_SET and the ETHTOOL_SPAUSEPARAM ioctl (kernels with ethtool netlink)"},
	{Setting: StormTimeout.Setting(), Notice: reconcile.NoticeNone,
		Follows: "net/ethtool/ioctl.c: ETHTOOL_STUNABLE (pfc-prevention-tout) is an ioctl and sends no notification"},
	{Setting: ECN.Setting(), Notice: reconcile.NoticeInotify, Follows: "vfs_write's fsnotify_modify on the OFED sysfs directories ecn/roce_rp and ecn/roce_np"},
	{Setting: CNPDSCP.Setting(), Notice: reconcile.NoticeInotify, Follows: "vfs_write's fsnotify_modify on the OFED sysfs directory ecn/roce_np"},
	{Setting: CNPPriority.Setting(), Notice: reconcile.NoticeInotify, Follows: "vfs_write's fsnotify_modify on the OFED sysfs directory ecn/roce_np"},
}

// Notifications implements reconcile.Notifying.
func (*Part) Notifications() []reconcile.Notification { return Notifications }
