package events

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"syscall"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/rdmad/rdmad/daemon/nlattr"
)

// A DCB notification: after every IEEE set or delete made through DCB
// netlink, by any process and even when the driver refused it, the kernel
// multicasts the netdev's DCB state to RTNLGRP_DCB (net/dcb/dcbnl.c,
// dcbnl_ieee_notify): an RTM_SETDCB message whose struct dcbmsg has cmd
// DCB_CMD_IEEE_SET or DCB_CMD_IEEE_DEL and whose first attribute is
// DCB_ATTR_IFNAME. Some drivers (i40e, ice) send the same after a DCBX
// change of their firmware; mlx5 does not. rdmad takes it only as "read
// the DCB of this netdev again": nothing in it is trusted as the new
// value.

// The dcbnl uapi (include/uapi/linux/dcbnl.h) a notification is read by.
const (
	sizeofDCBMsg  = 4  // struct dcbmsg: u8 dcb_family, u8 cmd, u16 dcb_pad
	dcbAttrIfname = 1  // DCB_ATTR_IFNAME
	maxIfnameLen  = 15 // IFNAMSIZ - 1
)

// ParseDCBNotification returns the netdev a DCB notification is about,
// from the payload of an RTM_SETDCB message (struct dcbmsg, then its
// attributes); ok is false for anything else (a CEE notification names
// its netdev too, and counts).
func ParseDCBNotification(payload []byte) (ifname string, ok bool) {
	if len(payload) < sizeofDCBMsg {
		return "", false
	}
	for a, err := range nlattr.All(payload[sizeofDCBMsg:]) {
		if err != nil {
			return "", false
		}
		if a.Type == dcbAttrIfname {
			name := a.String()
			if len(name) == 0 || len(name) > maxIfnameLen || !validName(name) {
				return "", false
			}
			return name, true
		}
	}
	return "", false
}

// DCBMonitor reads DCB notifications; OpenDCBMonitor is the real one.
type DCBMonitor interface {
	// Receive returns the netdevs of the next notifications; a message
	// from another sender is an *ForeignSenderError.
	Receive() ([]string, error)
	Close()
}

// Rechecker is what a DCB notification asks of the service: read the
// declared settings of the RDMA devices on a netdev again, or, when
// notifications were lost, everything.
type Rechecker interface {
	RecheckNetdev(name string)
	RequestAll()
}

// DCBSource turns DCB notifications into re-reads of the settings of the
// RDMA devices on the netdev they name, so a PFC or trust another tool
// (dcb, lldpad, mlnx_qos) changes is seen at once.
type DCBSource struct {
	Open  func() (DCBMonitor, error)
	Req   Rechecker
	Log   *slog.Logger
	Retry func(ctx context.Context) bool // nil: fixed back-off

	drops dropLog
}

// Run reads notifications until ctx ends, reopening (and rescanning) when
// the socket fails.
func (s *DCBSource) Run(ctx context.Context) error {
	return (&netdevNotices{
		what: "DCB notifications",
		open: func() (netdevMonitor, error) {
			m, err := s.Open()
			if err != nil {
				return nil, err
			}
			return dcbNetdevMonitor{m}, nil
		},
		foreign: func(err error) bool { return errors.Is(err, ErrForeignSender) },
		req:     s.Req, log: s.Log, retry: s.Retry, drops: &s.drops,
	}).run(ctx)
}

// dcbNetdevMonitor is a DCBMonitor as the notification loop reads it.
type dcbNetdevMonitor struct{ DCBMonitor }

func (m dcbNetdevMonitor) Netdevs() ([]string, error) { return m.Receive() }

// dcbMonitor is an rtnetlink socket joined to RTNLGRP_DCB.
type dcbMonitor struct{ sock *nl.NetlinkSocket }

// OpenDCBMonitor joins RTNLGRP_DCB in the daemon's network namespace.
func OpenDCBMonitor() (DCBMonitor, error) {
	sock, err := nl.Subscribe(unix.NETLINK_ROUTE, unix.RTNLGRP_DCB)
	if err != nil {
		return nil, fmt.Errorf("RTNLGRP_DCB subscription: %w", err)
	}
	if err := sock.SetReceiveBufferSize(RecvBuffer, os.Geteuid() == 0); err != nil {
		_ = sock.SetReceiveBufferSize(RecvBuffer, false)
	}
	return &dcbMonitor{sock}, nil
}

// Receive implements DCBMonitor.
func (m *dcbMonitor) Receive() ([]string, error) {
	msgs, from, err := m.sock.Receive()
	if err != nil {
		return nil, err
	}
	if from.Pid != nl.PidKernel {
		return nil, &ForeignSenderError{Pid: from.Pid}
	}
	return dcbNetdevs(msgs), nil
}

// DCBNetdevs returns the netdevs the DCB notifications in a buffer of
// netlink messages (as a read of the socket returns them) are about.
func DCBNetdevs(buf []byte) ([]string, error) {
	msgs, err := syscall.ParseNetlinkMessage(buf)
	if err != nil {
		return nil, fmt.Errorf("DCB notification: %w", err)
	}
	return dcbNetdevs(msgs), nil
}

func dcbNetdevs(msgs []syscall.NetlinkMessage) []string {
	var out []string
	for _, msg := range msgs {
		if msg.Header.Type != unix.RTM_SETDCB && msg.Header.Type != unix.RTM_GETDCB {
			continue
		}
		if n, ok := ParseDCBNotification(msg.Data); ok {
			out = append(out, n)
		}
	}
	return out
}

// Close implements DCBMonitor.
func (m *dcbMonitor) Close() { m.sock.Close() }
