package doctor_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/rdmad/rdmad/daemon/bus"
	"github.com/rdmad/rdmad/daemon/doctor"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/dbusapi"
)

const ibDev = "sys/devices/pci0000:00/0000:00:03.0/0000:05:00.0"

func TestIPoIBModeAndMTU(t *testing.T) {
	root := readyIB(t)
	hosttest.Write(t, root, ibDev+"/net/ib1/mtu", "65520\n")
	hosttest.Write(t, root, ibDev+"/net/ib0/mtu", "2044\n")
	fs := diagnose(t, root)
	mustFix(t, fs, "ipoib-mtu-too-large", "netdev ib1", doctor.SeverityFail,
		"IPoIB ib1 on mlx4_0/2: datagram mode, MTU 65520: datagram mode carries at most the IB MTU less 4 bytes", "ip link set dev ib1 mtu 4092")
	mustFix(t, fs, "ipoib-connected-small-mtu", "netdev ib0", doctor.SeverityWarn,
		"IPoIB ib0 on mlx4_0/1: connected mode, MTU 2044", "ip link set dev ib0 mtu 65520")

	hosttest.Write(t, root, ibDev+"/net/ib0/mtu", "70000\n")
	mustFix(t, diagnose(t, root), "ipoib-mtu-too-large", "netdev ib0", doctor.SeverityFail, "connected mode carries at most 65520", "mtu 65520")

	// A P_Key child interface has no PCI device of its own; an Ethernet
	// interface (type 1) is not IPoIB.
	hosttest.Write(t, root, "sys/devices/virtual/net/ib1.8002/type", "32\n")
	hosttest.Write(t, root, "sys/devices/virtual/net/ib1.8002/mode", "datagram\n")
	hosttest.Write(t, root, "sys/devices/virtual/net/ib1.8002/mtu", "2044\n")
	if err := symlink("../../devices/virtual/net/ib1.8002", root, "sys/class/net/ib1.8002"); err != nil {
		t.Fatal(err)
	}
	hosttest.Write(t, root, "sys/class/net/eth0/type", "1\n")
	fs = diagnose(t, root)
	mustFix(t, fs, "ipoib", "netdev ib1.8002", doctor.SeverityOK, "IPoIB ib1.8002: datagram mode, MTU 2044", "")
	if f := find(fs, "ipoib", "netdev eth0"); f != nil {
		t.Errorf("Ethernet interface reported as IPoIB: %+v", f)
	}
}

// Nothing on the host may wedge or blind doctor: a FIFO where a file is
// expected, a huge file, bytes that are not UTF-8.
func TestHostileHostFiles(t *testing.T) {
	root := readyIB(t)
	for _, rel := range []string{"etc/nfs.conf", "etc/security/limits.d/rdma.conf", "proc/net/tcp", "sys/module/ib_core/parameters/netns_mode"} {
		remove(t, root, rel)
		if err := syscall.Mkfifo(filepath.Join(root, rel), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	big := "@rdma soft memlock 1\n" + strings.Repeat("# padding padding padding padding\n", 40000)
	hosttest.Write(t, root, "etc/security/limits.conf", big)
	bad := "ib\xff\x1b[31m"
	hosttest.Write(t, root, ibDev+"/net/"+bad+"/type", "32\n")
	hosttest.Write(t, root, ibDev+"/net/"+bad+"/mode", "data\xfegram\n")
	hosttest.Write(t, root, ibDev+"/net/"+bad+"/mtu", "2044\n")
	if err := symlink("../../devices/"+strings.TrimPrefix(ibDev, "sys/devices/")+"/net/"+bad, root, "sys/class/net/"+bad); err != nil {
		t.Fatal(err)
	}

	done := make(chan []doctor.Finding)
	go func() { done <- diagnose(t, root) }()
	var fs []doctor.Finding
	select {
	case fs = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("Diagnose hangs on a FIFO")
	}
	// The FIFOs read as absent: nfs.conf enables nothing, the group limit
	// falls back to the services default, and the oversized limits.conf is
	// not read at all (not even its first line).
	must(t, fs, "nfs-rdma-not-persistent", "host")
	mustFix(t, fs, "netns-mode", "host", doctor.SeverityOK, "exclusive declared, ib_core starts in it at boot (/etc/modprobe.d/rdmad-netns.conf:3); running mode unknown", "")
	mustFix(t, fs, "memlock-login", "host", doctor.SeverityOK, "DefaultLimitMEMLOCK=infinity", "")
	// Doctor says what the host holds; the bus publishes it escaped.
	mustFix(t, fs, "ipoib", "netdev ib\xff\x1b[31m", doctor.SeverityOK, "IPoIB ib\xff\x1b[31m: data\xfegram mode, MTU 2044", "")
	wire := bus.Findings(fs)
	doc, err := dbusapi.EncodeFindings(wire)
	if err != nil {
		t.Fatal(err)
	}
	if !utf8.ValidString(doc) || strings.ContainsRune(doc, 0x1b) {
		t.Fatalf("published document is not clean UTF-8")
	}
	var back []dbusapi.Finding
	if err := json.Unmarshal([]byte(doc), &back); err != nil || len(back) != len(fs) {
		t.Fatalf("document does not decode: %v", err)
	}
	i := slices.IndexFunc(back, func(f dbusapi.Finding) bool { return f.ID == "ipoib" && strings.HasPrefix(f.Subject.Netdev, `ib\xff`) })
	if i < 0 {
		t.Fatal("no ipoib finding for the hostile netdev published")
	}
	if back[i].Subject.String() != `netdev ib\xff\x1b[31m` || back[i].Finding != `IPoIB ib\xff\x1b[31m: data\xfegram mode, MTU 2044` {
		t.Errorf("published ipoib finding is not escaped: %+v", back[i])
	}
}

func TestCancelledContextStopsEarly(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	root := hosttest.Copy(t, "rxe-ready")
	fs := doctor.Diagnose(ctx, doctor.Input{Host: host.New(root)})
	if len(fs) != 0 {
		t.Errorf("cancelled Diagnose ran checks: %s", dump(fs))
	}
}

func TestNilHostAndPolicy(t *testing.T) {
	// The zero Input diagnoses "/" with a policy that declares nothing;
	// on this test machine (no RDMA) that must not panic and must say so.
	if _, err := os.Stat("/sys/class/infiniband"); err == nil {
		t.Skip("this machine has RDMA devices")
	}
	fs := doctor.Diagnose(context.Background(), doctor.Input{})
	must(t, fs, "no-device", "host")
	must(t, fs, "config-loaded", "host")
}
