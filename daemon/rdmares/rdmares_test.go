package rdmares

import (
	"errors"
	"reflect"
	"testing"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// entry builds one RDMA_NLDEV_ATTR_RES_QP_ENTRY as nldev.c's
// fill_res_qp_entry writes it: the port when the queue pair has one, the
// local QPN, the remote QPN and PSNs (ignored here), the type, the state,
// then the process or the kernel module (fill_res_name_pid), inside a
// nest flagged NLA_F_NESTED (nla_nest_start).
func entry(port uint32, lqpn uint32, typ, state uint8, pid uint32, kern string) *nl.RtAttr {
	e := nl.NewRtAttr(attrResQPEntry|unix.NLA_F_NESTED, nil)
	if port != 0 {
		e.AddRtAttr(attrPortIndex, nl.Uint32Attr(port))
	}
	e.AddRtAttr(attrResLQPN, nl.Uint32Attr(lqpn))
	e.AddRtAttr(22, nl.Uint32Attr(77))   // RDMA_NLDEV_ATTR_RES_RQPN
	e.AddRtAttr(24, nl.Uint32Attr(1234)) // RDMA_NLDEV_ATTR_RES_SQ_PSN
	e.AddRtAttr(attrResType, []byte{typ})
	e.AddRtAttr(attrResState, []byte{state})
	if kern != "" {
		e.AddRtAttr(attrResKernName, nl.ZeroTerminated(kern))
	} else {
		e.AddRtAttr(attrResPID, nl.Uint32Attr(pid))
	}
	return e
}

func message(dev string, entries ...*nl.RtAttr) []byte {
	var b []byte
	b = append(b, nl.NewRtAttr(attrDevIndex, nl.Uint32Attr(3)).Serialize()...)
	b = append(b, nl.NewRtAttr(attrDevName, nl.ZeroTerminated(dev)).Serialize()...)
	table := nl.NewRtAttr(attrResQP|unix.NLA_F_NESTED, nil)
	for _, e := range entries {
		table.AddChild(e)
	}
	return append(b, table.Serialize()...)
}

func TestParseDump(t *testing.T) {
	msgs := [][]byte{
		message("mlx5_0",
			entry(1, 1, 1, 3, 0, "ib_core"),   // GSI
			entry(1, 225, 4, 3, 0, "mlx5_ib"), // mlx5's GSI transmit queue pair
			entry(1, 226, 4, 3, 0, "ib_ipoib")),
		message("mlx5_0",
			entry(1, 301, 2, 3, 4242, ""),  // a process's RC queue pair
			entry(0, 302, 2, 0, 4243, "")), // new, not bound to a port
	}
	got, err := Parse(msgs)
	if err != nil {
		t.Fatal(err)
	}
	want := []QP{
		{Device: "mlx5_0", Port: 1, LQPN: 1, Type: "GSI", State: "RTS", Kernel: "ib_core"},
		{Device: "mlx5_0", Port: 1, LQPN: 225, Type: "UD", State: "RTS", Kernel: "mlx5_ib"},
		{Device: "mlx5_0", Port: 1, LQPN: 226, Type: "UD", State: "RTS", Kernel: "ib_ipoib"},
		{Device: "mlx5_0", Port: 1, LQPN: 301, Type: "RC", State: "RTS", PID: 4242},
		{Device: "mlx5_0", LQPN: 302, Type: "RC", State: "RESET", PID: 4243},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("parsed\n%+v\nwant\n%+v", got, want)
	}
	management := []bool{true, true, false, false, false}
	for i, q := range got {
		if q.Management("mlx5_ib") != management[i] {
			t.Errorf("%+v: management %v, want %v", q, q.Management("mlx5_ib"), management[i])
		}
	}
	if got[2].Owner() != "kernel ib_ipoib" || got[3].Owner() != "pid 4242" {
		t.Errorf("owners %q %q", got[2].Owner(), got[3].Owner())
	}
	// A process's UD queue pair is traffic, whoever's driver it runs on.
	if (QP{Type: "UD", PID: 7}).Management("mlx5_ib") {
		t.Error("a process's UD queue pair counted as management")
	}
}

func TestParseRefusesTruncated(t *testing.T) {
	m := message("rxe0", entry(1, 1, 1, 3, 0, "ib_core"))
	for _, cut := range []int{len(m) - 1, len(m) - 9, 13} {
		if _, err := Parse([][]byte{m[:cut]}); !errors.Is(err, ErrMalformed) {
			t.Errorf("cut at %d of %d: %v", cut, len(m), err)
		}
	}
}

// Whatever the kernel (or a reply cut short) sends, Parse returns an error
// or queue pairs; it never panics.
func FuzzParse(f *testing.F) {
	f.Add(message("mlx5_0", entry(1, 1, 1, 3, 0, "ib_core"), entry(1, 301, 2, 3, 4242, "")))
	f.Add(message("rxe0"))
	f.Add([]byte{8, 0, 19, 0x80, 4, 0, 20, 0x80})
	f.Fuzz(func(t *testing.T, b []byte) {
		qps, err := Parse([][]byte{b})
		if err != nil && !errors.Is(err, ErrMalformed) {
			t.Fatalf("an error that is not ErrMalformed: %v", err)
		}
		_ = qps
	})
}
