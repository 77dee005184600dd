// Package rdmares reads the RDMA netlink resource tracker's queue pairs
// (RDMA_NLDEV_CMD_RES_QP_GET, what `rdma resource show qp` lists): which
// queue pairs exist on a device, of which type, on which port, and whose
// they are (a process, or a kernel module such as ib_ipoib, nvme_rdma or
// rpcrdma). rdmactl qualify refuses a port that carries any but the
// kernel's own management queue pairs. The values are from
// include/uapi/rdma/rdma_netlink.h and drivers/infiniband/core/nldev.c.
//
// The kernel lists a queue pair to a process in the initial PID
// namespace whatever namespace made it, but to a process in another PID
// namespace only those of its own namespace, and no kernel queue pair
// (rdma_is_visible_in_pid_ns): a dump is whole in the initial PID
// namespace only.
package rdmares

import (
	"errors"
	"fmt"
	"strings"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/rdmad/rdmad/daemon/nlattr"
)

// The uapi this package reads (include/uapi/rdma/rdma_netlink.h).
const (
	nlNLDev         = 5  // RDMA_NL_NLDEV
	cmdResQPGet     = 10 // RDMA_NLDEV_CMD_RES_QP_GET
	attrDevIndex    = 1  // u32
	attrDevName     = 2  // string
	attrPortIndex   = 3  // u32
	attrResQP       = 19 // nested table
	attrResQPEntry  = 20 // nested table
	attrResLQPN     = 21 // u32
	attrResType     = 26 // u8, enum ib_qp_type
	attrResState    = 27 // u8, enum ib_qp_state
	attrResPID      = 28 // u32: a user-space queue pair's process
	attrResKernName = 29 // string: a kernel queue pair's module
)

// QP is one queue pair as the resource tracker lists it.
type QP struct {
	Device string `json:"device"`
	// Port is the port the queue pair is bound to; 0 for one not bound
	// yet (a new queue pair in RESET), which may go to any port.
	Port  int    `json:"port,omitempty"`
	LQPN  uint32 `json:"lqpn"`
	Type  string `json:"type"`  // SMI, GSI, RC, UC, UD, RAW_PACKET, XRC_INI, XRC_TGT, DRIVER...
	State string `json:"state"` // RESET, INIT, RTR, RTS, SQD, SQE, ERR
	// PID is the process of a user-space queue pair; Kernel the module
	// of a kernel one (ib_core, ib_ipoib, nvme_rdma, rpcrdma...).
	PID    uint32 `json:"pid,omitempty"`
	Kernel string `json:"kernel,omitempty"`
}

// qpTypes are enum ib_qp_type's names, as iproute2's rdma tool prints
// them.
var qpTypes = map[uint8]string{0: "SMI", 1: "GSI", 2: "RC", 3: "UC", 4: "UD", 5: "RAW_IPV6", 6: "RAW_ETHERTYPE",
	8: "RAW_PACKET", 9: "XRC_INI", 10: "XRC_TGT", 0xff: "DRIVER"}

var qpStates = []string{"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"}

// Management reports whether q is the kernel's own management queue pair
// of its port: the subnet management (SMI, QP0) and general services (GSI,
// QP1) queue pairs ib_core's MAD layer makes on every port, and the queue
// pairs a driver makes for them itself (mlx5 sends GSI traffic on UD
// queue pairs of its own, drivers/infiniband/hw/mlx5/gsi.c), which belong
// to ib_core or to the driver's own module. Every other queue pair,
// a kernel user's (IPoIB, NVMe over RDMA, NFS over RDMA, SMB Direct) as a
// process's, carries traffic.
func (q QP) Management(driverModule string) bool {
	switch {
	case q.Type == "SMI" || q.Type == "GSI":
		return true
	case q.PID != 0 || q.Kernel == "":
		return false
	}
	return q.Type == "UD" && (q.Kernel == "ib_core" || driverModule != "" && q.Kernel == driverModule)
}

// Owner is who made q, as rdmactl says it: "pid 4242" or "kernel
// ib_ipoib".
func (q QP) Owner() string {
	if q.Kernel != "" {
		return "kernel " + q.Kernel
	}
	return fmt.Sprintf("pid %d", q.PID)
}

// Dumper lists the queue pairs of an RDMA device. Netlink is the real one.
type Dumper interface {
	QueuePairs(device string) ([]QP, error)
}

// Netlink dumps the kernel's resource tracker over RDMA netlink, in the
// caller's network namespace.
type Netlink struct{}

// QueuePairs implements Dumper.
func (Netlink) QueuePairs(device string) ([]QP, error) {
	link, err := netlink.RdmaLinkByName(device)
	if err != nil {
		return nil, fmt.Errorf("find RDMA device %s: %w", device, err)
	}
	req := nl.NewNetlinkRequest(nlNLDev<<10|cmdResQPGet, unix.NLM_F_DUMP)
	req.AddData(nl.NewRtAttr(attrDevIndex, nl.Uint32Attr(link.Attrs.Index)))
	msgs, err := req.Execute(unix.NETLINK_RDMA, 0)
	for try := 0; errors.Is(err, netlink.ErrDumpInterrupted) && try < 3; try++ {
		msgs, err = req.Execute(unix.NETLINK_RDMA, 0) // queue pairs came or went meanwhile
	}
	if err != nil {
		return nil, fmt.Errorf("dump the queue pairs of %s: %w", device, err)
	}
	qps, err := Parse(msgs)
	if err != nil {
		return nil, fmt.Errorf("dump the queue pairs of %s: %w", device, err)
	}
	return qps, nil
}

// ErrMalformed is a reply that does not read as the kernel writes it.
var ErrMalformed = errors.New("malformed RDMA netlink resource message")

// Parse reads the messages of a RES_QP_GET dump (each one's attributes,
// without its netlink header): the device's name, then a table of entries,
// one per queue pair.
func Parse(msgs [][]byte) ([]QP, error) {
	var out []QP
	for _, m := range msgs {
		attrs, err := nlattr.Parse(m)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
		}
		dev := ""
		for _, a := range attrs {
			if a.Type == attrDevName {
				dev = cString(a)
			}
		}
		for _, a := range attrs {
			if a.Type != attrResQP {
				continue
			}
			entries, err := nlattr.Parse(a.Value)
			if err != nil {
				return nil, fmt.Errorf("%w: queue pair table: %w", ErrMalformed, err)
			}
			for _, e := range entries {
				if e.Type != attrResQPEntry {
					continue
				}
				q, err := parseEntry(dev, e.Value)
				if err != nil {
					return nil, err
				}
				out = append(out, q)
			}
		}
	}
	return out, nil
}

func parseEntry(dev string, b []byte) (QP, error) {
	attrs, err := nlattr.Parse(b)
	if err != nil {
		return QP{}, fmt.Errorf("%w: queue pair: %w", ErrMalformed, err)
	}
	q := QP{Device: dev}
	bad := func(what string, a nlattr.Attr) error {
		return fmt.Errorf("%w: %s of %d bytes", ErrMalformed, what, len(a.Value))
	}
	for _, a := range attrs {
		switch a.Type {
		case attrPortIndex:
			n, ok := a.Uint32()
			if !ok {
				return QP{}, bad("port", a)
			}
			q.Port = int(n)
		case attrResLQPN:
			n, ok := a.Uint32()
			if !ok {
				return QP{}, bad("lqpn", a)
			}
			q.LQPN = n
		case attrResType:
			v, ok := a.Uint8()
			if !ok {
				return QP{}, bad("type", a)
			}
			q.Type = qpTypes[v]
			if q.Type == "" {
				q.Type = fmt.Sprintf("type %d", v)
			}
		case attrResState:
			v, ok := a.Uint8()
			if !ok {
				return QP{}, bad("state", a)
			}
			q.State = fmt.Sprintf("state %d", v)
			if int(v) < len(qpStates) {
				q.State = qpStates[v]
			}
		case attrResPID:
			n, ok := a.Uint32()
			if !ok {
				return QP{}, bad("pid", a)
			}
			q.PID = n
		case attrResKernName:
			q.Kernel = cString(a)
		}
	}
	return q, nil
}

// cString is a string attribute, cut at 64 bytes (IB_DEVICE_NAME_MAX;
// module names are shorter) and without bytes that are not printable.
func cString(a nlattr.Attr) string {
	v := a.String()
	if len(v) > 64 {
		v = v[:64]
	}
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return -1
		}
		return r
	}, v)
}
