package fixturekernel_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rdmad/rdmad/daemon/dcb"
	"github.com/rdmad/rdmad/daemon/ethtool"
	"github.com/rdmad/rdmad/daemon/fixturekernel"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
)

// mlx5Host is a copy of the mlx5 fixture with its kernel.
func mlx5Host(t *testing.T) (*host.Host, *fixturekernel.Kernel) {
	t.Helper()
	h := host.New(hosttest.Copy(t, "mlx5"))
	return h, fixturekernel.New(h)
}

func editState(t *testing.T, h *host.Host, fn func(s *fixturekernel.State)) {
	t.Helper()
	s, err := fixturekernel.New(h).Read()
	if err != nil {
		t.Fatal(err)
	}
	fn(s)
	b, err := fixturekernel.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	// Another manager's write: a temp file renamed over the state file.
	tmp := h.Path(fixturekernel.File) + ".new"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, h.Path(fixturekernel.File)); err != nil {
		t.Fatal(err)
	}
}

// The fixtures hold their state in the form rdmad writes it: rdmad's first
// write changes values, not the file's layout.
func TestFixturesAreWrittenAsMarshalWritesThem(t *testing.T) {
	for _, name := range []string{"demo", "mlx5", "mlx5-ofed"} {
		path := filepath.Join(hosttest.RepoRoot(), "test/hosts", name, fixturekernel.File)
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		s, err := fixturekernel.Parse(path, b)
		if err != nil {
			t.Fatal(err)
		}
		again, err := fixturekernel.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if string(again) != string(b) {
			t.Errorf("%s is not as Marshal writes it:\n%s", path, again)
		}
	}
}

// After boot an mlx5 port reports what mlx5e_dcbnl_initialize leaves:
// host DCBX with both versions, PFC off with the 7 m cable length, the
// initial ETS of mlx5e_ets_init, no APP entries (PCP trust), pause on.
func TestMLX5FixtureIsTheDriverAfterBoot(t *testing.T) {
	_, k := mlx5Host(t)
	ie, err := k.Get("ens1f0np0")
	if err != nil {
		t.Fatal(err)
	}
	if !ie.HasDCBX || ie.DCBX != dcb.CapHost|dcb.CapVerCEE|dcb.CapVerIEEE {
		t.Errorf("DCBX %#x", ie.DCBX)
	}
	if ie.PFC == nil || ie.PFC.Enabled != 0 || ie.PFC.Cap != 8 || ie.PFC.Delay != 7 {
		t.Errorf("PFC %+v", ie.PFC)
	}
	if ie.ETS == nil || ie.ETS.PrioTC != [8]uint8{1, 0, 2, 3, 4, 5, 6, 7} || ie.ETS.TSA[0] != dcb.TSAVendor || ie.ETS.TxBW[7] != 100 {
		t.Errorf("ETS %+v", ie.ETS)
	}
	if len(ie.Apps) != 0 || ie.Maxrate == nil || ie.Buffer == nil {
		t.Errorf("apps %v maxrate %v buffer %v", ie.Apps, ie.Maxrate, ie.Buffer)
	}
	if p, err := k.Pause("ens1f0np0"); err != nil || !p.RX || !p.TX || p.Autoneg {
		t.Errorf("pause %+v %v", p, err)
	}
}

func TestWritesPersistAndDriverRulesHold(t *testing.T) {
	h, k := mlx5Host(t)
	const nd = "ens1f0np0"
	if err := k.SetPFC(nd, dcb.PFC{Cap: 2, Enabled: 1 << 3, Delay: 1000}); err != nil {
		t.Fatal(err)
	}
	// A new kernel reads the file: the write persisted. mlx5 keeps pfc_cap
	// and ignores a delay of 1000 m.
	ie, err := fixturekernel.New(h).Get(nd)
	if err != nil {
		t.Fatal(err)
	}
	if ie.PFC.Enabled != 1<<3 || ie.PFC.Cap != 8 || ie.PFC.Delay != 7 {
		t.Errorf("PFC after set %+v", ie.PFC)
	}
	// mlx5 replaces a DSCP's entry; it refuses other selectors.
	for _, a := range []dcb.App{dcb.DSCP(26, 3), dcb.DSCP(26, 5), dcb.DSCP(48, 6)} {
		if err := k.SetApp(nd, a); err != nil {
			t.Fatal(err)
		}
	}
	ie, _ = k.Get(nd)
	if want := []dcb.App{dcb.DSCP(48, 6), dcb.DSCP(26, 5)}; !slices.Equal(ie.Apps, want) {
		t.Errorf("APP table %v, want %v (newest first)", ie.Apps, want)
	}
	var st *dcb.StatusError
	if err := k.SetApp(nd, dcb.DgramPort(4791, 3)); !errors.As(err, &st) || !errors.Is(err, syscall.EINVAL) || !strings.HasPrefix(err.Error(), "add APP entry dgram-port-prio 4791:3 to ens1f0np0: ") {
		t.Errorf("datagram entry on mlx5: %v", err)
	}
	if err := k.DelApp(nd, dcb.DSCP(26, 3)); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("delete of an entry not there: %v", err)
	}
	// ETS shares must add up to 100; strict classes read back at 100 %.
	bad := dcb.ETS{TSA: [8]dcb.TSA{dcb.TSAETS, dcb.TSAETS}, TxBW: [8]uint8{50, 40}}
	if err := k.SetETS(nd, bad); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("ETS adding up to 90: %v", err)
	}
	good := dcb.ETS{TSA: [8]dcb.TSA{dcb.TSAETS, dcb.TSAETS}, TxBW: [8]uint8{50, 50}, PrioTC: [8]uint8{0, 0, 0, 1}}
	if err := k.SetETS(nd, good); err != nil {
		t.Fatal(err)
	}
	ie, _ = k.Get(nd)
	if ie.ETS.TxBW != [8]uint8{50, 50, 100, 100, 100, 100, 100, 100} || ie.ETS.Cap != 8 || ie.ETS.PrioTC != good.PrioTC {
		t.Errorf("ETS %+v", ie.ETS)
	}
	if err := k.SetMaxrate(nd, dcb.Maxrate{Rate: [8]uint64{150_000, 30_500_000}}); err != nil {
		t.Fatal(err)
	}
	if ie, _ = k.Get(nd); ie.Maxrate.Rate[0] != 100_000 || ie.Maxrate.Rate[1] != 30_000_000 {
		t.Errorf("rates %v", ie.Maxrate.Rate)
	}
	var refused *dcb.DCBXRefusedError
	if err := k.SetDCBX(nd, dcb.CapLLDManaged|dcb.CapVerIEEE); !errors.As(err, &refused) {
		t.Errorf("LLD-managed DCBX: %v", err)
	}
	if err := k.SetDCBX(nd, 0); err != nil {
		t.Fatal(err)
	}
	if c, _ := k.DCBX(nd); c != dcb.CapVerCEE|dcb.CapVerIEEE {
		t.Errorf("DCBX after mode 0: %#x, want the host bit gone", c)
	}
	if err := k.SetPFCStormTimeout(nd, ethtool.PFCStormAuto); err != nil {
		t.Fatal(err)
	}
	if ms, _ := k.PFCStormTimeout(nd); ms != 100 {
		t.Errorf("auto storm timeout reads %d, want 100", ms)
	}
	if err := k.SetPFCStormTimeout(nd, 50); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("storm timeout 50: %v", err)
	}
	if err := k.SetPause(nd, false, false); err != nil {
		t.Fatal(err)
	}
	if p, _ := k.Pause(nd); p.RX || p.TX {
		t.Errorf("pause %v", p)
	}
	if strings.Contains(hosttest.Read(t, h.Root, fixturekernel.File), "requests") || !strings.Contains(hosttest.Read(t, h.Root, fixturekernel.File), `"prio_pfc": [
            3
          ]`) {
		t.Error("the state file holds counters")
	}
}

func TestRefusalsAndAbsentParts(t *testing.T) {
	h, k := mlx5Host(t)
	editState(t, h, func(s *fixturekernel.State) {
		n := s.Netdevs["ens1f0np0"]
		n.Refuse = map[string]string{fixturekernel.VerbSetPFC: "EBUSY", fixturekernel.VerbSetPause: "EPERM", fixturekernel.VerbGet: "EIO"}
		s.Netdevs["veth0"] = &fixturekernel.Netdev{}
	})
	var st *dcb.StatusError
	if err := k.SetPFC("ens1f0np0", dcb.PFC{Enabled: 8}); !errors.As(err, &st) || !errors.Is(err, syscall.EBUSY) {
		t.Errorf("refused PFC: %v", err)
	}
	if err := k.SetPause("ens1f0np0", false, false); !errors.Is(err, syscall.EPERM) {
		t.Errorf("refused pause: %v", err)
	}
	if _, err := k.Get("ens1f0np0"); !errors.Is(err, syscall.EIO) || !strings.HasPrefix(err.Error(), "get IEEE DCB of ens1f0np0: ") {
		t.Errorf("refused get: %v", err)
	}
	if _, err := k.Get("veth0"); !dcb.Unsupported(err) {
		t.Errorf("veth DCB: %v", err)
	}
	if _, err := k.Pause("veth0"); !ethtool.Unsupported(err) {
		t.Errorf("veth pause: %v", err)
	}
	if _, err := k.Get("ens9"); !errors.Is(err, fixturekernel.ErrNotListed) {
		t.Errorf("netdev not listed: %v", err)
	}
	// Nothing refused was written.
	if ie, err := k.Get("ens1f1np1"); err != nil || ie.PFC.Enabled != 0 {
		t.Errorf("ens1f1np1 %+v %v", ie.PFC, err)
	}
}

func TestBadStateFileIsNamed(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{"{\"netdev\": {\"x\":\n {\"driver\": }}}", "kernel.json line 2: invalid character"},
		{"{\"netdev\": {\"x\":\n {\"colour\": \"red\"}}}", `kernel.json line 2: json: unknown field "colour"`},
		{"{\"netdev\": {\"x\":\n {\"pfc_storm_timeout\": -1}}}", "kernel.json line 2: json: cannot unmarshal number -1 into Go struct field"},
		{`{"netdev": {"x": {"refuse": {"set_pfc": "EWHAT"}}}}`, "netdev x: refuse.set_pfc: \"EWHAT\" is not an errno name"},
		{`{"netdev": {"x": {"refuse": {"fly": "EIO"}}}}`, "netdev x: refuse.fly: not a verb"},
		{`{"netdev": {"x": {"dcb": {"app": ["dscp-prio 26:9"]}}}}`, `APP entry "dscp-prio 26:9": priority 9 is out of range`},
		{`{"netdev": {"x": {"dcb": {"dcbx": ["hostile"]}}}}`, "netdev x: dcb.dcbx: DCBX mode \"hostile\""},
		{`{"netdev": {"x": {"dcb": {"pfc": {"prio_pfc": [8]}}}}}`, "netdev x: dcb.pfc.prio_pfc: priority 8 is out of range"},
		{`{"netdev": {"x": {"dcb": {"ets": {"tc_tsa": ["fair", "", "", "", "", "", "", ""]}}}}}`, "netdev x: dcb.ets.tc_tsa"},
		{`{"netdev": {}} {}`, "more than one JSON value"},
	} {
		_, err := fixturekernel.Parse("kernel.json", []byte(tc.body))
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "kernel.json") {
			t.Errorf("%q: %v, want %q", tc.body, err, tc.want)
		}
	}
}

// notes records what the watcher announced.
type notes struct {
	mu  sync.Mutex
	got []string
}

func (n *notes) add(kind string) func(string) {
	return func(name string) {
		n.mu.Lock()
		defer n.mu.Unlock()
		n.got = append(n.got, kind+" "+name)
	}
}

func (n *notes) list() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.got)
}

// A change of the file is announced as the kernel announces it: DCB and
// pause changes ask for a recheck of their netdev, an mlx5 PFC mask change
// also drops and restores its carrier; a storm timeout or DCBX change is
// not announced.
func TestWatcherAnnouncesChangesAsTheKernel(t *testing.T) {
	h, k := mlx5Host(t)
	var n notes
	w := &fixturekernel.Watcher{Host: h, Recheck: n.add("recheck"), CarrierLost: n.add("carrier-lost"), StateChanged: n.add("state"),
		DCBChanged: n.add("dcb"), PauseChanged: n.add("pause")}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() { cancel(); <-done }()
	wait := func(want ...string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !slices.Equal(n.list(), want) {
			if time.Now().After(deadline) {
				t.Fatalf("announced %q, want %q", n.list(), want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	// The watch is set up when a write is seen: write until it is.
	deadline := time.Now().Add(10 * time.Second)
	for len(n.list()) == 0 && time.Now().Before(deadline) {
		editState(t, h, func(s *fixturekernel.State) {
			p := s.Netdevs["ens1f1np1"].Pause
			p.RX = !p.RX
		})
		time.Sleep(50 * time.Millisecond)
	}
	n.mu.Lock()
	n.got = nil
	n.mu.Unlock()

	if err := k.SetPFCStormTimeout("ens1f0np0", 200); err != nil {
		t.Fatal(err)
	}
	if err := k.SetDCBX("ens1f0np0", dcb.CapHost|dcb.CapVerIEEE); err != nil {
		t.Fatal(err)
	}
	if err := k.SetPFC("ens1f0np0", dcb.PFC{Enabled: 1 << 3}); err != nil {
		t.Fatal(err)
	}
	wait("recheck ens1f0np0", "dcb ens1f0np0", "carrier-lost ens1f0np0", "state ens1f0np0")
	editState(t, h, func(s *fixturekernel.State) { s.Netdevs["ens1f0np0"].DCB.PFC.Delay = 30 })
	wait("recheck ens1f0np0", "dcb ens1f0np0", "carrier-lost ens1f0np0", "state ens1f0np0", "recheck ens1f0np0", "dcb ens1f0np0")
	if err := k.SetPause("ens1f0np0", false, false); err != nil {
		t.Fatal(err)
	}
	wait("recheck ens1f0np0", "dcb ens1f0np0", "carrier-lost ens1f0np0", "state ens1f0np0", "recheck ens1f0np0", "dcb ens1f0np0",
		"recheck ens1f0np0", "pause ens1f0np0")
}

// The fixture's resource dump: a device's queue pairs from fixture/qp.json,
// none without the file, and a file that does not read is an error naming
// its line.
func TestFixtureQueuePairs(t *testing.T) {
	h, k := mlx5Host(t)
	if qps, err := k.QueuePairs("mlx5_0"); err != nil || len(qps) != 0 {
		t.Fatalf("without qp.json: %v %v", qps, err)
	}
	hosttest.Write(t, h.Root, fixturekernel.QPFile, `{"qp": [
  {"device": "mlx5_0", "port": 1, "lqpn": 1, "type": "GSI", "state": "RTS", "kernel": "ib_core"},
  {"device": "mlx5_1", "port": 1, "lqpn": 1, "type": "GSI", "state": "RTS", "kernel": "ib_core"},
  {"device": "mlx5_0", "port": 1, "lqpn": 300, "type": "RC", "state": "RTS", "pid": 4242}
]}
`)
	qps, err := k.QueuePairs("mlx5_0")
	if err != nil || len(qps) != 2 || qps[1].LQPN != 300 || qps[1].PID != 4242 || !qps[0].Management("mlx5_ib") || qps[1].Management("mlx5_ib") {
		t.Fatalf("mlx5_0's queue pairs: %+v %v", qps, err)
	}
	hosttest.Write(t, h.Root, fixturekernel.QPFile, "{\"qp\": [\n  {\"device\": \"mlx5_0\", \"owner\": 1}\n]}\n")
	if _, err := k.QueuePairs("mlx5_0"); err == nil || !strings.Contains(err.Error(), "fixture/qp.json line 2") {
		t.Errorf("an unknown key: %v", err)
	}
}
