package roce

import "github.com/rdmad/rdmad/daemon/reconcile"

// Notifications is how another process's change of each RoCE setting
// reaches rdmad, on every driver: a write of a configfs attribute is
// IN_MODIFY on its port directory (configfs keeps no inode for the
// attribute, so a watch on the file itself sees nothing; rdma_cm's
// cma_configfs.c, verified on Debian's 6.1 and 6.12 kernels), and OFED's
// traffic_class file is a sysfs attribute, whose write vfs_write
// announces on its directory (fsnotify_modify).
var Notifications = []reconcile.Notification{
	{Setting: Mode.Setting(), Notice: reconcile.NoticeInotify,
		Follows: "vfs_write's fsnotify_modify on rdma_cm/DEV/ports/N (drivers/infiniband/core/cma_configfs.c: default_roce_mode_store)"},
	{Setting: TOS.Setting(), Notice: reconcile.NoticeInotify,
		Follows: "vfs_write's fsnotify_modify on rdma_cm/DEV/ports/N (drivers/infiniband/core/cma_configfs.c: default_roce_tos_store)"},
	{Setting: TrafficClass.Setting(), Notice: reconcile.NoticeInotify,
		Follows: "vfs_write's fsnotify_modify on the OFED sysfs directory tc/N"},
}

// Notifications implements reconcile.Notifying.
func (*Part) Notifications() []reconcile.Notification { return Notifications }
