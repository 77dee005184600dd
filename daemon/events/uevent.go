package events

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Uevent is one kernel uevent as broadcast on NETLINK_KOBJECT_UEVENT.
type Uevent struct {
	Action    string // add, remove, move, change, bind, ...
	DevPath   string
	Subsystem string
	Env       map[string]string
}

// ErrNotKernelUevent is returned by ParseUevent for messages that are not
// kernel uevents (udev's "libudev" monitor messages, garbage).
var ErrNotKernelUevent = errors.New("not a kernel uevent")

// ParseUevent parses the raw bytes of one uevent datagram:
// "ACTION@DEVPATH\0KEY=VALUE\0KEY=VALUE\0...".
func ParseUevent(b []byte) (Uevent, error) {
	if bytes.HasPrefix(b, []byte("libudev\x00")) {
		return Uevent{}, fmt.Errorf("%w: udev monitor message", ErrNotKernelUevent)
	}
	fields := bytes.Split(bytes.TrimRight(b, "\x00"), []byte{0})
	if len(fields) == 0 {
		return Uevent{}, fmt.Errorf("%w: empty", ErrNotKernelUevent)
	}
	head := string(fields[0])
	at := strings.IndexByte(head, '@')
	if at <= 0 || at == len(head)-1 {
		return Uevent{}, fmt.Errorf("%w: header %q", ErrNotKernelUevent, truncate(head, 64))
	}
	u := Uevent{Action: head[:at], DevPath: head[at+1:], Env: make(map[string]string, len(fields)-1)}
	for _, f := range fields[1:] {
		k, v, ok := bytes.Cut(f, []byte{'='})
		if !ok || len(k) == 0 {
			continue
		}
		u.Env[string(k)] = string(v)
	}
	if a := u.Env["ACTION"]; a != "" {
		u.Action = a
	}
	if p := u.Env["DEVPATH"]; p != "" {
		u.DevPath = p
	}
	u.Subsystem = u.Env["SUBSYSTEM"]
	return u, nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// Requester is what event sources ask of the service: look at one device,
// the devices on one netdev, or everything, again. *service.Service
// implements it.
type Requester interface {
	RequestAll()
	RequestDevice(name string)
	RequestNetdev(name string)
}

// RouteUevent turns a uevent into requests and reports whether it asked for
// anything. RDMA device add/remove re-read that device (a removed one drops
// from the state); a rename (move) re-reads both names, so the old one
// drops and the new one appears. Netdev arrival, removal and rename re-read
// the RDMA devices on that netdev, and the pass recreates a declared soft
// link whose netdev appeared.
func RouteUevent(u Uevent, r Requester) bool {
	switch u.Subsystem {
	case "infiniband":
		name := u.Env["NAME"]
		if name == "" {
			name = path.Base(u.DevPath)
		}
		if !validName(name) {
			r.RequestAll()
			return true
		}
		switch u.Action {
		case "add", "remove":
			r.RequestDevice(name)
			return true
		case "move":
			r.RequestDevice(name)
			if old := path.Base(u.Env["DEVPATH_OLD"]); validName(old) {
				r.RequestDevice(old)
			} else {
				r.RequestAll()
			}
			return true
		}
	case "net":
		name := u.Env["INTERFACE"]
		if name == "" {
			name = path.Base(u.DevPath)
		}
		switch u.Action {
		case "add", "remove", "move":
			if !validName(name) {
				r.RequestAll()
				return true
			}
			r.RequestNetdev(name)
			if old := path.Base(u.Env["DEVPATH_OLD"]); u.Action == "move" && validName(old) {
				r.RequestNetdev(old)
			}
			return true
		}
	}
	return false
}

// validName reports whether a device or interface name taken from an event
// can name a directory entry.
func validName(n string) bool {
	return n != "" && n != "." && n != ".." && n != "/" && !strings.ContainsAny(n, "/\x00")
}

// MessageReader yields one datagram per call. The uevent socket is the real
// one; tests feed byte sequences.
type MessageReader interface {
	ReadMessage() ([]byte, error)
	Close() error
}

// ErrOverflow is returned (wrapped) by a MessageReader when the kernel
// dropped messages because the receive buffer was full (ENOBUFS).
var ErrOverflow = errors.New("netlink receive buffer overflow: events lost")

// UeventSocket is a NETLINK_KOBJECT_UEVENT socket bound to the kernel's
// broadcast group (1; udev's own re-broadcasts use group 2).
type UeventSocket struct {
	f   *os.File
	buf []byte
}

// RecvBuffer is the receive buffer asked for netlink sockets: large enough
// for a burst of thousands of events (a VF storm, a driver reload).
const RecvBuffer = 8 << 20

// OpenUeventSocket opens and binds the socket in the calling thread's
// network namespace. Reads block in the runtime poller, so Close from
// another goroutine ends a pending ReadMessage.
func OpenUeventSocket() (*UeventSocket, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_KOBJECT_UEVENT)
	if err != nil {
		return nil, fmt.Errorf("uevent socket: %w", err)
	}
	// FORCE ignores rmem_max but needs CAP_NET_ADMIN; without it the
	// plain option still gets up to rmem_max.
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, RecvBuffer); err != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, RecvBuffer)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: 1}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("bind uevent socket: %w", err)
	}
	return &UeventSocket{f: os.NewFile(uintptr(fd), "uevent"), buf: make([]byte, 64<<10)}, nil
}

// ReadMessage implements MessageReader. The returned slice is only valid
// until the next call. It reads with the sender's address (recvfrom) and
// refuses a datagram that does not come from the kernel (port id 0) with a
// *ForeignSenderError.
func (s *UeventSocket) ReadMessage() ([]byte, error) {
	raw, err := s.f.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("uevent read: %w", err)
	}
	var (
		n    int
		from unix.Sockaddr
		rerr error
	)
	err = raw.Read(func(fd uintptr) bool {
		for {
			n, from, rerr = unix.Recvfrom(int(fd), s.buf, 0)
			if rerr != unix.EINTR {
				return rerr != unix.EAGAIN
			}
		}
	})
	if err == nil {
		err = rerr
	}
	if err != nil {
		if errors.Is(err, syscall.ENOBUFS) {
			return nil, fmt.Errorf("uevent: %w", ErrOverflow)
		}
		return nil, fmt.Errorf("uevent read: %w", err)
	}
	if nl, ok := from.(*unix.SockaddrNetlink); !ok || nl.Pid != 0 {
		var pid uint32
		if ok {
			pid = nl.Pid
		}
		return nil, &ForeignSenderError{Pid: pid}
	}
	return s.buf[:n], nil
}

// Close implements MessageReader.
func (s *UeventSocket) Close() error { return s.f.Close() }

// UeventSource reads uevents and routes them to a Requester.
type UeventSource struct {
	Open func() (MessageReader, error) // OpenUeventSocket in production
	Req  Requester
	Log  *slog.Logger
	// Retry waits before reopening a failed socket; it returns false when
	// ctx ended. nil: a fixed back-off.
	Retry func(ctx context.Context) bool

	drops dropLog
}

// Run reads until ctx ends. A lost event (overflow) or a reopened socket is
// answered with a full rescan, since anything may have happened meanwhile.
func (s *UeventSource) Run(ctx context.Context) error {
	log, retry := orDefaults(s.Log, s.Retry)
	reopened := false
	for {
		r, err := s.Open()
		if err != nil {
			log.Error("uevent socket unavailable; RDMA hotplug is not seen until it opens", "err", err)
			if !retry(ctx) {
				return nil
			}
			continue
		}
		if reopened {
			s.Req.RequestAll()
		}
		err = s.read(ctx, r, log)
		r.Close()
		if ctx.Err() != nil {
			return nil
		}
		log.Warn("uevent socket failed; reopening and rescanning", "err", err)
		reopened = true
		if !retry(ctx) {
			return nil
		}
	}
}

// read routes messages until the reader fails; ctx ending closes r.
func (s *UeventSource) read(ctx context.Context, r MessageReader, log *slog.Logger) error {
	stop := context.AfterFunc(ctx, func() { r.Close() })
	defer stop()
	for {
		msg, err := r.ReadMessage()
		if errors.Is(err, ErrForeignSender) {
			s.drops.note(log, err)
			continue
		}
		if errors.Is(err, ErrOverflow) {
			log.Warn("uevents lost (receive buffer overflow); rescanning everything")
			s.Req.RequestAll()
			continue
		}
		if err != nil {
			return err
		}
		u, err := ParseUevent(msg)
		if err != nil {
			continue // udev's own messages and anything else not from the kernel
		}
		if RouteUevent(u, s.Req) {
			log.Debug("uevent", "action", u.Action, "subsystem", u.Subsystem, "devpath", u.DevPath)
		}
	}
}
