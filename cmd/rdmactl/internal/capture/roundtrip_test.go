package capture

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/test/bustest"
)

// The round trip: a host and its capture, unpacked, are the same host to
// rdmad and doctor. `rdmad --once` on each reports the same actions, and
// doctor (rdmactl doctor against rdmad on a private bus) the same
// findings, once the capture's replacements are made in the host's texts.
// Both sides are fixture trees here (the real host's round trip, with what
// a tarball cannot replay, is the capture scenario of the e2e guests).

// fixtureNames are the fixture hosts of test/hosts.
func fixtureNames(t *testing.T) []string {
	ents, err := os.ReadDir(filepath.Join(hosttest.RepoRoot(), "test", "hosts"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		if e.IsDir() {
			names = append(names, e.Name())
		}
	}
	if len(names) < 8 {
		t.Fatalf("found %d fixture hosts in test/hosts", len(names))
	}
	return names
}

// withPolicy gives root a policy that reaches every part: the shipped
// configuration, the example RoCE and lossless drop-ins, and a rule that
// selects the first device by its node GUID (which the capture replaces:
// the rule must still select it).
func withPolicy(t *testing.T, root string) {
	t.Helper()
	repo := hosttest.RepoRoot()
	copyFile(t, filepath.Join(repo, "etc/rdma/rdmad.toml"), filepath.Join(root, "etc/rdma/rdmad.toml"))
	for _, f := range []string{"50-roce.toml", "60-lossless.toml"} {
		copyFile(t, filepath.Join(repo, "docs/examples", f), filepath.Join(root, "etc/rdma/rdmad.d", f))
	}
	devs, _ := host.New(root).Devices()
	for _, d := range devs {
		if d.NodeGUID != "" && strings.Trim(d.NodeGUID, "0:") != "" {
			hosttest.Write(t, root, "etc/rdma/rdmad.d/70-guid.toml",
				"[[roce]]\nguid = \""+d.NodeGUID+"\"\ntos = 72\n\n[[expect]]\nguid = \""+strings.ToUpper(d.NodeGUID)+"\"\nstate = \"up\"\n")
			break
		}
	}
}

// addresses gives root's ports the GID tables and netdevs a host has: each
// RoCE port's link-local, IPv4 and IPv6 GIDs in RoCE v1 and v2, its
// netdev's address, the MAC the link-local GID is built from; each
// InfiniBand port a GID of a site's subnet prefix and its port GUID; an
// Omni-Path device its serial number. The fixtures' tables hold only
// link-local GIDs, and their netdevs no address.
func addresses(t *testing.T, root string) {
	t.Helper()
	devs, _ := host.New(root).Devices()
	for n, d := range devs {
		base := filepath.Join(root, host.ClassInfiniband, d.Name)
		if d.Driver == "hfi1" {
			hosttest.Write(t, root, filepath.Join(host.ClassInfiniband, d.Name, "serial"), "0x0066bd70\n")
		}
		for _, p := range d.Ports {
			port := filepath.Join(base, "ports", strconv.Itoa(p.Number))
			gid0, _ := os.ReadFile(filepath.Join(port, "gids", "0"))
			g := strings.Split(strings.TrimSpace(string(gid0)), ":")
			if len(g) != 8 {
				continue
			}
			if p.LinkLayer == "InfiniBand" {
				guid, _ := hex.DecodeString(strings.ReplaceAll(d.NodeGUID, ":", ""))
				if len(guid) == 8 {
					guid[7] += byte(p.Number)
					writeAttr(t, filepath.Join(port, "gids", "0"), "fec0:0000:0000:0001:"+gidGroups(hex.EncodeToString(guid)))
				}
				continue
			}
			ndev, _ := os.ReadFile(filepath.Join(port, "gid_attrs", "ndevs", "0"))
			netdev := strings.TrimSpace(string(ndev))
			if netdev == "" || g[5][2:] != "ff" || g[6][:2] != "fe" {
				continue
			}
			iid := strings.Join(g[4:], ":")
			b, _ := hex.DecodeString(strings.ReplaceAll(iid, ":", ""))
			mac := net.HardwareAddr{b[0] ^ 2, b[1], b[2], b[5], b[6], b[7]}
			if _, err := os.Stat(filepath.Join(root, host.ClassNet, netdev)); err == nil {
				writeAttr(t, filepath.Join(root, host.ClassNet, netdev, "address"), mac.String())
			}
			v4 := fmt.Sprintf("0000:0000:0000:0000:0000:ffff:0a14:%02x%02x", n+1, p.Number)
			for i, e := range []string{"fe80:0000:0000:0000:" + iid, v4, "fd12:3456:789a:0001:" + iid} {
				for j, typ := range []string{"IB/RoCE v1", "RoCE v2"} {
					k := strconv.Itoa(2*i + j)
					writeAttr(t, filepath.Join(port, "gids", k), e)
					writeAttr(t, filepath.Join(port, "gid_attrs", "types", k), typ)
					writeAttr(t, filepath.Join(port, "gid_attrs", "ndevs", k), netdev)
				}
			}
		}
	}
}

func writeAttr(t *testing.T, p, v string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(v+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// gidsMatchNetdevs checks, in a capture unpacked at root, that each RoCE
// port's link-local GID is still built from its netdev's address.
func gidsMatchNetdevs(t *testing.T, root string) {
	t.Helper()
	devs, _ := host.New(root).Devices()
	for _, d := range devs {
		for _, p := range d.Ports {
			port := filepath.Join(root, host.ClassInfiniband, d.Name, "ports", strconv.Itoa(p.Number))
			gid, _ := os.ReadFile(filepath.Join(port, "gids", "0"))
			ndev, _ := os.ReadFile(filepath.Join(port, "gid_attrs", "ndevs", "0"))
			addr, err := os.ReadFile(filepath.Join(root, host.ClassNet, strings.TrimSpace(string(ndev)), "address"))
			if err != nil || p.LinkLayer != "Ethernet" {
				continue
			}
			mac, err := net.ParseMAC(strings.TrimSpace(string(addr)))
			if err != nil {
				t.Fatalf("%s/%d: netdev address %q: %v", d.Name, p.Number, addr, err)
			}
			want := fmt.Sprintf("fe80:0000:0000:0000:%02x%02x:%02xff:fe%02x:%02x%02x", mac[0]^2, mac[1], mac[2], mac[3], mac[4], mac[5])
			if got := strings.TrimSpace(string(gid)); got != want {
				t.Errorf("%s/%d: GID %s is not built from %s's address %s (%s)", d.Name, p.Number, got, strings.TrimSpace(string(ndev)), mac, want)
			}
		}
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestRoundTripFixtures(t *testing.T) {
	for _, name := range fixtureNames(t) {
		for _, policy := range []bool{false, true} {
			sub := name
			if policy {
				sub += "+policy"
			}
			t.Run(sub, func(t *testing.T) {
				// Most of a round trip waits for rdmad and rdmactl: each
				// runs beside the others, on a bus of its own (the rdmad
				// doctor asks owns rdmad's name there).
				t.Parallel()
				addr := bustest.Start(t)
				src := hosttest.Copy(t, name)
				// The host's name, which rdma-core's rdma-ndd writes
				// into node_desc (the fixtures have it there).
				hosttest.Write(t, src, "etc/hostname", "demo-host\n")
				addresses(t, src)
				if policy {
					withPolicy(t, src)
				}
				roundTrip(t, addr, src)
			})
		}
	}
}

// roundTrip captures src, unpacks it, and compares rdmad --once and doctor
// on both; it returns the capture.
func roundTrip(t *testing.T, addr, src string) ([]byte, *Result) {
	t.Helper()
	ids := identifiersOf(t, src)
	tarball, res := capture(t, Options{Root: src, Dir: "host"})
	top := memDir(t, "rdmad-capture-unpacked-")
	unpack(t, tarball, top)
	dst := filepath.Join(top, "host")

	// What the capture holds names none of the host's identifiers.
	text := strings.ToLower(raw(t, tarball))
	var all []string
	for _, id := range ids {
		all = append(all, forms(id)...)
	}
	held := occurring(text, all)
	for _, id := range ids {
		for _, form := range forms(id) {
			if held[form] {
				t.Errorf("the capture holds %q (%s of the host)", form, id)
			}
		}
	}

	same := func(what, srcOut, dstOut string) {
		t.Helper()
		want := res.Text(strings.ReplaceAll(srcOut, src, dst))
		if want == dstOut { // the diff of thousands of lines is for a failure only
			return
		}
		if d := cmp.Diff(strings.Split(want, "\n"), strings.Split(dstOut, "\n")); d != "" {
			t.Errorf("%s differs (-the host, replacements made; +its capture):\n%s", what, d)
		}
	}
	gidsMatchNetdevs(t, dst)
	same("rdmad --once", once(t, src), once(t, dst))
	same("doctor", doctor(t, addr, src), doctor(t, addr, dst))
	return tarball, res
}

// forms are the ways id can be written: as read, without separators, and
// for a GUID as ibstat writes it.
func forms(id string) []string {
	id = strings.ToLower(id)
	out := []string{id}
	if bare := strings.ReplaceAll(id, ":", ""); bare != id && len(bare) >= 12 {
		out = append(out, bare)
	}
	return out
}

// occurring is which of words text holds, found in one pass over text
// (words indexed by their first bytes) rather than one a word: a capture
// of a thousand devices is 15 MB of text and holds thousands of them.
func occurring(text string, words []string) map[string]bool {
	held := map[string]bool{}
	if len(words) == 0 {
		return held
	}
	k := len(words[0])
	for _, w := range words {
		k = min(k, len(w))
	}
	if k == 0 {
		held[""] = true
		k = 1
	}
	byPrefix := map[string][]string{}
	for _, w := range words {
		if w != "" {
			byPrefix[w[:k]] = append(byPrefix[w[:k]], w)
		}
	}
	for i := 0; i+k <= len(text); i++ {
		for _, w := range byPrefix[text[i:i+k]] {
			if strings.HasPrefix(text[i:], w) {
				held[w] = true
			}
		}
	}
	return held
}

// identifiersOf lists what the capture of root must not hold, read
// without the capture's code: its host name, and its RDMA devices' and
// netdevs' identifiers: node and system image GUIDs, each GID (and the
// GUID, MAC or IPv4 address in it), each netdev's address, serial numbers.
func identifiersOf(t *testing.T, root string) []string {
	t.Helper()
	ids := []string{"demo-host"}
	zero := func(s string) bool { return strings.Trim(s, "0:.") == "" || strings.Trim(s, "f:") == "" }
	add := func(id string) {
		if id = strings.ToLower(strings.TrimSpace(id)); id != "" && !zero(id) {
			ids = append(ids, id)
		}
	}
	gid := func(g string) {
		add(g)
		groups := strings.Split(strings.ToLower(strings.TrimSpace(g)), ":")
		if len(groups) != 8 {
			return
		}
		iid := strings.Join(groups[4:], ":")
		switch {
		case strings.Join(groups[:6], ":") == "0000:0000:0000:0000:0000:ffff":
			b, _ := hex.DecodeString(groups[6] + groups[7])
			add(net.IP(b).String())
		case groups[5][2:] == "ff" && groups[6][:2] == "fe": // EUI-64: the netdev's MAC
			b, _ := hex.DecodeString(strings.ReplaceAll(iid, ":", ""))
			add(net.HardwareAddr{b[0] ^ 2, b[1], b[2], b[5], b[6], b[7]}.String())
		default:
			add(iid) // the port GUID
		}
	}
	err := filepath.Walk(filepath.Join(root, "sys"), func(p string, fi os.FileInfo, err error) error {
		if err != nil || !fi.Mode().IsRegular() {
			return err
		}
		name, dir := filepath.Base(p), filepath.Base(filepath.Dir(p))
		if name != "node_guid" && name != "sys_image_guid" && name != "serial" && dir != "gids" && name != "address" {
			return nil // no identifier (most of a host's files: counters, settings)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		v := strings.TrimSpace(string(b))
		switch {
		case name == "node_guid" || name == "sys_image_guid" || name == "serial":
			add(v)
		case dir == "gids":
			gid(v)
		case name == "address" && len(v) == 59: // IPoIB: flags, QPN, the port's GID
			gid(gidGroups(strings.ReplaceAll(v[12:], ":", "")))
		case name == "address":
			add(v)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

// gidGroups writes 32 hex digits as a GID's 8 groups.
func gidGroups(h string) string {
	var g []string
	for i := 0; i+4 <= len(h); i += 4 {
		g = append(g, h[i:i+4])
	}
	return strings.Join(g, ":")
}

var (
	duration = regexp.MustCompile(`\([0-9.]+[µmn]?s\)`)
	padding  = regexp.MustCompile(` +`)
	// instant is a time in a finding ("since rdmad first read them at
	// ..."): each rdmad started at its own.
	instant = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)`)
)

// once is rdmad --once's report on root: its duration left out, its
// columns' padding made one space (a file's path under another root is
// longer, and widens its column).
func once(t *testing.T, root string) string {
	t.Helper()
	env, _ := hosttest.ModprobeScript(t, root)
	cmd := exec.Command(rdmadBin, "--once", "--root", root, "--bus", "none")
	cmd.Env = env
	out, err := cmd.Output()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatal(err)
	}
	return padding.ReplaceAllString(duration.ReplaceAllString(string(out), "(…)"), " ")
}

// doctor is rdmactl doctor's findings (JSON, one a line) from rdmad
// serving root on the bus at addr.
func doctor(t *testing.T, addr, root string) string {
	t.Helper()
	env, _ := hosttest.ModprobeScript(t, root)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	daemon := exec.CommandContext(ctx, rdmadBin, "--root", root, "--bus", addr)
	daemon.Env = env
	var logs strings.Builder
	daemon.Stderr = &logs
	if err := daemon.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = daemon.Process.Signal(syscall.SIGTERM)
		_ = daemon.Wait()
	}()
	// The health monitor reads every port's counters after rdmad takes
	// its bus name: the findings are those of two calls in a row that
	// agree.
	deadline := time.Now().Add(120 * time.Second)
	last := ""
	for {
		cmd := exec.Command(rdmactlBin, "--bus", addr, "-o", "json", "doctor")
		out, err := cmd.Output()
		if ee, ok := err.(*exec.ExitError); err == nil || ok && ee.ExitCode() == 1 && len(out) > 0 {
			got := findingLines(t, out)
			if got == last {
				return got
			}
			last = got
		}
		if time.Now().After(deadline) {
			t.Fatalf("rdmad on %s never answered doctor the same twice: %v\n%s", root, err, logs.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// findingLines is doctor's JSON document, one finding a line, without
// the times in them (each rdmad started at its own).
func findingLines(t *testing.T, doc []byte) string {
	t.Helper()
	var findings []json.RawMessage
	if err := json.Unmarshal(doc, &findings); err != nil {
		t.Fatalf("doctor: %v: %s", err, doc)
	}
	var b strings.Builder
	for _, f := range findings {
		b.Write(f)
		b.WriteString("\n")
	}
	return instant.ReplaceAllString(b.String(), "TIME")
}

// TestRoundTripSynth1024 round-trips a generated SR-IOV host of 1,024
// dual-port functions with a policy on every port.
func TestRoundTripSynth1024(t *testing.T) {
	if testing.Short() {
		t.Skip("a host of 1,024 devices: not with -short")
	}
	addr := bustest.Start(t)
	src := synthRoot(t, 1024)
	hosttest.Write(t, src, "etc/hostname", "demo-host\n")
	hosttest.Write(t, src, "etc/rdma/rdmad.toml", hosttest.SynthPolicy)
	roundTrip(t, addr, src)
}

// occurring finds what strings.Contains finds: at the start and the end
// of the text, overlapping, sharing a prefix, words of different lengths.
func TestOccurringIsContains(t *testing.T) {
	text := "fe80:0000:0000:0000:0202:c9ff:fe00:0001 10.20.1.1\nmac 02:00:00:00:00:01 demo-host"
	words := []string{"fe80:0000", "fe80:0001", "0202c9fffe000001", "0202:c9ff:fe00:0001", "10.20.1.1",
		"10.20.1.10", "02:00:00:00:00:01", "00:00", "demo-host", "demo-hosts", "st", "t", "x"}
	held := occurring(text, words)
	for _, w := range words {
		if held[w] != strings.Contains(text, w) {
			t.Errorf("%q: occurring says %v, strings.Contains %v", w, held[w], strings.Contains(text, w))
		}
	}
	if len(occurring(text, nil)) != 0 {
		t.Error("no words, yet something occurs")
	}
}
