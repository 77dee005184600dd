package events

import (
	"context"
	"errors"
	"log/slog"

	"golang.org/x/sys/unix"
)

// netdevMonitor is a kernel notification socket read as the netdevs its
// messages name (DCB, ethtool pause).
type netdevMonitor interface {
	Netdevs() ([]string, error)
	Close()
}

// errNoNotices is what open returns when the kernel has no such
// notifications at all: the loop says so once and waits for ctx.
type errNoNotices struct{ why string }

func (e errNoNotices) Error() string { return e.why }

// errUndecodable is a read that decoded only in part: what did is used,
// the loop reads on.
type errUndecodable struct{ err error }

func (e errUndecodable) Error() string { return "undecodable notification: " + e.err.Error() }
func (e errUndecodable) Unwrap() error { return e.err }

// netdevNotices is the loop of the notification sources that name netdevs:
// every netdev named is rechecked (nothing in a notification is taken as
// the new value); a monitor that fails is reopened, and everything is
// rescanned then and when the kernel dropped notifications (ENOBUFS).
type netdevNotices struct {
	what    string // "DCB notifications", for the log
	open    func() (netdevMonitor, error)
	foreign func(error) bool // the error is a message not from the kernel
	req     Rechecker
	log     *slog.Logger
	retry   func(ctx context.Context) bool // nil: fixed back-off
	drops   *dropLog
}

func (n *netdevNotices) run(ctx context.Context) error {
	log, retry := orDefaults(n.log, n.retry)
	reopened := false
	for {
		m, err := n.open()
		var none errNoNotices
		if errors.As(err, &none) {
			log.Info(none.why)
			<-ctx.Done()
			return nil
		}
		if err != nil {
			log.Error(n.what+" subscription failed; retrying", "err", err)
			if !retry(ctx) {
				return nil
			}
			continue
		}
		if reopened {
			n.req.RequestAll() // anything may have changed while nobody listened
		}
		stop := make(chan struct{})
		go func() {
			select {
			case <-ctx.Done():
			case <-stop:
			}
			m.Close()
		}()
		n.consume(ctx, m, log)
		close(stop)
		if ctx.Err() != nil {
			return nil
		}
		log.Warn(n.what + " ended; reopening and rescanning")
		reopened = true
		if !retry(ctx) {
			return nil
		}
	}
}

// consume handles notifications until the monitor fails or is closed.
func (n *netdevNotices) consume(ctx context.Context, m netdevMonitor, log *slog.Logger) {
	for {
		names, err := m.Netdevs()
		for _, name := range names {
			n.req.RecheckNetdev(name)
		}
		var partial errUndecodable
		switch {
		case err == nil:
		case n.foreign(err):
			n.drops.note(log, err) // not the kernel's: nothing was lost
		case errors.Is(err, unix.ENOBUFS):
			log.Warn(n.what+" lost; rescanning everything", "err", err)
			n.req.RequestAll()
		case errors.As(err, &partial):
			log.Debug(n.what+": undecodable notification", "err", partial.err)
		default:
			if ctx.Err() == nil {
				log.Warn(n.what+" receive failed", "err", err)
			}
			return
		}
	}
}
