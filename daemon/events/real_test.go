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
