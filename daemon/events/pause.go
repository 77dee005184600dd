package events

import (
	"context"
	"errors"
	"log/slog"

	"golang.org/x/sys/unix"

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
	log, retry := orDefaults(s.Log, s.Retry)
	reopened := false
	for {
		m, err := s.Open()
		if errors.Is(err, ethtool.ErrNoFamily) {
			log.Info("the kernel has no ethtool netlink: pause changes are seen by the verify read-back only")
			<-ctx.Done()
			return nil
		}
		if err != nil {
			log.Error("ethtool monitor subscription failed; retrying", "err", err)
			if !retry(ctx) {
				return nil
			}
			continue
		}
		if reopened {
			s.Req.RequestAll() // anything may have changed while we were not listening
		}
		stop := make(chan struct{})
		go func() {
			select {
			case <-ctx.Done():
			case <-stop:
			}
			m.Close()
		}()
		s.consume(ctx, m, log)
		close(stop)
		if ctx.Err() != nil {
			return nil
		}
		log.Warn("ethtool monitor ended; reopening and rescanning")
		reopened = true
		if !retry(ctx) {
			return nil
		}
	}
}

// consume handles notifications until the monitor fails or is closed.
func (s *PauseSource) consume(ctx context.Context, m PauseMonitor, log *slog.Logger) {
	for {
		notes, err := m.Receive()
		for _, n := range notes {
			if n.Pause() && n.Ifname != "" {
				s.Req.RecheckNetdev(n.Ifname)
			}
		}
		var foreign *ethtool.ForeignSenderError
		switch {
		case err == nil:
		case errors.As(err, &foreign):
			s.drops.note(log, err) // not the kernel's: nothing was lost
		case errors.Is(err, unix.ENOBUFS):
			log.Warn("ethtool notifications lost; rescanning everything", "err", err)
			s.Req.RequestAll()
		case len(notes) > 0:
			log.Debug("undecodable ethtool notification", "err", err)
		default:
			if ctx.Err() == nil {
				log.Warn("ethtool monitor receive failed", "err", err)
			}
			return
		}
	}
}
