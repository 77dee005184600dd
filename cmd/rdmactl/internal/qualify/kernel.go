package qualify

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/rdmad/rdmad/daemon/dcb"
	"github.com/rdmad/rdmad/daemon/ethtool"
	"github.com/rdmad/rdmad/daemon/events"
	"github.com/rdmad/rdmad/daemon/fixturekernel"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/rdmares"
)

// Kernel is what qualify reads, writes and listens to: the host's files
// (configfs rdma_cm, sysfs), DCB netlink, ethtool, the RDMA resource
// tracker and the notifications and carrier changes the kernel sends. On
// a host they are the kernel's (Host); on a fixture (Fixture) the
// fixture's files, its fixture/kernel.json served and announced as rdmad
// serves and announces it under --root, and its fixture/qp.json.
type Kernel struct {
	Host    *host.Host
	DCB     dcb.Kernel
	Ethtool ethtool.Kernel
	QPs     rdmares.Dumper
	// Listen starts listening for the notifications and carrier changes
	// of netdev and the directories dirs (relative to the host root); the
	// events come on the channel until ctx ends. It returns once every
	// source listens.
	Listen func(ctx context.Context, netdev string, dirs []string) (<-chan Event, error)
	// Release is the running kernel's release (uname -r), or the
	// fixture's ("" when it does not say).
	Release string
	// InitialPIDNamespace says whether qualify runs in the initial PID
	// namespace, where the resource dump lists every queue pair (nil: not
	// asked, a fixture).
	InitialPIDNamespace func() (bool, error)
	// Fixture is set on a fixture: its files are plain files, which
	// qualify puts back byte for byte.
	Fixture bool
}

// EventKind is what an Event says.
type EventKind uint8

const (
	EventInotify     EventKind = iota // a file of a watched directory was written (IN_MODIFY)
	EventDCB                          // a DCB notification (RTNLGRP_DCB) for the netdev
	EventPause                        // an ethtool pause notification for the netdev
	EventCarrierDown                  // the netdev lost its carrier while up
	EventCarrierUp                    // the netdev got its carrier back
)

// Event is one notification or carrier change, with when it came.
type Event struct {
	Kind EventKind
	Dir  string // EventInotify: the directory, relative to the host root
	At   time.Time
}

// HostKernel is the kernel of the machine qualify runs on.
func HostKernel() *Kernel {
	h := host.New("/")
	k := &Kernel{Host: h, DCB: dcb.Netlink{}, Ethtool: ethtool.Netlink{}, QPs: rdmares.Netlink{},
		InitialPIDNamespace: initialPIDNamespace}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		k.Release = unix.ByteSliceToString(u.Release[:])
	}
	k.Listen = func(ctx context.Context, netdev string, dirs []string) (<-chan Event, error) {
		return listenHost(ctx, h, netdev, dirs)
	}
	return k
}

// FixtureKernel is the kernel of the fixture at root, as rdmad --root
// serves it.
func FixtureKernel(root string) *Kernel {
	h := host.New(root)
	fk := fixturekernel.New(h)
	k := &Kernel{Host: h, DCB: fk, Ethtool: fk, QPs: fk, Fixture: true}
	if s, err := h.ReadString("proc/sys/kernel/osrelease"); err == nil {
		k.Release = s
	}
	k.Listen = func(ctx context.Context, netdev string, dirs []string) (<-chan Event, error) {
		return listenFixture(ctx, h, netdev, dirs)
	}
	return k
}

// initPIDNamespaceInode is PROC_PID_INIT_INO, the inode of the initial
// PID namespace (include/linux/proc_ns.h).
const initPIDNamespaceInode = 0xEFFFFFFC

func initialPIDNamespace() (bool, error) {
	link, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		return false, fmt.Errorf("read this process's PID namespace: %w", err)
	}
	return link == fmt.Sprintf("pid:[%d]", initPIDNamespaceInode), nil
}

// sink collects events for a listener's sources.
type sink struct {
	ch  chan Event
	ctx context.Context
}

func (s sink) send(e Event) {
	e.At = time.Now()
	select {
	case s.ch <- e:
	case <-s.ctx.Done():
	}
}

// watchDirs sends an EventInotify for each write in dirs (a configfs
// attribute's write is IN_MODIFY on its directory).
func watchDirs(ctx context.Context, h *host.Host, dirs []string, s sink) error {
	if len(dirs) == 0 {
		return nil
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch directories: %w", err)
	}
	byPath := map[string]string{}
	for _, d := range dirs {
		abs := h.Path(d)
		if err := w.Add(abs); err != nil {
			w.Close()
			return fmt.Errorf("watch %s: %w", abs, err)
		}
		byPath[abs] = d
	}
	go func() {
		defer w.Close()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				if ev.Op&fsnotify.Write != 0 {
					s.send(Event{Kind: EventInotify, Dir: byPath[filepath.Dir(ev.Name)]})
				}
			case _, ok := <-w.Errors:
				if !ok {
					return
				}
			}
		}
	}()
	return nil
}

// netdevRechecker is a DCB or pause source's requester: each notification
// for the netdev is an event of its kind.
type netdevRechecker struct {
	netdev string
	kind   EventKind
	s      sink
}

func (r netdevRechecker) RecheckNetdev(name string) {
	if name == r.netdev {
		r.s.send(Event{Kind: r.kind})
	}
}
func (netdevRechecker) RequestAll() {}

// listenHost listens to the kernel: inotify on dirs, DCB notifications,
// ethtool pause notifications and the netdev's carrier from rtnetlink,
// each subscribed before it returns.
func listenHost(ctx context.Context, h *host.Host, netdev string, dirs []string) (<-chan Event, error) {
	s := sink{ch: make(chan Event, 64), ctx: ctx}
	if err := watchDirs(ctx, h, dirs, s); err != nil {
		return nil, err
	}
	quiet := discardLog()
	dcbMon, err := events.OpenDCBMonitor()
	if err != nil {
		return nil, fmt.Errorf("listen to DCB notifications: %w", err)
	}
	go (&events.DCBSource{Open: once(dcbMon), Req: netdevRechecker{netdev, EventDCB, s}, Log: quiet, Retry: stopRetry}).Run(ctx)
	if pauseMon, err := events.OpenPauseMonitor(); err == nil {
		go (&events.PauseSource{Open: once(pauseMon), Req: netdevRechecker{netdev, EventPause, s}, Log: quiet, Retry: stopRetry}).Run(ctx)
	} else if !errors.Is(err, ethtool.ErrNoFamily) {
		return nil, fmt.Errorf("listen to ethtool notifications: %w", err)
	}
	if err := listenCarrier(ctx, netdev, s); err != nil {
		return nil, err
	}
	return s.ch, nil
}

// once hands a monitor already open to a source, once: a source that
// would reopen it gets an error and, with stopRetry, stops.
func once[M any](m M) func() (M, error) {
	var mu sync.Mutex
	used := false
	return func() (M, error) {
		mu.Lock()
		defer mu.Unlock()
		if used {
			var zero M
			return zero, errors.New("the notification socket closed")
		}
		used = true
		return m, nil
	}
}

func stopRetry(context.Context) bool { return false }

// listenCarrier follows netdev's carrier (IFF_LOWER_UP) on rtnetlink: a
// loss while the netdev is up is EventCarrierDown, its return
// EventCarrierUp.
func listenCarrier(ctx context.Context, netdev string, s sink) error {
	updates := make(chan netlink.LinkUpdate, 64)
	if err := (events.RTNetlink{}).Subscribe(updates, ctx.Done(), func(error) {}); err != nil {
		return fmt.Errorf("listen to %s's carrier: %w", netdev, err)
	}
	lower := true
	if l, err := netlink.LinkByName(netdev); err == nil {
		lower = l.Attrs().RawFlags&unix.IFF_LOWER_UP != 0
	}
	go func() {
		for u := range updates {
			if u.Attrs().Name != netdev || u.Header.Type != unix.RTM_NEWLINK {
				continue
			}
			now := u.Flags&unix.IFF_LOWER_UP != 0
			switch {
			case lower && !now && u.Flags&unix.IFF_UP != 0:
				s.send(Event{Kind: EventCarrierDown})
			case !lower && now:
				s.send(Event{Kind: EventCarrierUp})
			}
			lower = now
		}
	}()
	return nil
}

// listenFixture listens to a fixture: inotify on dirs (its files are
// plain files), and its fixture/kernel.json's changes as rdmad --root
// takes them: a DCB or pause notification, and mlx5's carrier drop on a
// PFC mask change.
func listenFixture(ctx context.Context, h *host.Host, netdev string, dirs []string) (<-chan Event, error) {
	s := sink{ch: make(chan Event, 64), ctx: ctx}
	if err := watchDirs(ctx, h, dirs, s); err != nil {
		return nil, err
	}
	if !fixturekernel.Present(h) {
		return s.ch, nil
	}
	on := func(kind EventKind) func(string) {
		return func(name string) {
			if name == netdev {
				s.send(Event{Kind: kind})
			}
		}
	}
	ready := make(chan struct{})
	w := &fixturekernel.Watcher{Host: h, DCBChanged: on(EventDCB), PauseChanged: on(EventPause),
		CarrierLost: on(EventCarrierDown), StateChanged: on(EventCarrierUp), Log: discardLog(),
		Ready: func() { close(ready) }}
	errc := make(chan error, 1)
	go func() { errc <- w.Run(ctx) }()
	select {
	case <-ready:
		return s.ch, nil
	case err := <-errc:
		if err == nil {
			err = ctx.Err()
		}
		return nil, fmt.Errorf("listen to the fixture's %s: %w", fixturekernel.File, err)
	}
}

// dirsOf are the directories whose writes announce a port's file-backed
// settings: the configfs port directory, OFED's traffic class and ECN
// directories, those that exist.
func dirsOf(h *host.Host, dev string, port int, netdev string) []string {
	var out []string
	for _, d := range []string{host.ConfigfsPortPath(dev, port), trafficClassDir(dev, port),
		ecnDir(netdev, "roce_rp", "enable"), ecnDir(netdev, "roce_np", "enable"), ecnDir(netdev, "roce_np")} {
		if fi, err := os.Stat(h.Path(d)); err == nil && fi.IsDir() {
			out = append(out, d)
		}
	}
	return out
}

func trafficClassDir(dev string, port int) string {
	return strings.Join([]string{host.ClassInfiniband, dev, "tc", fmt.Sprint(port)}, "/")
}

func ecnDir(netdev string, elem ...string) string {
	return strings.Join(append([]string{host.ClassNet, netdev, "ecn"}, elem...), "/")
}
