package service_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdmad/rdmad/daemon/compose"
	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/dcb/dcbtest"
	"github.com/rdmad/rdmad/daemon/doctor"
	"github.com/rdmad/rdmad/daemon/events"
	"github.com/rdmad/rdmad/daemon/events/eventstest"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/daemon/links"
	"github.com/rdmad/rdmad/daemon/links/linkstest"
	"github.com/rdmad/rdmad/daemon/memlock"
	"github.com/rdmad/rdmad/daemon/netns"
	"github.com/rdmad/rdmad/daemon/netns/netnstest"
	"github.com/rdmad/rdmad/daemon/qos"
	"github.com/rdmad/rdmad/daemon/reconcile"
	"github.com/rdmad/rdmad/daemon/roce"
	"github.com/rdmad/rdmad/daemon/service"
)

// driftRig is a running rdmad on the mlx5 fixture as the daemon runs it:
// the service's work loop, the directory watcher on the directories the
// records name, and a DCB notification source fed messages built byte for
// byte, with the journal it writes.
type driftRig struct {
	root string
	h    *host.Host
	dcb  *dcbtest.Fake
	nl   *linkstest.Netlink
	ns   *netnstest.Kernel
	svc  *service.Service
	dirs *events.DirWatcher
	log  *lockedBuffer
	// notify sends a DCB notification as the kernel multicasts it.
	notify chan []byte
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// dcbFeed is a DCB monitor reading the messages of a channel as the real
// one reads its socket.
type dcbFeed struct {
	msgs <-chan []byte
	done chan struct{}
	once sync.Once
}

func (f *dcbFeed) Receive() ([]string, error) {
	select {
	case b := <-f.msgs:
		return events.DCBNetdevs(b)
	case <-f.done:
		return nil, io.EOF
	}
}

func (f *dcbFeed) Close() { f.once.Do(func() { close(f.done) }) }

// newDriftRig starts rdmad on cfg (after "[modules] enable = false") and
// waits until its first pass is done and the directories it names are
// watched.
func newDriftRig(t testing.TB, cfg string) *driftRig { t.Helper(); return newDriftRigAt(t, cfg, nil) }

// newDriftRigAt is newDriftRig with the clock of the contest rule (nil:
// time.Now).
func newDriftRigAt(t testing.TB, cfg string, now func() time.Time) *driftRig {
	t.Helper()
	r := &driftRig{root: hosttest.Copy(t, "mlx5"), dcb: dcbtest.New(), ns: netnstest.New(config.NetnsShared), log: &lockedBuffer{}, notify: make(chan []byte, 8)}
	hosttest.Write(t, r.root, mainFile, "[modules]\nenable = false\n"+cfg)
	r.dcb.Add("ens1f0np0")
	r.dcb.Add("ens1f1np1")
	r.h = hosttest.NewKernel(r.root).Host()
	if err := linkstest.AddNetdev(r.h, "eth1"); err != nil {
		t.Fatal(err)
	}
	r.nl = &linkstest.Netlink{Host: r.h}
	log := slog.New(slog.NewTextHandler(r.log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	kernel := compose.Kernel{Modules: &hosttest.Modprobe{}, Links: r.nl, Netns: r.ns, DCB: r.dcb.Kernel()}
	svc, err := service.New(service.Options{Host: r.h, Parts: compose.Parts(kernel), Log: log, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	r.svc = svc
	r.dirs = &events.DirWatcher{Changed: svc.DirChanged, Log: log}
	svc.WatchDirs(r.dirs)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); _ = r.dirs.Run(ctx) }()
	go func() { defer wg.Done(); _ = svc.Run(ctx) }()
	src := &events.DCBSource{Open: func() (events.DCBMonitor, error) { return &dcbFeed{msgs: r.notify, done: make(chan struct{})}, nil }, Req: svc, Log: log}
	go func() { defer wg.Done(); _ = src.Run(ctx) }()
	t.Cleanup(func() { cancel(); wg.Wait() })
	svc.Start()
	r.idle(t)
	// The first watches are read again at once (a recheck of what they
	// watch): let that end before the test changes anything.
	for deadline := time.Now().Add(2 * time.Second); len(r.dirs.Watched()) == 0 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	r.settled(t)
	return r
}

func (r *driftRig) idle(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.svc.Idle(ctx); err != nil {
		t.Fatal(err)
	}
}

// watching waits until dir (relative to the root) is watched.
func (r *driftRig) watching(t testing.TB, rel string) {
	t.Helper()
	dir := r.h.Path(rel)
	waitUntil(t, "watching "+rel, func() bool { return slices.Contains(r.dirs.Watched(), dir) })
	// A new watch is read again at once (the recheck that closes the gap
	// between the pass and the watch): let it end, so the test's own
	// write, not atomic as the kernel's are, is not read half done.
	r.settled(t)
}

func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	waitUntilWithin(t, 10*time.Second, what, cond)
}

func waitUntilWithin(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// settled waits for the passes an event starts (the watcher's, then the
// queue's) to be over: the event is seen within the settle time, and the
// work loop goes idle.
func (r *driftRig) settled(t testing.TB) {
	t.Helper()
	time.Sleep(100 * time.Millisecond)
	r.idle(t)
}

// portRecord is the stored record of setting st on mlx5_0's port 1.
func (r *driftRig) portRecord(t testing.TB, st *reconcile.Setting) reconcile.Record {
	t.Helper()
	for _, rec := range r.svc.Reconciler().DeviceStates([]string{"mlx5_0"})[0].Ports[0].Records {
		if rec.Setting == st {
			return rec
		}
	}
	t.Fatalf("no %s record on mlx5_0 port 1", st.Name)
	return reconcile.Record{}
}

func (r *driftRig) hostRecord(t testing.TB, st *reconcile.Setting) reconcile.Record {
	t.Helper()
	for _, rec := range r.svc.Reconciler().Summary().HostRecords {
		if rec.Setting == st {
			return rec
		}
	}
	t.Fatalf("no %s host record", st.Name)
	return reconcile.Record{}
}

// contestTOS has another process change mlx5_0/1's TOS (declared 106)
// until rdmad contests it, the last change 32; it returns the TOS file.
func (r *driftRig) contestTOS(t testing.TB) string {
	t.Helper()
	tosFile := host.ConfigfsPortPath("mlx5_0", 1, "default_roce_tos")
	r.watching(t, host.ConfigfsPortPath("mlx5_0", 1))
	for range reconcile.ContestCorrections {
		hosttest.Write(t, r.root, tosFile, "0\n")
		waitUntil(t, "correction", func() bool { return hosttest.Read(t, r.root, tosFile) == "106" })
		r.settled(t)
	}
	hosttest.Write(t, r.root, tosFile, "32\n")
	waitUntil(t, "contested", func() bool { return r.portRecord(t, roce.TOS.Setting()).State == reconcile.Contested })
	return tosFile
}

// corrections are the journal's warning lines about corrections.
func (r *driftRig) corrections() []string {
	var out []string
	for _, l := range strings.Split(r.log.String(), "\n") {
		if strings.Contains(l, "level=WARN") && strings.Contains(l, "corrected a setting changed behind rdmad's back") {
			out = append(out, l)
		}
	}
	return out
}

func driftCfg(action config.DriftAction, rest string) string {
	return "[drift]\naction = \"" + string(action) + "\"\nverify_interval = \"0\"\n" + rest
}

// Another process writes the TOS and the RoCE mode in a configfs port
// directory rdmad manages: the watch on the directory sees it, and rdmad
// puts both back under "correct" (one warning line each, naming the
// subject, the setting, the value found and the one restored, and a count
// by setting), or leaves them and reports them under "report".
func TestConfigfsChangeCorrectedOrReported(t *testing.T) {
	t.Parallel() // a rig of its own; the test mostly waits
	const rule = "[[roce]]\ndevice = \"mlx5_0\"\nmode = \"v2\"\ntos = 106\n"
	portDir := host.ConfigfsPortPath("mlx5_0", 1)
	tosFile, modeFile := host.ConfigfsPortPath("mlx5_0", 1, "default_roce_tos"), host.ConfigfsPortPath("mlx5_0", 1, "default_roce_mode")
	t.Run("correct", func(t *testing.T) {
		t.Parallel()
		r := newDriftRig(t, driftCfg(config.DriftCorrect, rule))
		r.watching(t, portDir)
		hosttest.Write(t, r.root, tosFile, "0\n")
		waitUntil(t, "the TOS put back", func() bool { return hosttest.Read(t, r.root, tosFile) == "106" })
		r.settled(t)
		hosttest.Write(t, r.root, modeFile, "IB/RoCE v1\n")
		waitUntil(t, "the mode put back", func() bool { return hosttest.Read(t, r.root, modeFile) == "RoCE v2" })
		r.settled(t)
		lines := r.corrections()
		if len(lines) != 2 || !strings.Contains(lines[0], "subject=mlx5_0/1") || !strings.Contains(lines[0], "setting="+roce.TOS.Setting().Name) ||
			!strings.Contains(lines[0], "found=0") || !strings.Contains(lines[0], "restored=106") ||
			!strings.Contains(lines[1], "setting="+roce.Mode.Setting().Name) || !strings.Contains(lines[1], `restored="RoCE v2"`) {
			t.Errorf("journal warnings:\n%s", strings.Join(lines, "\n"))
		}
		got := r.svc.Reconciler().Corrected()
		if got[roce.TOS.Setting().Name] != 1 || got[roce.Mode.Setting().Name] != 1 {
			t.Errorf("corrected %v", got)
		}
		if rec := r.portRecord(t, roce.TOS.Setting()); rec.State != reconcile.Holds {
			t.Errorf("TOS record %+v", rec)
		}
	})
	t.Run("report", func(t *testing.T) {
		t.Parallel()
		r := newDriftRig(t, driftCfg(config.DriftReport, rule))
		r.watching(t, portDir)
		hosttest.Write(t, r.root, tosFile, "0\n")
		waitUntil(t, "the TOS reported", func() bool { return r.portRecord(t, roce.TOS.Setting()).State == reconcile.Differs })
		hosttest.Write(t, r.root, modeFile, "IB/RoCE v1\n")
		waitUntil(t, "the mode reported", func() bool { return r.portRecord(t, roce.Mode.Setting()).State == reconcile.Differs })
		r.settled(t)
		if got := hosttest.Read(t, r.root, tosFile); got != "0" {
			t.Errorf("report wrote the TOS: %s", got)
		}
		if got := hosttest.Read(t, r.root, modeFile); got != "IB/RoCE v1" {
			t.Errorf("report wrote the mode: %s", got)
		}
		rec := r.portRecord(t, roce.TOS.Setting())
		if rec.Observed.String() != "0" || rec.Why == nil || !strings.Contains(rec.Why.Error(), `action = "report"`) {
			t.Errorf("TOS record %+v", rec)
		}
		if len(r.corrections()) != 0 || len(r.svc.Reconciler().Corrected()) != 0 {
			t.Errorf("report corrected: %v %v", r.corrections(), r.svc.Reconciler().Corrected())
		}
		// A change of the netdev's link state or carrier (rtnetlink; on
		// mlx5 every PFC change toggles the link) reads the device whole
		// but is not an arrival: still reported, not written.
		r.svc.RequestNetdevState("ens1f0np0")
		r.settled(t)
		if got := hosttest.Read(t, r.root, tosFile); got != "0" {
			t.Errorf("a link state change wrote the TOS under report: %s", got)
		}
		if rec := r.portRecord(t, roce.TOS.Setting()); rec.State != reconcile.Differs {
			t.Errorf("TOS record after a link state change %+v", rec)
		}
		// An arrival (the netdev registered again) applies the policy.
		r.svc.RequestNetdev("ens1f0np0")
		r.settled(t)
		if got := hosttest.Read(t, r.root, tosFile); got != "106" {
			t.Errorf("an arrival left the TOS at %s", got)
		}
		hosttest.Write(t, r.root, tosFile, "0\n")
		waitUntil(t, "the TOS reported again", func() bool { return r.portRecord(t, roce.TOS.Setting()).State == reconcile.Differs })
		// An explicit reconcile applies the policy in both modes.
		r.svc.ReconcileNow(context.Background())
		if got := hosttest.Read(t, r.root, tosFile); got != "106" {
			t.Errorf("reconcile left the TOS at %s", got)
		}
	})
}

// A DCB notification (RTM_SETDCB to RTNLGRP_DCB, built byte for byte) for
// a managed netdev makes rdmad read its PFC and trust again: a PFC another
// tool turned off is put back, or reported.
func TestDCBNotificationCorrectedOrReported(t *testing.T) {
	t.Parallel() // a rig of its own; the test mostly waits
	const rule = "[[qos]]\ndevice = \"mlx5_0\"\nport = 1\ntrust = \"dscp\"\npfc = [3]\n"
	for _, action := range []config.DriftAction{config.DriftCorrect, config.DriftReport} {
		t.Run(string(action), func(t *testing.T) {
			t.Parallel()
			r := newDriftRig(t, driftCfg(action, rule))
			if n, _ := r.dcb.Netdev("ens1f0np0"); n.PFC.Enabled != 0x08 {
				t.Fatalf("first pass: PFC %#x", n.PFC.Enabled)
			}
			r.dcb.Update("ens1f0np0", func(n *dcbtest.Netdev) { n.PFC.Enabled = 0 })
			// A notification about a netdev rdmad does not manage reads
			// nothing of mlx5_0.
			r.notify <- eventstest.DCBNotification("eth1", eventstest.DCBCmdIEEESet, 1)
			r.settled(t)
			if n, _ := r.dcb.Netdev("ens1f0np0"); n.PFC.Enabled != 0 {
				t.Fatalf("a notification about eth1 touched ens1f0np0: PFC %#x", n.PFC.Enabled)
			}
			r.notify <- eventstest.DCBNotification("ens1f0np0", eventstest.DCBCmdIEEESet, 2)
			switch action {
			case config.DriftCorrect:
				waitUntil(t, "PFC put back", func() bool { n, _ := r.dcb.Netdev("ens1f0np0"); return n.PFC.Enabled == 0x08 })
				r.settled(t)
				if got := r.svc.Reconciler().Corrected()[qos.PFC.Setting().Name]; got != 1 {
					t.Errorf("corrected %v", r.svc.Reconciler().Corrected())
				}
				if lines := r.corrections(); len(lines) != 1 || !strings.Contains(lines[0], "setting="+qos.PFC.Setting().Name) {
					t.Errorf("journal warnings %v", lines)
				}
			case config.DriftReport:
				waitUntil(t, "PFC reported", func() bool { return r.portRecord(t, qos.PFC.Setting()).State == reconcile.Differs })
				r.settled(t)
				if n, _ := r.dcb.Netdev("ens1f0np0"); n.PFC.Enabled != 0 {
					t.Errorf("report wrote PFC %#x", n.PFC.Enabled)
				}
			}
		})
	}
}

// A file rdmad writes (the memlock limits file) edited by another process
// (or an editor, which renames a new file over it) is seen from its
// directory: rewritten under "correct", reported under
// "report".
func TestManagedFileChangeCorrectedOrReported(t *testing.T) {
	const rule = "[memlock]\ngroup = \"rdma\"\nsoft = \"1G\"\nhard = \"1G\"\n"
	for _, action := range []config.DriftAction{config.DriftCorrect, config.DriftReport} {
		t.Run(string(action), func(t *testing.T) {
			t.Parallel()
			r := newDriftRig(t, driftCfg(action, rule))
			want := hosttest.Read(t, r.root, memlock.LimitsFile)
			if !strings.Contains(want, "@rdma") {
				t.Fatalf("first pass wrote %q", want)
			}
			r.watching(t, filepath.Dir(memlock.LimitsFile))
			// Edited, rdmad's header kept (a file without it is an
			// administrator's, which rdmad never writes over).
			hosttest.Write(t, r.root, memlock.LimitsFile, memlock.Header+"@rdma soft memlock unlimited\n")
			switch action {
			case config.DriftCorrect:
				waitUntil(t, "the limits file rewritten", func() bool { return hosttest.Read(t, r.root, memlock.LimitsFile) == want })
				r.settled(t)
				if got := r.svc.Reconciler().Corrected()[memlock.Limits.Setting().Name]; got != 1 {
					t.Errorf("corrected %v", r.svc.Reconciler().Corrected())
				}
			case config.DriftReport:
				waitUntil(t, "the limits file reported", func() bool { return r.hostRecord(t, memlock.Limits.Setting()).State == reconcile.Differs })
				r.settled(t)
				if got := hosttest.Read(t, r.root, memlock.LimitsFile); got == want {
					t.Error("report rewrote the limits file")
				}
			}
		})
	}
}

// A soft link rdmad created and someone deleted is created again under
// "correct" (the RDMA device's removal event asks for the pass), and
// reported under "report".
func TestDeletedLinkCorrectedOrReported(t *testing.T) {
	t.Parallel() // a rig of its own; the test mostly waits
	const rule = "[[link]]\nname = \"rxe0\"\ntype = \"rxe\"\nnetdev = \"eth1\"\n"
	for _, action := range []config.DriftAction{config.DriftCorrect, config.DriftReport} {
		t.Run(string(action), func(t *testing.T) {
			t.Parallel()
			r := newDriftRig(t, driftCfg(action, rule))
			if !r.h.Exists(host.ClassInfiniband + "/rxe0") {
				t.Fatal("rxe0 not created")
			}
			if err := os.RemoveAll(r.h.Path(host.ClassInfiniband, "rxe0")); err != nil {
				t.Fatal(err)
			}
			r.svc.RequestDevice("rxe0")
			r.settled(t)
			rec := r.hostRecord(t, links.Link.Setting())
			switch action {
			case config.DriftCorrect:
				if !r.h.Exists(host.ClassInfiniband+"/rxe0") || rec.State != reconcile.Holds {
					t.Errorf("rxe0 not created again: %+v", rec)
				}
				if got := r.svc.Reconciler().Corrected()[links.Link.Setting().Name]; got != 1 {
					t.Errorf("corrected %v", r.svc.Reconciler().Corrected())
				}
			case config.DriftReport:
				if r.h.Exists(host.ClassInfiniband+"/rxe0") || rec.State != reconcile.Differs {
					t.Errorf("report: rxe0 exists %v, record %+v", r.h.Exists(host.ClassInfiniband+"/rxe0"), rec)
				}
			}
		})
	}
}

// The netns mode, of which the kernel announces nothing, is found by the
// verify read-back every verify_interval, and put back.
func TestVerifyIntervalFindsUnannouncedChange(t *testing.T) {
	t.Parallel() // the shortest interval is 10 s
	r := newDriftRig(t, "[drift]\nverify_interval = \"10s\"\n[netns]\nmode = \"exclusive\"\n")
	mode := func() config.NetnsMode { m, _ := r.ns.Mode(); return m }
	if mode() != config.NetnsExclusive {
		t.Fatalf("first pass: netns %s", mode())
	}
	before := r.svc.Reconciler().Summary().LastVerify
	if err := r.ns.SetMode(config.NetnsShared); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if mode() != config.NetnsShared {
		t.Fatal("put back before the verify read-back")
	}
	waitUntilWithin(t, 15*time.Second, "the verify read-back", func() bool {
		return r.svc.Reconciler().Summary().LastVerify.After(before) && mode() == config.NetnsExclusive
	})
	r.settled(t)
	if got := r.svc.Reconciler().Corrected()[netns.Mode.Setting().Name]; got != 1 {
		t.Errorf("corrected %v", r.svc.Reconciler().Corrected())
	}
}

// A setting another manager keeps changing is corrected until it is
// contested (5 corrections within a minute), then left alone for the
// back-off: no more writes, the record says contested and why.
func TestContestedSettingBacksOff(t *testing.T) {
	t.Parallel()           // a rig of its own; the test mostly waits
	var ahead atomic.Int64 // how far the contest clock runs ahead of the wall clock
	now := func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) }
	r := newDriftRigAt(t, driftCfg(config.DriftCorrect, "[[roce]]\ndevice = \"mlx5_0\"\ntos = 106\n"), now)
	tosFile := host.ConfigfsPortPath("mlx5_0", 1, "default_roce_tos")
	r.watching(t, host.ConfigfsPortPath("mlx5_0", 1))
	for i := range reconcile.ContestCorrections {
		hosttest.Write(t, r.root, tosFile, "0\n")
		waitUntil(t, "correction", func() bool { return hosttest.Read(t, r.root, tosFile) == "106" })
		r.settled(t)
		if i < reconcile.ContestCorrections-1 && r.portRecord(t, roce.TOS.Setting()).State != reconcile.Holds {
			t.Fatalf("contested after %d corrections", i+1)
		}
	}
	hosttest.Write(t, r.root, tosFile, "32\n")
	waitUntil(t, "contested", func() bool { return r.portRecord(t, roce.TOS.Setting()).State == reconcile.Contested })
	for range 3 {
		hosttest.Write(t, r.root, tosFile, "32\n")
		r.settled(t)
	}
	if got := hosttest.Read(t, r.root, tosFile); got != "32" {
		t.Errorf("written during the back-off: %s", got)
	}
	// Read again within reconcile.ContestReadInterval: the record shows
	// the other manager's value.
	waitUntil(t, "the contested record showing 32", func() bool { return reconcile.Text(r.portRecord(t, roce.TOS.Setting()).Observed) == "32" })
	rec := r.portRecord(t, roce.TOS.Setting())
	if rec.Why == nil || !strings.Contains(rec.Why.Error(), "another manager keeps changing it") || rec.State != reconcile.Contested {
		t.Errorf("contested record %+v", rec)
	}
	if got := r.svc.Reconciler().Corrected()[roce.TOS.Setting().Name]; got != reconcile.ContestCorrections {
		t.Errorf("corrected %d, want %d", got, reconcile.ContestCorrections)
	}
	if retry := r.svc.Reconciler().NextRetry(); retry.At.IsZero() || !slices.Equal(retry.Devices, []string{"mlx5_0"}) || retry.Host {
		t.Errorf("retry %+v", retry)
	}
	// The back-off ends (the clock skips to 3 s before its end) and, with
	// no event and no verify read-back (verify_interval = "0"), rdmad
	// reads the TOS again and puts it back.
	ahead.Store(int64(reconcile.ContestBackoff - 3*time.Second))
	r.svc.RequestNetdevState("ens1f0np0") // a pass: not an arrival, and still in the back-off
	r.settled(t)
	if got := hosttest.Read(t, r.root, tosFile); got != "32" {
		t.Fatalf("written before the back-off ended: %s", got)
	}
	waitUntilWithin(t, 20*time.Second, "the TOS put back after the back-off", func() bool { return hosttest.Read(t, r.root, tosFile) == "106" })
}

// A contested host-wide setting (the memlock limits file) is read again
// when its back-off ends, with no event asking for it, and put back: the
// retry at the end of a back-off covers every contested subject, not only
// a device's ports.
func TestContestedHostSettingRetriedAfterBackoff(t *testing.T) {
	t.Parallel()           // a rig of its own; the test mostly waits
	var ahead atomic.Int64 // how far the contest clock runs ahead of the wall clock
	now := func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) }
	const rule = "[memlock]\ngroup = \"rdma\"\nsoft = \"1G\"\nhard = \"1G\"\n"
	r := newDriftRigAt(t, driftCfg(config.DriftCorrect, rule), now)
	want := hosttest.Read(t, r.root, memlock.LimitsFile)
	r.watching(t, filepath.Dir(memlock.LimitsFile))
	edited := memlock.Header + "@rdma soft memlock unlimited\n"
	for range reconcile.ContestCorrections {
		hosttest.Write(t, r.root, memlock.LimitsFile, edited)
		waitUntil(t, "the limits file rewritten", func() bool { return hosttest.Read(t, r.root, memlock.LimitsFile) == want })
		r.settled(t)
	}
	// Contested for ContestBackoff from now: skip to 5 s before its end.
	ahead.Store(int64(reconcile.ContestBackoff - 5*time.Second))
	hosttest.Write(t, r.root, memlock.LimitsFile, edited)
	waitUntil(t, "contested", func() bool { return r.hostRecord(t, memlock.Limits.Setting()).State == reconcile.Contested })
	r.settled(t)
	if got := hosttest.Read(t, r.root, memlock.LimitsFile); got == want {
		t.Fatal("written during the back-off")
	}
	// Nothing changes from here on: the end of the back-off alone brings
	// the read that puts the file back.
	waitUntilWithin(t, 20*time.Second, "the limits file put back after the back-off", func() bool {
		return hosttest.Read(t, r.root, memlock.LimitsFile) == want
	})
	r.settled(t)
	if rec := r.hostRecord(t, memlock.Limits.Setting()); rec.State != reconcile.Holds {
		t.Errorf("record after the back-off %+v", rec)
	}
	if got := r.svc.Reconciler().Corrected()[memlock.Limits.Setting().Name]; got != reconcile.ContestCorrections+1 {
		t.Errorf("corrected %d, want %d", got, reconcile.ContestCorrections+1)
	}
}

// On mlx5 a PFC correction toggles the port's link, so it counts as two
// toward the contest: the third correction within a minute makes the
// setting contested, and the fourth change stays.
func TestMLX5PFCCorrectionCountsTwice(t *testing.T) {
	t.Parallel() // a rig of its own; the test mostly waits
	r := newDriftRig(t, driftCfg(config.DriftCorrect, "[[qos]]\ndevice = \"mlx5_0\"\nport = 1\npfc = [3]\n"))
	turnOff := func() {
		r.dcb.Update("ens1f0np0", func(n *dcbtest.Netdev) { n.PFC.Enabled = 0 })
		r.notify <- eventstest.DCBNotification("ens1f0np0", eventstest.DCBCmdIEEESet, 1)
	}
	for i := range 3 {
		turnOff()
		waitUntil(t, "PFC put back", func() bool { n, _ := r.dcb.Netdev("ens1f0np0"); return n.PFC.Enabled == 0x08 })
		r.settled(t)
		if st := r.portRecord(t, qos.PFC.Setting()).State; st != reconcile.Holds {
			t.Fatalf("after correction %d: %s", i+1, st)
		}
	}
	turnOff()
	waitUntil(t, "contested", func() bool { return r.portRecord(t, qos.PFC.Setting()).State == reconcile.Contested })
	if n, _ := r.dcb.Netdev("ens1f0np0"); n.PFC.Enabled != 0 {
		t.Errorf("PFC written while contested: %#x", n.PFC.Enabled)
	}
	if got := r.svc.Reconciler().Corrected()[qos.PFC.Setting().Name]; got != 3 {
		t.Errorf("corrected %d", got)
	}
}

// A setting in its back-off costs no event: its port directory is not
// watched while the back-off runs, so another manager writing it
// thousands of times a second wakes nothing; rdmad reads it once every
// reconcile.ContestReadInterval instead (its record shows the value), and
// watches the directory again once the back-off ended.
func TestContestedSettingIsReadOnASecondsClockNotPerEvent(t *testing.T) {
	t.Parallel()           // a rig of its own; the test mostly waits
	var ahead atomic.Int64 // how far the contest clock runs ahead of the wall clock
	now := func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) }
	r := newDriftRigAt(t, driftCfg(config.DriftCorrect, "[[roce]]\ndevice = \"mlx5_0\"\ntos = 106\n"), now)
	tosFile := r.contestTOS(t)
	portDir := r.h.Path(host.ConfigfsPortPath("mlx5_0", 1))
	waitUntil(t, "the port directory no longer watched", func() bool { return !slices.Contains(r.dirs.Watched(), portDir) })
	var passes atomic.Int32
	r.svc.OnPassDone(func() { passes.Add(1) })
	start := time.Now()
	for i := 0; time.Since(start) < 2500*time.Millisecond; i++ {
		hosttest.Write(t, r.root, tosFile, strconv.Itoa(i%200)+"\n")
	}
	took := time.Since(start)
	if n, most := passes.Load(), int32(took/reconcile.ContestReadInterval)+2; n > most {
		t.Errorf("%d passes in %s of another manager's writes during the back-off, want at most %d", n, took.Round(time.Millisecond), most)
	}
	hosttest.Write(t, r.root, tosFile, "77\n")
	waitUntil(t, "the value read within a second", func() bool {
		rec := r.portRecord(t, roce.TOS.Setting())
		return rec.State == reconcile.Contested && reconcile.Text(rec.Observed) == "77"
	})
	// The back-off ends: put back, and watched again.
	ahead.Store(int64(reconcile.ContestBackoff))
	waitUntilWithin(t, 20*time.Second, "the TOS put back after the back-off", func() bool { return hosttest.Read(t, r.root, tosFile) == "106" })
	waitUntil(t, "the port directory watched again", func() bool { return slices.Contains(r.dirs.Watched(), portDir) })
}

// Two out-of-band changes of one setting a few seconds apart, well below
// the contest rate, are a slow fight: doctor warns setting-fought with the
// count of corrections (2), the first and the last, and the systemd timer
// whose service runs cma_roce_tos as the likely other manager;
// rdmad_drift_fought's count (Summary.Fought) is 1. A window without a
// correction clears both.
func TestSlowFightIsAFinding(t *testing.T) {
	var ahead atomic.Int64 // how far the contest clock runs ahead of the wall clock
	now := func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) }
	r := newDriftRigAt(t, driftCfg(config.DriftCorrect, "[[roce]]\ndevice = \"mlx5_0\"\ntos = 106\n"), now)
	hosttest.Write(t, r.root, "usr/lib/systemd/system/roce-tos.service", "[Service]\nType=oneshot\nExecStart=/usr/sbin/cma_roce_tos -d mlx5_0 -t 0\n")
	hosttest.Write(t, r.root, "etc/systemd/system/roce-tos.timer", "[Timer]\nOnCalendar=minutely\n")
	hosttest.Write(t, r.root, "usr/lib/systemd/system/mlnx-qos.service", "[Service]\nExecStart=/usr/bin/mlnx_qos -i ens1f0np0 --pfc 0,0,0,1,0,0,0,0\n")
	tosFile := host.ConfigfsPortPath("mlx5_0", 1, "default_roce_tos")
	r.watching(t, host.ConfigfsPortPath("mlx5_0", 1))
	fought := func() []doctor.Finding {
		var out []doctor.Finding
		for _, f := range compose.Diagnose(r.svc) {
			if f.ID == "setting-fought" {
				out = append(out, f)
			}
		}
		return out
	}
	for i := range 2 {
		if i > 0 {
			ahead.Add(int64(5 * time.Second))
		}
		hosttest.Write(t, r.root, tosFile, "0\n")
		waitUntil(t, "the TOS put back", func() bool { return hosttest.Read(t, r.root, tosFile) == "106" })
		r.settled(t)
		if i == 0 {
			if got := fought(); len(got) != 0 {
				t.Fatalf("one correction is fought: %+v", got)
			}
		}
	}
	got := fought()
	if len(got) != 1 {
		t.Fatalf("setting-fought findings after two corrections 5 s apart: %+v", got)
	}
	f := got[0]
	if f.Severity != doctor.SeverityWarn || f.Subject != reconcile.PortSubject("mlx5_0", 1) {
		t.Errorf("finding %+v", f)
	}
	for _, want := range []string{"RoCE TOS", "back 2 times", "within 1h0m0s", "roce-tos.timer (it starts roce-tos.service, which runs /usr/sbin/cma_roce_tos -d mlx5_0 -t 0)"} {
		if !strings.Contains(f.Finding, want) {
			t.Errorf("the finding %q does not say %q", f.Finding, want)
		}
	}
	if strings.Contains(f.Finding, "mlnx-qos") {
		t.Errorf("the finding names a unit that does not set the TOS: %q", f.Finding)
	}
	if n := r.svc.Reconciler().Summary().Fought[roce.TOS.Setting().Name]; n != 1 {
		t.Errorf("fought %d subjects, want 1", n)
	}
	if st := r.portRecord(t, roce.TOS.Setting()).State; st != reconcile.Holds {
		t.Errorf("a slow fight is contested: %s", st)
	}
	// A window without a correction: not fought any more.
	ahead.Add(int64(config.DefaultFightWindow + time.Second))
	if got := fought(); len(got) != 0 {
		t.Errorf("still fought a window later: %+v", got)
	}
	if n := r.svc.Reconciler().Summary().Fought[roce.TOS.Setting().Name]; n != 0 {
		t.Errorf("fought %d subjects a window later", n)
	}
}

// A back-off whose end passes while the verify loop is woken for
// something else (a pass over another device) still ends in a read and a
// correction: the setting's directory is not watched during its back-off,
// so a lost end would leave it uncorrected (for good with verify_interval
// = "0").
func TestBackoffEndIsNotLostToAWakeUp(t *testing.T) {
	t.Parallel()           // a rig of its own; the test mostly waits
	var ahead atomic.Int64 // how far the contest clock runs ahead of the wall clock
	now := func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) }
	r := newDriftRigAt(t, driftCfg(config.DriftCorrect, "[[roce]]\ndevice = \"mlx5_0\"\ntos = 106\n"), now)
	tosFile := r.contestTOS(t)
	r.settled(t)
	// The back-off ends on the contest clock; at once a pass over another
	// device wakes the loop.
	ahead.Store(int64(reconcile.ContestBackoff + time.Second))
	r.svc.RequestDevice("mlx5_1")
	waitUntilWithin(t, 5*time.Second, "the TOS put back after the back-off", func() bool { return hosttest.Read(t, r.root, tosFile) == "106" })
}
