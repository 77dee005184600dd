package hosttest

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// SynthGIDs is how many GID table entries each synthetic port lists; the
// first two are populated (RoCE v1 and v2 of the link-local address), the
// rest read empty, as unpopulated entries do.
const SynthGIDs = 16

// Synth writes a host with n dual-port ConnectX-5 RoCE functions (an
// SR-IOV host: mlx5_0 .. mlx5_<n-1>, 2n ports) under root, laid out as
// the kernel does: class links, PCI functions with their driver, netdevs,
// GID tables, the port counters mlx5 has (SynthPMACounters,
// SynthHWCounters) and configfs rdma_cm with kernel defaults. Benchmarks
// generate it; nothing of it is checked in.
func Synth(root string, n int) error {
	w := func(rel, data string) error {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		return os.WriteFile(p, []byte(data), 0o644)
	}
	link := func(target, rel string) error {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		return os.Symlink(target, p)
	}
	for _, f := range []struct{ rel, data string }{
		{"proc/modules", "configfs 1 0 - Live 0x0\nib_core 1 0 - Live 0x0\nrdma_cm 1 0 - Live 0x0\nmlx5_core 1 0 - Live 0x0\nmlx5_ib 1 0 - Live 0x0\n"},
		{"sys/bus/pci/drivers/mlx5_core/uevent", ""},
		{"etc/rdma/modules/rdma.conf", "# none: the benchmarks measure policy, not modprobe\n"},
	} {
		if err := w(f.rel, f.data); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(filepath.Join(root, "sys/kernel/config/rdma_cm"), 0o755); err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("mlx5_%d", i)
		pci := fmt.Sprintf("0000:%02x:%02x.%d", 0x10+i/256, (i/8)%32, i%8)
		pciDir := "sys/devices/pci0000:00/" + pci
		dev := pciDir + "/infiniband/" + name
		netdev := SynthNetdev(i)
		guid := fmt.Sprintf("b859:9f03:%04x:%04x", i>>16, i&0xffff)
		files := map[string]string{
			pciDir + "/vendor":                       "0x15b3\n",
			dev + "/node_type":                       "1: CA\n",
			dev + "/node_guid":                       guid + "\n",
			dev + "/sys_image_guid":                  guid + "\n",
			dev + "/fw_ver":                          "16.35.2000\n",
			dev + "/hca_type":                        "MT4120\n",
			dev + "/board_id":                        "MT_0000000080\n",
			pciDir + "/net/" + netdev + "/operstate": "up\n",
		}
		for port := 1; port <= 2; port++ {
			p := fmt.Sprintf("%s/ports/%d/", dev, port)
			files[p+"state"] = "4: ACTIVE\n"
			files[p+"phys_state"] = "5: LinkUp\n"
			files[p+"rate"] = "100 Gb/sec (4X EDR)\n"
			files[p+"link_layer"] = "Ethernet\n"
			files[p+"lid"] = "0x0000\n"
			files[p+"sm_lid"] = "0x0000\n"
			for g := 0; g < SynthGIDs; g++ {
				typ, ndev := "", ""
				switch g {
				case 0:
					typ, ndev = "IB/RoCE v1\n", netdev+"\n"
				case 1:
					typ, ndev = "RoCE v2\n", netdev+"\n"
				}
				files[fmt.Sprintf("%sgid_attrs/types/%d", p, g)] = typ
				files[fmt.Sprintf("%sgid_attrs/ndevs/%d", p, g)] = ndev
			}
			for _, c := range SynthPMACounters {
				files[p+"counters/"+c] = "0\n"
			}
			for _, c := range SynthHWCounters {
				files[p+"hw_counters/"+c] = "0\n"
			}
			files[p+"hw_counters/lifespan"] = "10\n"
			cm := fmt.Sprintf("sys/kernel/config/rdma_cm/%s/ports/%d/", name, port)
			files[cm+"default_roce_mode"] = "RoCE v2\n"
			files[cm+"default_roce_tos"] = "0\n"
		}
		for rel, data := range files {
			if err := w(rel, data); err != nil {
				return err
			}
		}
		for _, l := range []struct{ target, rel string }{
			{"../../devices/pci0000:00/" + pci + "/infiniband/" + name, "sys/class/infiniband/" + name},
			{"../../../" + pci, dev + "/device"},
			{"../../../bus/pci/drivers/mlx5_core", pciDir + "/driver"},
			{"../../devices/pci0000:00/" + pci + "/net/" + netdev, "sys/class/net/" + netdev},
		} {
			if err := link(l.target, l.rel); err != nil {
				return err
			}
		}
	}
	return nil
}

// SynthPMACounters are the files of a Synth port's counters/: the
// InfiniBand PortCounters and PortCountersExtended the kernel's sysfs.c
// lists for a port whose driver answers the PMA, as mlx5 does for a RoCE
// port too.
var SynthPMACounters = []string{
	"symbol_error", "link_error_recovery", "link_downed", "port_rcv_errors",
	"port_rcv_remote_physical_errors", "port_rcv_switch_relay_errors", "port_xmit_discards",
	"port_xmit_constraint_errors", "port_rcv_constraint_errors", "local_link_integrity_errors",
	"excessive_buffer_overrun_errors", "VL15_dropped", "port_xmit_data", "port_rcv_data",
	"port_xmit_packets", "port_rcv_packets", "port_xmit_wait", "unicast_xmit_packets",
	"unicast_rcv_packets", "multicast_xmit_packets", "multicast_rcv_packets",
}

// SynthHWCounters are the files of a Synth port's hw_counters/ besides
// lifespan: the statistics mlx5_ib's counters.c gives a ConnectX-5
// function (queue, retransmission, congestion, extended error counters
// and the encapsulated ICRC errors).
var SynthHWCounters = []string{
	"rx_write_requests", "rx_read_requests", "rx_atomic_requests", "rx_dct_connect", "out_of_buffer",
	"out_of_sequence",
	"duplicate_request", "rnr_nak_retry_err", "packet_seq_err", "implied_nak_seq_err", "local_ack_timeout_err",
	"rp_cnp_ignored", "rp_cnp_handled", "np_ecn_marked_roce_packets", "np_cnp_sent",
	"resp_local_length_error", "resp_cqe_error", "req_cqe_error", "req_remote_invalid_request",
	"req_remote_access_errors", "resp_remote_access_errors", "resp_cqe_flush_error", "req_cqe_flush_error",
	"req_transport_retries_exceeded", "req_rnr_retries_exceeded",
	"rx_icrc_encapsulated",
}

// SynthNetdev is the netdev of both ports of device i of Synth.
func SynthNetdev(i int) string { return fmt.Sprintf("ens%dv%d", 1+i/256, i%256) }

// SynthPolicy is the configuration the benchmarks apply to a synthetic
// host: RoCE v1 and TOS 106 on every port, so a cold pass writes both
// values of every port.
const SynthPolicy = "[modules]\nenable = false\n\n[[roce]]\ndevice = \"mlx5_*\"\nmode = \"v1\"\ntos = 106\n"

// SynthRoot generates the Synth host of n devices for a test or
// benchmark, on tmpfs when /dev/shm is one (as sysfs and configfs are: a
// thousand devices' files on a busy disk take minutes to write and to
// remove), and removes it when the test ends.
func SynthRoot(tb testing.TB, n int) string {
	tb.Helper()
	base := ""
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		base = "/dev/shm"
	}
	dir, err := os.MkdirTemp(base, "rdmad-synth-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	if err := Synth(dir, n); err != nil {
		tb.Fatal(err)
	}
	return dir
}
