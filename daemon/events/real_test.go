package events

import (
	"context"
	"io"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// newNetns creates a network namespace for the test on a thread that is
// never unlocked (so it dies with its goroutine) and opens a real uevent
// socket in it. Kernel uevents of netdevs are delivered only to their own
// namespace, so the test sees its own veth and nothing of the host's.
func newNetns(t *testing.T) (netns.NsHandle, *UeventSocket) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for a network namespace")
	}
	type result struct {
		ns   netns.NsHandle
		sock *UeventSocket
		err  error
		skip bool
	}
	c := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			c <- result{err: err, skip: true}
			return
		}
		ns, err := netns.Get()
		if err != nil {
			c <- result{err: err}
			return
		}
		sock, err := OpenUeventSocket()
		c <- result{ns: ns, sock: sock, err: err}
	}()
	r := <-c
	if r.skip {
		t.Skipf("cannot create a network namespace: %v", r.err)
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(func() { r.sock.Close(); r.ns.Close() })
	return r.ns, r.sock
}

func addVeth(t *testing.T, ns netns.NsHandle, name string) {
	t.Helper()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: name + "p"}
	if err := h.LinkAdd(veth); err != nil {
		t.Skipf("cannot create a veth pair here: %v", err)
	}
}

// TestRealUeventSocketSeesNetdev opens the real NETLINK_KOBJECT_UEVENT
// socket and checks that it receives the kernel's SUBSYSTEM=net add uevent
// for a veth created by the test, and that routing asks for a full pass.
func TestRealUeventSocketSeesNetdev(t *testing.T) {
	ns, sock := newNetns(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // failure guard
	defer cancel()
	stop := context.AfterFunc(ctx, func() { sock.Close() })
	defer stop()

	addVeth(t, ns, "rdmadtest0")
	for {
		msg, err := sock.ReadMessage()
		if err != nil {
			t.Fatalf("no uevent for rdmadtest0: %v", err)
		}
		u, err := ParseUevent(msg)
		if err != nil {
			continue
		}
		if u.Subsystem == "net" && u.Action == "add" && u.Env["INTERFACE"] == "rdmadtest0" {
			r := &recorder{}
			if !RouteUevent(u, r) || r.got() != "netdev:rdmadtest0" {
				t.Errorf("routing of the real uevent: %q", r.got())
			}
			return
		}
	}
}

// TestRealRTNetlinkSeesNetdev subscribes through the real RTNetlink and the
// LinkSource and checks that a new veth asks for a pass over that netdev.
func TestRealRTNetlinkSeesNetdev(t *testing.T) {
	ns, _ := newNetns(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // failure guard
	defer cancel()

	updates := make(chan netlink.LinkUpdate, 16)
	done := make(chan struct{})
	if err := (RTNetlink{Namespace: &ns}).Subscribe(updates, done, func(err error) { t.Logf("subscription error: %v", err) }); err != nil {
		t.Fatal(err)
	}
	addVeth(t, ns, "rdmadtest1")
	seen := false
	for !seen {
		select {
		case u := <-updates:
			seen = u.Attrs().Name == "rdmadtest1" && u.Header.Type == unix.RTM_NEWLINK
		case <-ctx.Done():
			t.Fatal("no RTM_NEWLINK for rdmadtest1")
		}
	}
	close(done)
	for range updates { // the subscription closes its channel when done
	}

	// The same through LinkSource: a second veth becomes a request to look
	// at what sits on it.
	req := make(chanRequester, 64)
	src := &LinkSource{Sub: RTNetlink{Namespace: &ns}, Req: req, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	srcCtx, srcCancel := context.WithCancel(ctx)
	stopped := make(chan struct{})
	go func() { src.Run(srcCtx); close(stopped) }()
	// The subscription is asynchronous; keep creating links until one is
	// seen, so the test does not depend on when it is in place.
	for i := 0; ; i++ {
		addVeth(t, ns, "rdmadt"+string(rune('a'+i)))
		select {
		case r := <-req:
			if !strings.HasPrefix(r, "netdev:rdmadt") {
				t.Fatalf("request %q", r)
			}
			srcCancel()
			<-stopped
			return
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
			t.Fatal("LinkSource made no request")
		}
		if i > 20 {
			t.Fatal("LinkSource made no request")
		}
	}
}

// spoofer is a netlink socket of protocol in ns, owned by this process
// (a user-space port id), sending to multicast group mask groups: what any
// root process can do.
func spoofer(t *testing.T, ns netns.NsHandle, protocol int, groups uint32) func(msg []byte) {
	t.Helper()
	c := make(chan int, 1)
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies in ns
		if err := netns.Set(ns); err != nil {
			errc <- err
			return
		}
		fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, protocol)
		if err != nil {
			errc <- err
			return
		}
		c <- fd
	}()
	var fd int
	select {
	case fd = <-c:
	case err := <-errc:
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return func(msg []byte) {
		t.Helper()
		if err := unix.Sendto(fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: groups}); err != nil {
			t.Fatalf("spoof: %v", err)
		}
	}
}

// A uevent sent by a user-space process to the kernel's group (nl_pid is
// not 0) is dropped: no request, no pass; the kernel's own uevents still
// come through. Before: every spoofed uevent was routed (10,000 of them made
// 38 full passes).
func TestSpoofedUeventIsDropped(t *testing.T) {
	ns, sock := newNetns(t)
	send := spoofer(t, ns, unix.NETLINK_KOBJECT_UEVENT, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // failure guard
	defer cancel()
	req := make(chanRequester, 64)
	src := &UeventSource{Open: func() (MessageReader, error) { return sock, nil }, Req: req,
		Log: slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	stopped := make(chan struct{})
	go func() { src.Run(ctx); close(stopped) }()
	defer func() { cancel(); <-stopped }()

	for i := 0; i < 100; i++ {
		send([]byte("add@/devices/virtual/infiniband/mlx5_9\x00ACTION=add\x00DEVPATH=/devices/virtual/infiniband/mlx5_9\x00SUBSYSTEM=infiniband\x00NAME=mlx5_9\x00SEQNUM=1\x00"))
		send([]byte("remove@/devices/virtual/net/eth0\x00ACTION=remove\x00SUBSYSTEM=net\x00INTERFACE=eth0\x00"))
	}
	addVeth(t, ns, "rdmadspoof")
	for {
		switch r := next(t, ctx, req); r {
		case "netdev:rdmadspoof", "netdev:rdmadspoofp":
			return // the kernel's uevent, after every spoofed one: none came through
		default:
			t.Fatalf("request %q from a spoofed uevent", r)
		}
	}
}

// An RTM_NEWLINK multicast by a user-space process is dropped by the
// subscription without a rescan; real link changes still arrive. Before:
// each one was reported as lost events and rescanned everything.
func TestSpoofedRTNetlinkMessageCausesNoRescan(t *testing.T) {
	ns, _ := newNetns(t)
	send := spoofer(t, ns, unix.NETLINK_ROUTE, 1<<(unix.RTNLGRP_LINK-1))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // failure guard
	defer cancel()
	req := make(chanRequester, 256)
	src := &LinkSource{Sub: RTNetlink{Namespace: &ns}, Req: req, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	stopped := make(chan struct{})
	go func() { src.Run(ctx); close(stopped) }()
	defer func() { cancel(); <-stopped }()

	msg := nl.NewNetlinkRequest(unix.RTM_NEWLINK, 0)
	msg.AddData(nl.NewIfInfomsg(unix.AF_UNSPEC))
	msg.AddData(nl.NewRtAttr(unix.IFLA_IFNAME, nl.ZeroTerminated("spoof0")))
	spoof := msg.Serialize()
	// The subscription starts asynchronously: make links until one is seen,
	// so it is in place; then spoof, then one more real link, and nothing
	// but the real links may have been asked for.
	for i := 0; ; i++ {
		addVeth(t, ns, "rdmadsp"+string(rune('a'+i)))
		r := ""
		select {
		case r = <-req:
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
		}
		if r != "" {
			break
		}
		if i > 20 || ctx.Err() != nil {
			t.Fatal("LinkSource made no request")
		}
	}
	for j := 0; j < 50; j++ {
		send(spoof)
	}
	addVeth(t, ns, "rdmadlast")
	for {
		r := next(t, ctx, req)
		switch {
		case r == "netdev:rdmadlast":
			return
		case !strings.HasPrefix(r, "netdev:rdmadsp") && r != "netdev:rdmadlastp":
			t.Fatalf("request %q after spoofed link messages", r)
		}
	}
}

// TestRealRTNetlinkKnowsLinksAtStart: a veth that is up with its carrier
// before the source starts loses the carrier (its peer goes down); the
// real RTNetlink's dump made it known, so that is a change of state and a
// counted carrier loss, not the netdev's arrival.
func TestRealRTNetlinkKnowsLinksAtStart(t *testing.T) {
	ns, _ := newNetns(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // failure guard
	defer cancel()
	addVeth(t, ns, "rdmadk")
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	setUp := func(name string, up bool) {
		t.Helper()
		l, err := h.LinkByName(name)
		if err != nil {
			t.Fatal(err)
		}
		if up {
			err = h.LinkSetUp(l)
		} else {
			err = h.LinkSetDown(l)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	setUp("rdmadk", true)
	setUp("rdmadkp", true)
	for {
		l, err := h.LinkByName("rdmadk")
		if err != nil {
			t.Fatal(err)
		}
		if l.Attrs().RawFlags&unix.IFF_LOWER_UP != 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("rdmadk never got its carrier")
		case <-time.After(10 * time.Millisecond):
		}
	}
	req := stateRequester{make(chanRequester, 64)}
	lost := make(chan string, 4)
	src := &LinkSource{Sub: RTNetlink{Namespace: &ns}, Req: req, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		CarrierLost: func(n string) { lost <- n }}
	srcCtx, srcCancel := context.WithCancel(ctx)
	stopped := make(chan struct{})
	go func() { src.Run(srcCtx); close(stopped) }()
	defer func() { srcCancel(); <-stopped }()
	// The source subscribes and dumps in the background, then reads the
	// subscription: a new link's arrival, once seen, says the dump is done.
	for i := 0; ; i++ {
		addVeth(t, ns, "rdmadr"+string(rune('a'+i)))
		select {
		case r := <-req.chanRequester:
			if r == "netdev:rdmadk" || r == "state:rdmadk" {
				t.Fatalf("request %q before rdmadk changed", r)
			}
		case <-time.After(200 * time.Millisecond):
			if i > 20 {
				t.Fatal("LinkSource made no request")
			}
			continue
		case <-ctx.Done():
			t.Fatal("LinkSource made no request")
		}
		break
	}
	setUp("rdmadkp", false)
	for {
		select {
		case r := <-req.chanRequester:
			if r == "netdev:rdmadk" {
				t.Fatal("rdmadk's first carrier drop was taken for its arrival")
			}
			if r != "state:rdmadk" {
				continue // the peer's own change
			}
			select {
			case n := <-lost:
				if n != "rdmadk" {
					t.Fatalf("carrier lost of %q", n)
				}
			case <-ctx.Done():
				t.Fatal("rdmadk's carrier loss was not counted")
			}
			return
		case <-ctx.Done():
			t.Fatal("no request for rdmadk's carrier drop")
		}
	}
}
