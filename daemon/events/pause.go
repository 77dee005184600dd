package events

import (
	"context"
	"errors"
	"log/slog"

	"github.com/rdmad/rdmad/daemon/ethtool"
)

// PauseMonitor is the ethtool monitor group as PauseSource reads it;
// ethtool.Monitor is the real one.
type PauseMonitor interface {
	Receive() ([]ethtool.Notification, error)
	Close()
}

// OpenPauseMonitor joins the real ethtool monitor group in the daemon's
// network namespace.
func OpenPauseMonitor() (PauseMonitor, error) { return ethtool.OpenMonitor(RecvBuffer) }

// PauseSource turns the kernel's global pause notifications
// (ETHTOOL_MSG_PAUSE_NTF, sent after every pause change made through
// ethtool netlink, by any process) into re-reads of the settings of the
// RDMA devices on that netdev, so a pause rdmad keeps off is seen at once
// when another tool turns it on. Like every source it only says what to read again
// (a recheck: the change is another process's, rdmad's [drift] action
// decides): nothing in the notification is taken as the new value.
type PauseSource struct {
	Open  func() (PauseMonitor, error)
	Req   Rechecker
	Log   *slog.Logger
	Retry func(ctx context.Context) bool // nil: fixed back-off

	drops dropLog
}

// Run reads notifications until ctx ends, reopening (and rescanning) when
// the socket fails. A kernel without ethtool netlink has no notifications
// to give: the source then waits for ctx and the verify read-back is the
// only way pause drift is seen.
func (s *PauseSource) Run(ctx context.Context) error {
	return (&netdevNotices{
		what: "ethtool pause notifications",
		open: func() (netdevMonitor, error) {
			m, err := s.Open()
			if errors.Is(err, ethtool.ErrNoFamily) {
				return nil, errNoNotices{"the kernel has no ethtool netlink: pause changes are seen by the verify read-back only"}
			}
			if err != nil {
				return nil, err
			}
			return pauseNetdevMonitor{m}, nil
		},
		foreign: func(err error) bool {
			var foreign *ethtool.ForeignSenderError
			return errors.As(err, &foreign)
		},
		req: s.Req, log: s.Log, retry: s.Retry, drops: &s.drops,
	}).run(ctx)
}

// pauseNetdevMonitor is a PauseMonitor as the notification loop reads
// it: the netdevs of its pause notifications.
type pauseNetdevMonitor struct{ PauseMonitor }

func (m pauseNetdevMonitor) Netdevs() ([]string, error) {
	notes, err := m.Receive()
	var names []string
	for _, n := range notes {
		if n.Pause() && n.Ifname != "" {
			names = append(names, n.Ifname)
		}
	}
	if err != nil && len(notes) > 0 {
		// Part of the buffer decoded: keep what did, read on.
		return names, errUndecodable{err}
	}
	return names, err
}
