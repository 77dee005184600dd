package ethtool

import (
	"errors"
	"fmt"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/rdmad/rdmad/daemon/nlattr"
)

// Notification is one message of the ethtool monitor group: which netdev
// changed and what (Cmd: ETHTOOL_MSG_PAUSE_NTF for pause; the group also
// carries features, channels, link modes...). Nothing else in it is
// trusted: a notification only says "read this netdev again".
type Notification struct {
	Cmd     uint8
	Ifindex uint32
	Ifname  string
}

// Pause reports whether the notification is about global pause.
func (n Notification) Pause() bool { return n.Cmd == CmdPauseNtf }

// ParseNotification decodes the payload (after the nlmsghdr) of a monitor
// message: every ETHTOOL_MSG_*_NTF starts with its request header nest as
// attribute 1, holding the netdev's index and name.
func ParseNotification(msg []byte) (Notification, error) {
	if len(msg) < 4 {
		return Notification{}, fmt.Errorf("notification of %d bytes has no genlmsghdr", len(msg))
	}
	n := Notification{Cmd: msg[0]}
	as, err := nlattr.Parse(msg[4:])
	if err != nil {
		return Notification{}, fmt.Errorf("notification attributes: %w", err)
	}
	for _, a := range as {
		if a.Type != attrPauseHeader {
			continue
		}
		hs, err := nlattr.Parse(a.Value)
		if err != nil {
			return Notification{}, fmt.Errorf("notification header: %w", err)
		}
		for _, h := range hs {
			switch h.Type {
			case attrHeaderDevIndex:
				if len(h.Value) >= 4 {
					n.Ifindex = nl.NativeEndian().Uint32(h.Value)
				}
			case attrHeaderDevName:
				n.Ifname = h.String()
			}
		}
	}
	return n, nil
}

// ForeignSenderError is a message on the monitor socket that did not come
// from the kernel (netlink port id 0): dropped.
type ForeignSenderError struct{ Pid uint32 }

func (e *ForeignSenderError) Error() string {
	return fmt.Sprintf("ethtool monitor: message from port id %d, the kernel's is 0: dropped", e.Pid)
}

// Monitor is a socket subscribed to the ethtool monitor group in the
// network namespace it was opened in (the kernel multicasts a netdev's
// notifications in the netdev's namespace).
type Monitor struct {
	sock   *nl.NetlinkSocket
	family uint16
}

// OpenMonitor resolves the ethtool family and joins its monitor group.
// Generic netlink group ids are allocated at run time and may be above
// 32, so the group is joined with NETLINK_ADD_MEMBERSHIP, not the bind
// mask.
func OpenMonitor(bufferBytes int) (*Monitor, error) {
	fam, group, err := KernelFamily()
	if err != nil {
		return nil, err
	}
	if group == 0 {
		return nil, fmt.Errorf("the %s family has no %q group", Family, MonitorGroup)
	}
	sock, err := nl.Subscribe(unix.NETLINK_GENERIC)
	if err != nil {
		return nil, fmt.Errorf("ethtool monitor socket: %w", err)
	}
	if err := unix.SetsockoptInt(sock.GetFd(), unix.SOL_NETLINK, unix.NETLINK_ADD_MEMBERSHIP, int(group)); err != nil {
		sock.Close()
		return nil, fmt.Errorf("ethtool monitor: join group %d: %w", group, err)
	}
	if bufferBytes > 0 {
		// Forcing past rmem_max needs CAP_NET_ADMIN, which rdmad has.
		if err := sock.SetReceiveBufferSize(bufferBytes, true); err != nil {
			_ = sock.SetReceiveBufferSize(bufferBytes, false)
		}
	}
	return &Monitor{sock: sock, family: fam}, nil
}

// Receive blocks for the next datagram and returns its ethtool
// notifications. An error wrapping unix.ENOBUFS means the kernel dropped
// some (read everything again); a *ForeignSenderError, a message not from
// the kernel (ignore it). Any other error ends the subscription (Close
// makes Receive return one).
func (m *Monitor) Receive() ([]Notification, error) {
	msgs, from, err := m.sock.Receive()
	if err != nil {
		return nil, fmt.Errorf("ethtool monitor: %w", err)
	}
	if from.Pid != nl.PidKernel {
		return nil, &ForeignSenderError{Pid: from.Pid}
	}
	var out []Notification
	var bad error
	for _, msg := range msgs {
		if msg.Header.Type != m.family {
			continue
		}
		n, err := ParseNotification(msg.Data)
		if err != nil {
			bad = errors.Join(bad, err)
			continue
		}
		out = append(out, n)
	}
	return out, bad
}

// Close closes the socket.
func (m *Monitor) Close() { m.sock.Close() }
