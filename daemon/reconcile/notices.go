package reconcile

import "fmt"

// rdmad sees another process's change of a setting from the kernel's
// notification of it (inotify on a configfs or sysfs directory, a DCB
// notification, an ethtool notification) or, where the kernel announces
// nothing, from the verify read-back ([drift] verify_interval). Parts say
// which, per driver, in a table of their own (a Notification per driver
// and setting): the events rdmad subscribes to follow from it, and
// `rdmactl qualify` holds real adapters to it (a setting whose notification
// never comes is seen only at the next read-back).

// Notice is how a change of a setting made by another process reaches
// rdmad.
type Notice uint8

const (
	// NoticeNone: the kernel announces nothing; the verify read-back
	// finds the change.
	NoticeNone Notice = iota
	// NoticeInotify: a write of the setting's file is IN_MODIFY on its
	// directory (configfs port directories, sysfs).
	NoticeInotify
	// NoticeDCB: dcbnl multicasts the netdev's DCB state on RTNLGRP_DCB
	// after every IEEE set or delete.
	NoticeDCB
	// NoticeEthtool: ethtool netlink's monitor group announces the change
	// (ETHTOOL_MSG_PAUSE_NTF).
	NoticeEthtool
)

var noticeNames = [...]string{"none", "inotify", "dcb", "ethtool"}

// String is the notice as the Manager's Notifications property and
// rdmactl qualify name it ("dcb").
func (n Notice) String() string {
	if int(n) < len(noticeNames) {
		return noticeNames[n]
	}
	return fmt.Sprintf("notice(%d)", int(n))
}

// Notification is one row of a part's table: on devices of Driver ("" for
// every driver without a row of its own), a change of Setting by another
// process reaches rdmad by Notice.
type Notification struct {
	Driver  string
	Setting *Setting
	Notice  Notice
	// Follows names the kernel code the row was read from
	// (dcbnl_ieee_notify), so a reader can check it again.
	Follows string
}

// Notifying is a part that says how changes of its settings reach rdmad.
type Notifying interface {
	Notifications() []Notification
}

// Notifications is the table of every part, in part order.
func (r *Reconciler) Notifications() []Notification {
	var out []Notification
	for _, p := range r.parts() {
		if n, ok := p.(Notifying); ok {
			out = append(out, n.Notifications()...)
		}
	}
	return out
}

// NotificationOf looks up the row for setting s on driver in table: the
// driver's own row, else the row for every driver.
func NotificationOf(table []Notification, driver string, s *Setting) (Notification, bool) {
	var any Notification
	found := false
	for _, n := range table {
		if n.Setting != s {
			continue
		}
		switch n.Driver {
		case driver:
			return n, true
		case "":
			any, found = n, true
		}
	}
	return any, found
}
