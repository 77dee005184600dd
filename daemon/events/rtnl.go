package events

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// LinkSubscriber delivers rtnetlink link updates on ch until done is
// closed, then closes ch; it also closes ch when the subscription fails
// (after reporting the cause to onError). onError also reports, while the
// subscription goes on, messages that were lost (ErrOverflow: the kernel
// dropped some, rescan) or dropped (ErrForeignSender: not the kernel's,
// ignore). RTNetlink is the real one.
type LinkSubscriber interface {
	Subscribe(ch chan<- netlink.LinkUpdate, done <-chan struct{}, onError func(error)) error
}

// RTNetlink subscribes to RTNLGRP_LINK. It reads the socket itself rather
// than through netlink.LinkSubscribeWithOptions, whose error callback
// reports a message from another sender and a receive error alike, as
// text: a root process multicasting link messages would then pass for
// lost events and a rescan of everything each time.
type RTNetlink struct {
	Namespace *netns.NsHandle // nil: the daemon's own namespace
}

// Subscribe implements LinkSubscriber.
func (r RTNetlink) Subscribe(ch chan<- netlink.LinkUpdate, done <-chan struct{}, onError func(error)) error {
	newNs := netns.None()
	if r.Namespace != nil {
		newNs = *r.Namespace
	}
	sock, err := nl.SubscribeAt(newNs, netns.None(), unix.NETLINK_ROUTE, unix.RTNLGRP_LINK)
	if err != nil {
		return fmt.Errorf("rtnetlink link subscription: %w", err)
	}
	// Forcing past rmem_max needs CAP_NET_ADMIN, which rdmad has as root.
	if err := sock.SetReceiveBufferSize(RecvBuffer, os.Geteuid() == 0); err != nil {
		if err := sock.SetReceiveBufferSize(RecvBuffer, false); err != nil {
			sock.Close()
			return fmt.Errorf("rtnetlink receive buffer: %w", err)
		}
	}
	go func() {
		<-done
		sock.Close()
	}()
	go func() {
		defer close(ch)
		for {
			msgs, from, err := sock.Receive()
			switch {
			case errors.Is(err, unix.ENOBUFS):
				// The socket goes on; what it dropped must be re-read.
				onError(fmt.Errorf("rtnetlink: %w", ErrOverflow))
				continue
			case err != nil:
				select {
				case <-done: // closed on purpose
				default:
					onError(fmt.Errorf("rtnetlink receive: %w", err))
				}
				return
			case from.Pid != nl.PidKernel:
				onError(&ForeignSenderError{Pid: from.Pid})
				continue
			}
			for _, m := range msgs {
				if m.Header.Type != unix.RTM_NEWLINK && m.Header.Type != unix.RTM_DELLINK {
					continue // NLMSG_DONE, NLMSG_ERROR: not link changes
				}
				header := unix.NlMsghdr(m.Header)
				link, err := netlink.LinkDeserialize(&header, m.Data)
				if err != nil {
					// A link change the kernel sent and we cannot read:
					// as good as lost.
					onError(fmt.Errorf("rtnetlink: %w: %w", ErrOverflow, err))
					continue
				}
				select {
				case ch <- netlink.LinkUpdate{IfInfomsg: *nl.DeserializeIfInfomsg(m.Data), Header: header, Link: link}:
				case <-done:
					return
				}
			}
		}
	}()
	return nil
}

// LinkLister lists the links that exist now (an RTM_GETLINK dump). A
// LinkSubscriber that is one lets LinkSource know every link from the
// start: without it a netdev's first change after rdmad starts (a carrier
// drop) would be taken for its arrival, the policy applied over what
// [drift] action says and the carrier loss not counted.
type LinkLister interface {
	Links() ([]netlink.Link, error)
}

// Links implements LinkLister.
func (r RTNetlink) Links() ([]netlink.Link, error) {
	ns := netns.None()
	if r.Namespace != nil {
		ns = *r.Namespace
	}
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("rtnetlink link dump: %w", err)
	}
	defer h.Close()
	links, err := h.LinkList()
	for try := 0; errors.Is(err, netlink.ErrDumpInterrupted) && try < 3; try++ {
		links, err = h.LinkList() // the links changed during the dump
	}
	if err != nil {
		return nil, fmt.Errorf("rtnetlink link dump: %w", err)
	}
	return links, nil
}

// linkView is what of a link matters to rdmad: soft links follow the name
// and existence of their netdev, and port state is published on D-Bus.
type linkView struct {
	name  string
	oper  netlink.LinkOperState
	up    bool
	lower bool // carrier
}

// LinkSource turns netdev appearance, removal, renames and operational
// state changes into passes over the RDMA devices on that netdev.
type LinkSource struct {
	Sub   LinkSubscriber
	Req   Requester
	Log   *slog.Logger
	Retry func(ctx context.Context) bool // nil: fixed back-off
	// CarrierLost, when set, is told each loss of carrier of a netdev
	// that stays administratively up (IFF_LOWER_UP cleared, IFF_UP set):
	// doctor counts link flaps of RoCE ports from it.
	CarrierLost func(netdev string)

	links map[int]linkView
	drops dropLog
}

// Run subscribes until ctx ends, resubscribing (and rescanning) whenever
// the subscription reports an error or ends.
func (s *LinkSource) Run(ctx context.Context) error {
	log, retry := orDefaults(s.Log, s.Retry)
	s.links = map[int]linkView{}
	resubscribed := false
	for {
		ch := make(chan netlink.LinkUpdate, 256)
		done := make(chan struct{})
		lost := make(chan error, 1)
		onError := func(err error) {
			if errors.Is(err, ErrForeignSender) {
				s.drops.note(log, err) // not the kernel's: nothing was lost
				return
			}
			select {
			case lost <- err:
			default:
			}
		}
		if err := s.Sub.Subscribe(ch, done, onError); err != nil {
			log.Error("rtnetlink subscription failed; retrying", "err", err)
			if !retry(ctx) {
				return nil
			}
			continue
		}
		if resubscribed {
			// Anything may have changed while we were not listening.
			s.links = map[int]linkView{}
			s.Req.RequestAll()
		}
		s.know(log)
		stopped := s.consume(ctx, ch, lost, log)
		close(done)
		for range ch { // let the subscription goroutine finish
		}
		if stopped {
			return nil
		}
		log.Warn("rtnetlink subscription ended; resubscribing and rescanning")
		resubscribed = true
		s.Req.RequestAll()
		if !retry(ctx) {
			return nil
		}
	}
}

// know records the links that exist now, after the subscription is in
// place (a change after the dump is news, one before it is in the dump):
// they are known, not new, and nothing is requested for them (the start's
// full pass, or the rescan after a resubscription, reads them).
func (s *LinkSource) know(log *slog.Logger) {
	lister, ok := s.Sub.(LinkLister)
	if !ok {
		return
	}
	links, err := lister.Links()
	if err != nil {
		log.Warn("links not listed; each is known from its first change", "err", err)
		return
	}
	for _, l := range links {
		a := l.Attrs()
		s.links[a.Index] = viewOf(a.Name, a.OperState, a.RawFlags)
	}
}

func viewOf(name string, oper netlink.LinkOperState, flags uint32) linkView {
	return linkView{name: name, oper: oper, up: flags&unix.IFF_UP != 0, lower: flags&unix.IFF_LOWER_UP != 0}
}

// consume handles updates until ctx ends (true) or the channel closes.
func (s *LinkSource) consume(ctx context.Context, ch <-chan netlink.LinkUpdate, lost <-chan error, log *slog.Logger) bool {
	for {
		select {
		case <-ctx.Done():
			return true
		case err := <-lost:
			// ENOBUFS and friends: events were dropped. The subscription
			// may go on, but what it missed must be re-read.
			log.Warn("rtnetlink events lost; rescanning everything", "err", err)
			s.Req.RequestAll()
		case u, ok := <-ch:
			if !ok {
				return false
			}
			names, stateOnly := s.changes(u)
			sr, canState := s.Req.(NetdevStateRequester)
			for _, name := range names {
				if stateOnly && canState {
					sr.RequestNetdevState(name)
				} else {
					s.Req.RequestNetdev(name)
				}
			}
		}
	}
}

// NetdevStateRequester is a Requester that tells a netdev's change of link
// state or carrier from its arrival (the service does: a state change is
// not a reason to apply the policy over what [drift] action says).
type NetdevStateRequester interface {
	RequestNetdevState(name string)
}

// changed returns the netdev names u is news about (see changes).
func (s *LinkSource) changed(u netlink.LinkUpdate) []string {
	names, _ := s.changes(u)
	return names
}

// changes records u and returns the netdev names it is news about: a new
// or removed link, a rename (both names), or a change of admin/oper state
// or carrier; stateOnly says it is the last kind. Statistics-only and
// address updates are ignored.
func (s *LinkSource) changes(u netlink.LinkUpdate) (names []string, stateOnly bool) {
	idx := u.Attrs().Index
	old, known := s.links[idx]
	if u.Header.Type == unix.RTM_DELLINK {
		delete(s.links, idx)
		return []string{u.Attrs().Name}, false
	}
	a := u.Attrs()
	v := viewOf(a.Name, a.OperState, u.Flags)
	s.links[idx] = v
	if known && old.lower && !v.lower && v.up && s.CarrierLost != nil {
		s.CarrierLost(v.name)
	}
	switch {
	case !known:
		return []string{v.name}, false
	case old.name != v.name:
		return []string{old.name, v.name}, false
	case old != v:
		return []string{v.name}, true
	}
	return nil, false
}
