package bus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/rdmad/rdmad/daemon/reconcile"
	"github.com/rdmad/rdmad/dbusapi"
)

// ReadPorts: the ports' settings as the kernel holds them at the call
// (rdmactl roce show and qos show), read by rdmad on demand: rdmactl
// reads no kernel itself (it runs against --root fixtures and from
// pods). Anyone may read, as anyone may read the properties, but a live
// read costs the kernel work a pass's read costs (at 1,024 devices, every
// port's configfs files and every netdev's DCB and ethtool state), so the
// reads under way are bounded like plans: liveSlots in all, liveSlotsPerUID
// for a uid other than root, and such uids hold at most
// liveSlots-liveRootSlots, so users cannot keep root's rdmactl from
// reading. A call that finds no slot is told Busy at once. A slot belongs
// to the read, not to the call: a read that does not answer keeps it
// until it returns.
const (
	liveSlots       = 8
	liveSlotsPerUID = 2
	liveRootSlots   = 2
	// liveTimeout bounds a read's call, below the 25 s D-Bus clients
	// wait by default: only a kernel read that does not answer comes
	// near it (1,024 devices read in well under a second).
	liveTimeout = 20 * time.Second
)

// callerUID is the uid of the connection that sent msg, as the bus
// authenticated it (only the uid: identify's process details are for
// the calls that are logged).
func (s *Server) callerUID(msg dbus.Message) (uint32, error) {
	sender, _ := msg.Headers[dbus.FieldSender].Value().(string)
	ctx, cancel := context.WithTimeout(context.Background(), identifyTimeout)
	defer cancel()
	var uid uint32
	if err := s.conn.Load().BusObject().CallWithContext(ctx, "org.freedesktop.DBus.GetConnectionUnixUser", 0, sender).Store(&uid); err != nil {
		return 0, fmt.Errorf("cannot identify caller %s: %w", sender, err)
	}
	return uid, nil
}

// ReadPorts reads the settings of the ports of device (every device's for
// ""), or of its port port (0: every port), now, and returns them as
// org.rdmad1.Port properties by object path, with the time of the read
// (microseconds since the epoch).
func (m *manager) ReadPorts(msg dbus.Message, device string, port uint32) (uint64, map[dbus.ObjectPath]map[string]dbus.Variant, *dbus.Error) {
	device = dbusapi.Unescape(device) // as the Device's Name spells it
	check := func() error {
		if err := portArg(port); err != nil {
			return err
		}
		return m.s.svc.CheckReadPorts(device, int(port))
	}
	if _, e := m.admit(msg, "ReadPorts", call{check: check}); e != nil {
		return 0, nil, e
	}
	uid, err := m.s.callerUID(msg)
	if err != nil {
		return 0, nil, busError(err)
	}
	release, err := m.s.lives.take(uid)
	if err != nil {
		m.s.refuse(msg, "ReadPorts", ReasonBusy, "call refused", "err", err)
		return 0, nil, busy(dbusapi.Escape(err.Error()))
	}
	timeout := liveTimeout
	if h := m.s.hook(); h != nil && h.liveTimeout > 0 {
		timeout = h.liveTimeout
	}
	live, err := untilDeadline(timeout, release, func(ctx context.Context) (reconcile.Live, error) {
		return m.s.svc.ReadPorts(ctx, device, int(port))
	})
	if errors.Is(err, context.DeadlineExceeded) {
		return 0, nil, busy(fmt.Sprintf("ReadPorts: not done within %s; a kernel read does not answer or the host is overloaded: try again later", timeout))
	}
	if err != nil {
		return 0, nil, busError(err)
	}
	// At 1,024 devices the reply is as big as GetManagedObjects': its
	// garbage goes back to the system once sent, as that one's does.
	defer m.s.reclaim.soon()
	ports := map[dbus.ObjectPath]map[string]dbus.Variant{}
	for i := range live.Devices {
		ds := &live.Devices[i]
		for _, p := range deviceModel(ds).Ports {
			if port == 0 || p.Number == port {
				ports[dbusapi.PortPath(ds.Name, int(p.Number))] = dbusapi.ToProps(p)
			}
		}
	}
	return uint64(live.At.UnixMicro()), ports, nil
}
