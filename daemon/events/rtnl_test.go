package events

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

func linkUpdate(typ uint16, index int, name string, oper netlink.LinkOperState, flags uint32) netlink.LinkUpdate {
	return netlink.LinkUpdate{
		IfInfomsg: nl.IfInfomsg{IfInfomsg: unix.IfInfomsg{Index: int32(index), Flags: flags}},
		Header:    unix.NlMsghdr{Type: typ},
		Link:      &netlink.Device{LinkAttrs: netlink.LinkAttrs{Index: index, Name: name, OperState: oper}},
	}
}

func TestLinkChangeFilter(t *testing.T) {
	s := &LinkSource{links: map[int]linkView{}}
	up := uint32(unix.IFF_UP | unix.IFF_LOWER_UP)
	steps := []struct {
		name string
		u    netlink.LinkUpdate
		want []string // the netdevs to look at again
	}{
		{"new netdev", linkUpdate(unix.RTM_NEWLINK, 3, "eth1", netlink.OperDown, 0), []string{"eth1"}},
		{"same again (stats)", linkUpdate(unix.RTM_NEWLINK, 3, "eth1", netlink.OperDown, 0), nil},
		{"comes up", linkUpdate(unix.RTM_NEWLINK, 3, "eth1", netlink.OperUp, up), []string{"eth1"}},
		{"still up", linkUpdate(unix.RTM_NEWLINK, 3, "eth1", netlink.OperUp, up), nil},
		{"renamed", linkUpdate(unix.RTM_NEWLINK, 3, "enp1s0", netlink.OperUp, up), []string{"eth1", "enp1s0"}},
		{"carrier lost", linkUpdate(unix.RTM_NEWLINK, 3, "enp1s0", netlink.OperLowerLayerDown, unix.IFF_UP), []string{"enp1s0"}},
		{"removed", linkUpdate(unix.RTM_DELLINK, 3, "enp1s0", netlink.OperDown, 0), []string{"enp1s0"}},
		{"same index reused", linkUpdate(unix.RTM_NEWLINK, 3, "veth9", netlink.OperDown, 0), []string{"veth9"}},
		// A driver that reports no operstate (UNKNOWN) says a carrier
		// change in the flags alone; so does one between two updates of
		// the same operstate.
		{"no operstate, carrier", linkUpdate(unix.RTM_NEWLINK, 5, "dummy0", netlink.OperUnknown, up), []string{"dummy0"}},
		{"no operstate, carrier lost", linkUpdate(unix.RTM_NEWLINK, 5, "dummy0", netlink.OperUnknown, unix.IFF_UP), []string{"dummy0"}},
		{"no operstate, taken down", linkUpdate(unix.RTM_NEWLINK, 5, "dummy0", netlink.OperUnknown, 0), []string{"dummy0"}},
		{"no operstate, nothing new", linkUpdate(unix.RTM_NEWLINK, 5, "dummy0", netlink.OperUnknown, 0), nil},
	}
	// A change of state or carrier alone is not an arrival.
	stateOnly := map[string]bool{"comes up": true, "carrier lost": true,
		"no operstate, carrier lost": true, "no operstate, taken down": true}
	for _, st := range steps {
		got, state := s.changes(st.u)
		if !reflect.DeepEqual(got, st.want) {
			t.Errorf("%s: changed = %v, want %v", st.name, got, st.want)
		}
		if state != stateOnly[st.name] {
			t.Errorf("%s: state only = %v, want %v", st.name, state, stateOnly[st.name])
		}
	}
}

// A loss of carrier while the netdev stays up is told to CarrierLost; a
// netdev taken down, a new one and one that never had carrier are not.
func TestLinkSourceTellsCarrierLosses(t *testing.T) {
	// Each loss is told at the update that lost the carrier of a link
	// that stays up (step 2), not at one that sets the link down (step 4).
	var lost []string
	step := 0
	s := &LinkSource{links: map[int]linkView{}, CarrierLost: func(n string) { lost = append(lost, fmt.Sprintf("%s at %d", n, step)) }}
	up := uint32(unix.IFF_UP | unix.IFF_LOWER_UP)
	for i, u := range []netlink.LinkUpdate{
		linkUpdate(unix.RTM_NEWLINK, 4, "ens1f0np0", netlink.OperDown, unix.IFF_UP), // new, no carrier yet
		linkUpdate(unix.RTM_NEWLINK, 4, "ens1f0np0", netlink.OperUp, up),
		linkUpdate(unix.RTM_NEWLINK, 4, "ens1f0np0", netlink.OperLowerLayerDown, unix.IFF_UP), // cable pulled
		linkUpdate(unix.RTM_NEWLINK, 4, "ens1f0np0", netlink.OperUp, up),
		linkUpdate(unix.RTM_NEWLINK, 4, "ens1f0np0", netlink.OperDown, 0), // ip link set down
		linkUpdate(unix.RTM_NEWLINK, 5, "ens1f1np1", netlink.OperUp, up),  // new and up
	} {
		step = i
		s.changed(u)
	}
	if !reflect.DeepEqual(lost, []string{"ens1f0np0 at 2"}) {
		t.Errorf("carrier losses %v, want one of ens1f0np0 at 2 (the cable pulled)", lost)
	}
}

// fakeSubscriber hands each subscription to the test.
type fakeSubscriber struct {
	subs chan *fakeSub
	fail error // returned by the next Subscribe, then cleared
	mu   sync.Mutex
}

type fakeSub struct {
	ch      chan<- netlink.LinkUpdate
	onError func(error)
	once    sync.Once
}

func (s *fakeSub) end() { s.once.Do(func() { close(s.ch) }) }

func (f *fakeSubscriber) Subscribe(ch chan<- netlink.LinkUpdate, done <-chan struct{}, onError func(error)) error {
	f.mu.Lock()
	err := f.fail
	f.fail = nil
	f.mu.Unlock()
	if err != nil {
		return err
	}
	s := &fakeSub{ch: ch, onError: onError}
	go func() { <-done; s.end() }()
	f.subs <- s
	return nil
}

// waitReq waits for the next request on a signalling recorder.
type chanRequester chan string

func (c chanRequester) RequestAll()               { c <- "*" }
func (c chanRequester) RequestDevice(name string) { c <- "device:" + name }
func (c chanRequester) RequestNetdev(name string) { c <- "netdev:" + name }

func next(t *testing.T, ctx context.Context, c chanRequester) string {
	t.Helper()
	select {
	case r := <-c:
		return r
	case <-ctx.Done():
		t.Fatal("no request")
		return ""
	}
}

func TestLinkSourceRescansOnLossAndResubscribes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // failure guard
	defer cancel()
	sub := &fakeSubscriber{subs: make(chan *fakeSub, 4), fail: errors.New("EPERM")}
	req := make(chanRequester, 64)
	src := &LinkSource{Sub: sub, Req: req, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Retry: func(ctx context.Context) bool { return ctx.Err() == nil }}
	done := make(chan struct{})
	go func() { src.Run(ctx); close(done) }()

	// The first Subscribe fails; the source retries.
	s1 := <-sub.subs
	s1.ch <- linkUpdate(unix.RTM_NEWLINK, 5, "eth1", netlink.OperUp, unix.IFF_UP)
	if r := next(t, ctx, req); r != "netdev:eth1" {
		t.Fatalf("netdev appeared: %q", r)
	}
	// A rename names both the old and the new name.
	s1.ch <- linkUpdate(unix.RTM_NEWLINK, 5, "eth9", netlink.OperUp, unix.IFF_UP)
	if r1, r2 := next(t, ctx, req), next(t, ctx, req); r1 != "netdev:eth1" || r2 != "netdev:eth9" {
		t.Fatalf("rename: %q %q", r1, r2)
	}
	// A message from another sender, dropped by the subscription: nothing
	// was lost, no rescan (the next request is the link change after it).
	s1.onError(&ForeignSenderError{Pid: 4242})
	s1.ch <- linkUpdate(unix.RTM_NEWLINK, 5, "eth9", netlink.OperDown, unix.IFF_UP)
	if r := next(t, ctx, req); r != "netdev:eth9" {
		t.Fatalf("a foreign message made request %q", r)
	}
	// Lost events reported by the subscription (ENOBUFS): rescan.
	s1.onError(fmt.Errorf("events: rtnetlink: %w", ErrOverflow))
	if r := next(t, ctx, req); r != "*" {
		t.Fatalf("after error: %q", r)
	}
	// The subscription dies: resubscribe, and rescan (twice is fine: once
	// for the end, once after the new subscription is in place).
	s1.end()
	s2 := <-sub.subs
	next(t, ctx, req)
	next(t, ctx, req)
	// Link state is forgotten across subscriptions: eth1 counts as news.
	s2.ch <- linkUpdate(unix.RTM_NEWLINK, 5, "eth1", netlink.OperUp, unix.IFF_UP)
	if r := next(t, ctx, req); r != "netdev:eth1" {
		t.Fatalf("after resubscribe: %q", r)
	}
	cancel()
	<-done
}

// listingSubscriber is a fakeSubscriber that also lists the links that
// exist when it is asked (as RTNetlink dumps them).
type listingSubscriber struct {
	*fakeSubscriber
	links []netlink.Link
}

func (l listingSubscriber) Links() ([]netlink.Link, error) { return l.links, nil }

// stateRequester records requests, telling a netdev's change of state
// from its arrival, as the service does.
type stateRequester struct{ chanRequester }

func (s stateRequester) RequestNetdevState(name string) { s.chanRequester <- "state:" + name }

// A netdev that exists when rdmad starts is known: its first carrier drop
// is a change of state (no policy applied over [drift] action) and a
// carrier loss counted, not the netdev's arrival.
func TestLinkSourceKnowsLinksAtStart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // failure guard
	defer cancel()
	up := uint32(unix.IFF_UP | unix.IFF_LOWER_UP)
	sub := listingSubscriber{fakeSubscriber: &fakeSubscriber{subs: make(chan *fakeSub, 1)}, links: []netlink.Link{
		&netlink.Device{LinkAttrs: netlink.LinkAttrs{Index: 4, Name: "ens1f0np0", OperState: netlink.OperUp, RawFlags: up}},
	}}
	req := stateRequester{make(chanRequester, 16)}
	lost := make(chan string, 4)
	src := &LinkSource{Sub: sub, Req: req, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		CarrierLost: func(n string) { lost <- n }}
	done := make(chan struct{})
	go func() { src.Run(ctx); close(done) }()
	s := <-sub.subs
	s.ch <- linkUpdate(unix.RTM_NEWLINK, 4, "ens1f0np0", netlink.OperLowerLayerDown, unix.IFF_UP)
	if r := next(t, ctx, req.chanRequester); r != "state:ens1f0np0" {
		t.Errorf("the first carrier drop of a netdev there at start asked %q, want state:ens1f0np0 (not an arrival)", r)
	}
	select {
	case n := <-lost:
		if n != "ens1f0np0" {
			t.Errorf("carrier lost of %q", n)
		}
	default:
		t.Error("the first carrier drop of a netdev there at start was not counted")
	}
	// A netdev that was not there is still an arrival.
	s.ch <- linkUpdate(unix.RTM_NEWLINK, 7, "ens2", netlink.OperUp, up)
	if r := next(t, ctx, req.chanRequester); r != "netdev:ens2" {
		t.Errorf("a new netdev asked %q, want netdev:ens2", r)
	}
	cancel()
	<-done
}
