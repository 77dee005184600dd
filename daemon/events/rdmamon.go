package events

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/rdmad/rdmad/daemon/nlattr"
)

// The RDMA netlink monitor (Linux 6.12 and later; iproute2's `rdma monitor`):
// the kernel multicasts RDMA_NLDEV_CMD_MONITOR messages on NETLINK_RDMA group
// RDMA_NL_GROUP_NOTIFY to the RDMA network namespace of the device. Values
// are from include/uapi/rdma/rdma_netlink.h and drivers/infiniband/core/nldev.c
// (rdma_nl_notify_event), checked against Debian's linux-source-6.12
// 6.12.117-1; the two rename events come from later kernels.
const (
	rdmaNLNLDev       = 5 // RDMA_NL_NLDEV: the nldev client
	rdmaNLGroupNotify = 4 // RDMA_NL_GROUP_NOTIFY

	nldevCmdSysGet  = 6  // RDMA_NLDEV_CMD_SYS_GET
	nldevCmdMonitor = 28 // RDMA_NLDEV_CMD_MONITOR

	nldevAttrDevIndex       = 1   // u32
	nldevAttrDevName        = 2   // string
	nldevAttrPortIndex      = 3   // u32
	nldevAttrNdevIndex      = 50  // u32
	nldevAttrNdevName       = 51  // string
	nldevAttrEventType      = 102 // u8, enum rdma_nl_notify_event_type
	nldevSysAttrMonitorMode = 103 // u8, 1 where the monitor exists

	// ibDeviceNameMax is IB_DEVICE_NAME_MAX, including the NUL.
	ibDeviceNameMax = 64
)

// rdmaNLType is RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, op).
func rdmaNLType(op uint16) uint16 { return rdmaNLNLDev<<10 | op }

// MonitorEventType is enum rdma_nl_notify_event_type.
type MonitorEventType uint8

// The monitor events; 6.12 sends the first four.
const (
	MonitorRegister     MonitorEventType = iota // device registered: index, name
	MonitorUnregister                           // device unregistering: index, name
	MonitorNetdevAttach                         // port got a netdev: index, name, port, netdev index and name
	MonitorNetdevDetach                         // port lost its netdev: index, name, port
	MonitorRename                               // device renamed: index, new name
	MonitorNetdevRename                         // a port's netdev renamed: netdev index and name only
)

func (t MonitorEventType) String() string {
	switch t {
	case MonitorRegister:
		return "register"
	case MonitorUnregister:
		return "unregister"
	case MonitorNetdevAttach:
		return "netdev-attach"
	case MonitorNetdevDetach:
		return "netdev-detach"
	case MonitorRename:
		return "rename"
	case MonitorNetdevRename:
		return "netdev-rename"
	}
	return fmt.Sprintf("event(%d)", uint8(t))
}

// MonitorEvent is one RDMA_NLDEV_CMD_MONITOR message. Names are "" when the
// kernel did not send one or sent one rdmad cannot use as a device name.
type MonitorEvent struct {
	Type        MonitorEventType
	HasDevice   bool // DevIndex was sent
	DevIndex    uint32
	DevName     string
	Port        uint32
	NetdevIndex uint32
	NetdevName  string
}

// ErrMalformed is returned (wrapped) for a netlink message rdmad cannot parse.
var ErrMalformed = errors.New("malformed RDMA netlink message")

// ParseMonitor parses the raw bytes of one NETLINK_RDMA datagram (one or more
// netlink messages) into monitor events. Messages of other types are
// skipped; NLMSG_OVERRUN is ErrOverflow. On a malformed message it returns
// the events before it and an error: the caller cannot know what it missed.
func ParseMonitor(b []byte) ([]MonitorEvent, error) {
	var evs []MonitorEvent
	for len(b) > 0 {
		if len(b) < unix.SizeofNlMsghdr {
			return evs, fmt.Errorf("%w: %d trailing bytes", ErrMalformed, len(b))
		}
		n := int(binary.NativeEndian.Uint32(b[0:4]))
		typ := binary.NativeEndian.Uint16(b[4:6])
		if n < unix.SizeofNlMsghdr || n > len(b) {
			return evs, fmt.Errorf("%w: message length %d of %d bytes", ErrMalformed, n, len(b))
		}
		body := b[unix.SizeofNlMsghdr:n]
		b = b[min(nlattr.Align(n), len(b)):]
		switch typ {
		case unix.NLMSG_OVERRUN:
			return evs, fmt.Errorf("RDMA netlink: %w", ErrOverflow)
		case rdmaNLType(nldevCmdMonitor):
			ev, err := parseMonitorAttrs(body)
			if err != nil {
				return evs, err
			}
			evs = append(evs, ev)
		}
	}
	return evs, nil
}

func parseMonitorAttrs(b []byte) (MonitorEvent, error) {
	var ev MonitorEvent
	var bad []string
	hasType := false
	u32 := func(name string, a nlattr.Attr) uint32 {
		v, ok := a.Uint32()
		if !ok {
			bad = append(bad, fmt.Sprintf("%s of %d bytes", name, len(a.Value)))
		}
		return v
	}
	for a, err := range nlattr.All(b) {
		if err != nil {
			return ev, fmt.Errorf("%w: %w", ErrMalformed, err)
		}
		switch a.Type {
		case nldevAttrEventType:
			t, ok := a.Uint8()
			if !ok {
				bad = append(bad, fmt.Sprintf("event type of %d bytes", len(a.Value)))
				continue
			}
			ev.Type, hasType = MonitorEventType(t), true
		case nldevAttrDevIndex:
			ev.DevIndex, ev.HasDevice = u32("device index", a), true
		case nldevAttrDevName:
			ev.DevName = deviceName(a.Value)
		case nldevAttrPortIndex:
			ev.Port = u32("port", a)
		case nldevAttrNdevIndex:
			ev.NetdevIndex = u32("netdev index", a)
		case nldevAttrNdevName:
			ev.NetdevName = deviceName(a.Value)
		}
	}
	switch {
	case len(bad) > 0:
		return ev, fmt.Errorf("%w: %s", ErrMalformed, strings.Join(bad, ", "))
	case !hasType:
		return ev, fmt.Errorf("%w: monitor message without event type", ErrMalformed)
	}
	return ev, nil
}

// deviceName returns a NUL-terminated netlink string if it can name a device
// under /sys/class: the name reaches file paths, so anything else ("", ".",
// "..", a slash, control bytes, invalid UTF-8, too long) is dropped.
func deviceName(v []byte) string {
	if i := strings.IndexByte(string(v), 0); i >= 0 {
		v = v[:i]
	}
	s := string(v)
	if !validName(s) || len(s) >= ibDeviceNameMax || !utf8.ValidString(s) {
		return ""
	}
	for _, r := range s {
		if r == '/' || r <= ' ' || r == 0x7f {
			return ""
		}
	}
	return s
}

// monitorRouter turns monitor events into requests. It keeps the index ->
// name of every device it knows, because a rename names only the new name
// and a message may lack a name the kernel sent earlier.
type monitorRouter struct {
	names map[uint32]string
}

// route asks for what ev changed. It returns true when the event was the
// removal of the last device rdmad knew of.
func (m *monitorRouter) route(ev MonitorEvent, r Requester) bool {
	name := ev.DevName
	if name == "" && ev.HasDevice {
		name = m.names[ev.DevIndex]
	}
	switch ev.Type {
	case MonitorRegister, MonitorNetdevAttach, MonitorNetdevDetach:
		if !ev.HasDevice || name == "" {
			// A netdev in another namespace is sent without the device;
			// whatever it was, a full pass sees it.
			r.RequestAll()
			return false
		}
		m.names[ev.DevIndex] = name
		r.RequestDevice(name)
	case MonitorUnregister:
		if !ev.HasDevice || name == "" {
			r.RequestAll()
			return false
		}
		_, known := m.names[ev.DevIndex]
		delete(m.names, ev.DevIndex)
		r.RequestDevice(name)
		return known && len(m.names) == 0
	case MonitorRename:
		old, known := m.names[ev.DevIndex]
		if !ev.HasDevice || ev.DevName == "" || !known {
			// Without the old name its state cannot be dropped by name.
			if ev.HasDevice && ev.DevName != "" {
				m.names[ev.DevIndex] = ev.DevName
			}
			r.RequestAll()
			return false
		}
		m.names[ev.DevIndex] = ev.DevName
		if old != ev.DevName {
			r.RequestDevice(old)
		}
		r.RequestDevice(ev.DevName)
	case MonitorNetdevRename:
		// Names no RDMA device, only the netdev's new name: the devices
		// on it (their netdev selectors); the old name comes by rtnetlink.
		if ev.NetdevName == "" {
			r.RequestAll()
			return false
		}
		r.RequestNetdev(ev.NetdevName)
	default:
		// News from a newer kernel: look at everything.
		r.RequestAll()
	}
	return false
}

// RDMAMonitorSource follows the kernel's RDMA netlink monitor where the
// kernel has one (6.12+) and stays silent, after one info log, where it has
// not: uevents remain the baseline on every kernel.
//
// The socket pins ib_core (the kernel takes a module reference for every
// NETLINK_RDMA socket), and opening one on a host without RDMA would load
// ib_core. So the source opens it only when ib_core is there and a device
// exists, and closes it when the last device it knew of unregisters; Wake
// tells it to look again.
type RDMAMonitorSource struct {
	Ready   func() bool                       // ib_core is loaded
	Wake    <-chan struct{}                   // an RDMA device may have appeared; nil: poll with Retry
	Probe   func() (bool, error)              // ProbeRDMAMonitor in production
	Open    func() (MessageReader, error)     // OpenRDMAMonitor in production
	Devices func() (map[uint32]string, error) // RDMADevices in production
	Req     Requester
	Log     *slog.Logger
	Retry   func(ctx context.Context) bool // nil: fixed back-off
}

// errNoDevices ends a read loop when the last known device went away.
var errNoDevices = errors.New("no RDMA devices left")

// Run follows the monitor until ctx ends.
func (s *RDMAMonitorSource) Run(ctx context.Context) error {
	log, retry := orDefaults(s.Log, s.Retry)
	wait := func() bool {
		if s.Wake == nil {
			return retry(ctx)
		}
		select {
		case <-ctx.Done():
			return false
		case <-s.Wake:
			return true
		}
	}
	check := true // look now, without waiting for a wake
	lost := false // events may have been missed: rescan once reading again
	announced := false
	for {
		if !check && !wait() {
			return nil
		}
		check = false
		if !s.Ready() {
			continue
		}
		ok, err := s.Probe()
		if err != nil {
			// Tried again at the next sign of RDMA activity, not in a loop.
			log.Warn("RDMA netlink monitor probe failed; uevents only until the next device event", "err", err)
			continue
		}
		if !ok {
			log.Info("kernel has no RDMA netlink monitor; RDMA device events come from uevents")
			<-ctx.Done()
			return nil
		}
		r, err := s.Open()
		if err != nil {
			log.Warn("RDMA netlink monitor socket unavailable; uevents only until the next device event", "err", err)
			continue
		}
		names, listed := s.devices(log)
		if listed && len(names) == 0 {
			// Nothing to follow: do not hold ib_core.
			r.Close()
			continue
		}
		router := &monitorRouter{names: names}
		if !announced {
			log.Info("following the RDMA netlink monitor", "devices", len(router.names))
			announced = true
		}
		if lost {
			s.Req.RequestAll()
			lost = false
		}
		err = s.read(ctx, r, router, log)
		r.Close()
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, errNoDevices) {
			log.Debug("last RDMA device gone; RDMA netlink monitor socket closed until one appears")
			continue
		}
		log.Warn("RDMA netlink monitor socket failed; reopening and rescanning", "err", err)
		lost = true
		if check = retry(ctx); !check {
			return nil
		}
	}
}

// devices lists the present devices. On failure (listed false) it returns
// an empty map and the monitor is followed anyway: renames of devices seen
// before are resolved by full passes instead (see monitorRouter).
func (s *RDMAMonitorSource) devices(log *slog.Logger) (names map[uint32]string, listed bool) {
	names, err := s.Devices()
	if err != nil {
		log.Warn("listing RDMA devices failed; renames of earlier devices cost a full pass", "err", err)
		return map[uint32]string{}, false
	}
	return names, true
}

// read routes messages until the reader fails, ctx ends (which closes r),
// or the last device is gone.
func (s *RDMAMonitorSource) read(ctx context.Context, r MessageReader, router *monitorRouter, log *slog.Logger) error {
	stop := context.AfterFunc(ctx, func() { r.Close() })
	defer stop()
	for {
		msg, err := r.ReadMessage()
		if err != nil && !errors.Is(err, ErrOverflow) {
			return err
		}
		var evs []MonitorEvent
		if err == nil {
			evs, err = ParseMonitor(msg)
		}
		for _, ev := range evs {
			log.Debug("RDMA monitor event", "event", ev.Type, "index", ev.DevIndex, "device", ev.DevName,
				"port", ev.Port, "netdev", ev.NetdevName)
			if router.route(ev, s.Req) && s.gone(log) {
				return errNoDevices
			}
		}
		switch {
		case errors.Is(err, ErrOverflow):
			log.Warn("RDMA monitor events lost (receive buffer overflow); rescanning everything")
			router.names, _ = s.devices(log)
			s.Req.RequestAll()
		case err != nil:
			log.Warn("unreadable RDMA monitor message; rescanning everything", "err", err)
			s.Req.RequestAll()
		}
	}
}

// gone confirms with the kernel that no device is left: the map may have
// missed a registration.
func (s *RDMAMonitorSource) gone(log *slog.Logger) bool {
	names, err := s.Devices()
	if err != nil {
		log.Debug("listing RDMA devices failed; keeping the monitor socket", "err", err)
		return false
	}
	return len(names) == 0
}

// WakeOn passes requests on to r and pokes wake (without blocking) after
// each, so an RDMAMonitorSource waiting for ib_core or a first device looks
// again when another source saw RDMA activity.
func WakeOn(r Requester, wake chan<- struct{}) Requester { return waker{r, wake} }

type waker struct {
	Requester
	wake chan<- struct{}
}

func (w waker) RequestAll()               { w.Requester.RequestAll(); w.poke() }
func (w waker) RequestDevice(name string) { w.Requester.RequestDevice(name); w.poke() }
func (w waker) RequestNetdev(name string) { w.Requester.RequestNetdev(name); w.poke() }
func (w waker) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// RDMAMonitorSocket is a NETLINK_RDMA socket subscribed to the monitor group
// in the calling thread's network namespace.
type RDMAMonitorSocket struct {
	f   *os.File
	rc  syscall.RawConn
	buf []byte
}

// OpenRDMAMonitor opens and subscribes the socket. Reads block in the
// runtime poller, so Close from another goroutine ends a pending read.
func OpenRDMAMonitor() (*RDMAMonitorSocket, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_RDMA)
	if err != nil {
		return nil, fmt.Errorf("RDMA netlink socket: %w", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, RecvBuffer); err != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, RecvBuffer)
	}
	// nl_groups is a bit mask: group N is bit N-1 (iproute2's nl_mgrp).
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: 1 << (rdmaNLGroupNotify - 1)}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("subscribe to RDMA netlink monitor group: %w", err)
	}
	f := os.NewFile(uintptr(fd), "rdma-monitor")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("RDMA netlink socket: %w", err)
	}
	return &RDMAMonitorSocket{f: f, rc: rc, buf: make([]byte, 64<<10)}, nil
}

// ReadMessage implements MessageReader: one datagram from the kernel
// (messages from other senders are dropped). The slice is valid until the
// next call.
func (s *RDMAMonitorSocket) ReadMessage() ([]byte, error) {
	for {
		var n int
		var from unix.Sockaddr
		var rerr error
		err := s.rc.Read(func(fd uintptr) bool {
			n, from, rerr = unix.Recvfrom(int(fd), s.buf, 0)
			return !errors.Is(rerr, unix.EAGAIN)
		})
		switch {
		case err != nil:
			return nil, fmt.Errorf("RDMA monitor read: %w", err)
		case errors.Is(rerr, unix.ENOBUFS):
			return nil, fmt.Errorf("RDMA monitor: %w", ErrOverflow)
		case rerr != nil:
			return nil, fmt.Errorf("RDMA monitor read: %w", rerr)
		}
		if sa, ok := from.(*unix.SockaddrNetlink); ok && sa.Pid == 0 {
			return s.buf[:n], nil
		}
	}
}

// Close implements MessageReader.
func (s *RDMAMonitorSocket) Close() error { return s.f.Close() }

// ProbeRDMAMonitor asks the kernel (RDMA_NLDEV_CMD_SYS_GET) whether it
// multicasts monitor events, as `rdma monitor` does.
func ProbeRDMAMonitor() (bool, error) {
	req := nl.NewNetlinkRequest(int(rdmaNLType(nldevCmdSysGet)), unix.NLM_F_ACK)
	msgs, err := req.Execute(unix.NETLINK_RDMA, 0)
	if err != nil {
		return false, fmt.Errorf("rdma system show: %w", err)
	}
	for _, m := range msgs {
		if on, err := monitorMode(m); err != nil || on {
			return on, err
		}
	}
	return false, nil
}

// monitorMode reads RDMA_NLDEV_SYS_ATTR_MONITOR_MODE from the attributes of
// a SYS_GET reply; kernels before 6.12 do not send it.
func monitorMode(attrs []byte) (bool, error) {
	on := false
	for a, err := range nlattr.All(attrs) {
		if err != nil {
			return false, fmt.Errorf("%w: %w", ErrMalformed, err)
		}
		if v, ok := a.Uint8(); ok && a.Type == nldevSysAttrMonitorMode {
			on = v == 1
		}
	}
	return on, nil
}

// RDMADevices returns the index -> name of the RDMA devices of this network
// namespace (an RDMA_NLDEV_CMD_GET dump).
func RDMADevices() (map[uint32]string, error) {
	links, err := netlink.RdmaLinkList()
	if err != nil {
		return nil, fmt.Errorf("rdma dev show: %w", err)
	}
	names := make(map[uint32]string, len(links))
	for _, l := range links {
		names[l.Attrs.Index] = l.Attrs.Name
	}
	return names, nil
}
