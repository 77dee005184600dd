package host_test

import (
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/rdmad/rdmad/daemon/host"
)

// FuzzReadDevice reads a device whose sysfs and configfs attributes hold
// whatever the fuzzer writes (a driver bug, a hostile VF, a fixture typo)
// and whose port directory has a fuzzed name. Reading never fails for bad
// values (they are optional), never panics, and keeps its invariants:
// ports numbered > 0 and sorted, states without their numeric code, TOS
// in -1..255, values trimmed. A fuzzed name to look up never reaches a
// path outside the class directory.
func FuzzReadDevice(f *testing.F) {
	f.Add("mlx5_0", "1", "1: CA", "4: ACTIVE", "5: LinkUp", "100 Gb/sec (4X EDR)", "Ethernet", "RoCE v2", "ens1f0np0", "RoCE v2", "106")
	f.Add("rxe0", "1", "1: CA", "1: DOWN", "3: Disabled", "", "InfiniBand", "IB/RoCE v1", "", "IB/RoCE v1", "-1")
	f.Add("../x", "01", "4: RNIC", ": :", "::", "\x00", "\xff", "\n", "a/b", "", "256")
	f.Add("mlx5_1", "0", "", "", "", "", "", "", "", "", "99999999999999999999")
	f.Add("a", "18446744073709551617", "x", "4:", ": ", "", "Ethernet", "", "", " RoCE v2 \n", " 7\n")
	f.Fuzz(func(t *testing.T, name, port, nodeType, state, phys, rate, linkLayer, gidType, ndev, mode, tos string) {
		root := t.TempDir()
		dev := "d0"
		write := func(rel, v string) {
			p := filepath.Join(root, rel)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		base := filepath.Join(host.ClassInfiniband, dev)
		write(filepath.Join(base, "node_type"), nodeType)
		write(filepath.Join(base, "fw_ver"), rate)
		portOK := port != "" && port != "." && port != ".." && !strings.ContainsAny(port, "/\x00") && len(port) < 200
		if portOK {
			pd := filepath.Join(base, "ports", port)
			write(filepath.Join(pd, "state"), state)
			write(filepath.Join(pd, "phys_state"), phys)
			write(filepath.Join(pd, "rate"), rate)
			write(filepath.Join(pd, "link_layer"), linkLayer)
			write(filepath.Join(pd, "gid_attrs/types/0"), gidType)
			write(filepath.Join(pd, "gid_attrs/ndevs/0"), ndev)
			cfg := filepath.Join(host.ConfigfsRdmaCM, dev, "ports", port)
			write(filepath.Join(cfg, "default_roce_mode"), mode)
			write(filepath.Join(cfg, "default_roce_tos"), tos)
		} else if err := os.MkdirAll(filepath.Join(root, base, "ports"), 0o755); err != nil {
			t.Fatal(err)
		}
		h := host.New(root)
		d, err := h.ReadDevice(dev, host.DetailFull)
		if err != nil {
			t.Fatalf("reading a device with odd attribute values failed: %v", err)
		}
		if !sort.SliceIsSorted(d.Ports, func(i, j int) bool { return d.Ports[i].Number < d.Ports[j].Number }) {
			t.Fatalf("ports not sorted: %+v", d.Ports)
		}
		n, numErr := strconv.Atoi(port)
		wantPort := portOK && numErr == nil && n > 0 && strconv.Itoa(n) == port
		if (len(d.Ports) == 1) != wantPort || len(d.Ports) > 1 {
			t.Fatalf("port dir %q gave ports %+v", port, d.Ports)
		}
		for _, p := range d.Ports {
			if p.Number != n {
				t.Fatalf("port %+v", p)
			}
			for _, s := range []string{p.State, p.PhysState, p.LinkLayer, p.Rate} {
				if s != strings.TrimSpace(s) {
					t.Fatalf("value %q not trimmed in %+v", s, p)
				}
			}
			if strings.HasPrefix(strings.TrimSpace(state), "4: ") && p.State != strings.TrimPrefix(strings.TrimSpace(state), "4: ") {
				t.Fatalf("state %q read as %q", state, p.State)
			}
		}
		for _, tr := range d.Transports() {
			switch tr {
			case host.TransportInfiniBand, host.TransportRoCE, host.TransportIWARP, host.TransportOPA, host.TransportUnknown:
			default:
				t.Fatalf("transport %q", tr)
			}
		}

		// A name to look up, as from a uevent or a D-Bus call.
		got, err := h.ReadDevice(name, host.DetailPolicy)
		switch {
		case name == dev:
			if err != nil || got.Name != dev {
				t.Fatalf("ReadDevice(%q) = %+v, %v", name, got, err)
			}
		default:
			if !errors.Is(err, host.ErrNoDevice) {
				t.Fatalf("ReadDevice(%q) = %+v, %v; want ErrNoDevice", name, got, err)
			}
		}
	})
}
