package qualify_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rdmad/rdmad/cmd/rdmactl/internal/qualify"
	"github.com/rdmad/rdmad/daemon/fixturekernel"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/daemon/qos"
	"github.com/rdmad/rdmad/daemon/reconcile"
	"github.com/rdmad/rdmad/daemon/roce"
)

// digest is the fixture's files as hosttest.Tree lists them.
func digest(t *testing.T, root string) string { return strings.Join(hosttest.Tree(t, root), "\n") }

func resultOf(t *testing.T, p qualify.Port, setting string) qualify.Result {
	t.Helper()
	for _, r := range p.Results {
		if r.Setting == setting {
			return r
		}
	}
	t.Fatalf("no result for %s in %+v", setting, p.Results)
	return qualify.Result{}
}

// On the mlx5 fixture (its netdevs' DCB state as mlx5 reports it after
// boot), every setting the port offers is tried and put back: the RoCE
// settings are announced by inotify, the DCB ones by a DCB notification,
// pause by ethtool's; PFC interrupts traffic (mlx5 toggles the link on a
// new PFC mask) and the cable length does not; the storm timeout has no
// notification; OFED's settings are not offered; every file of the fixture
// is as it was.
func TestQualifyMLX5Fixture(t *testing.T) {
	root := hosttest.Copy(t, "mlx5")
	// What a capture of a host carries beyond the bundled fixture: the
	// kernel's release and the function's PCI ids.
	hosttest.Write(t, root, "proc/sys/kernel/osrelease", "6.12.57+deb13-amd64\n")
	for f, v := range map[string]string{"device": "0x1017", "subsystem_vendor": "0x15b3", "subsystem_device": "0x0007"} {
		hosttest.Write(t, root, "sys/class/infiniband/mlx5_0/device/"+f, v+"\n")
	}
	before := digest(t, root)
	var seen []string
	rep, err := qualify.Run(t.Context(), qualify.Options{Kernel: qualify.FixtureKernel(root), Targets: []string{"ens1f0np0"},
		// A notification comes within milliseconds; a loaded machine
		// has taken 241 ms for the write alone.
		Wait: time.Second, Progress: func(_ qualify.Port, r qualify.Result) { seen = append(seen, r.Setting) }})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Ports) != 1 {
		t.Fatalf("ports %+v", rep.Ports)
	}
	p := rep.Ports[0]
	if p.Subject() != "mlx5_0/1 (ens1f0np0)" || p.Driver != "mlx5_core" || p.Firmware != "16.35.2000" || p.Refused != "" ||
		p.PCIID != "15b3:1017 15b3:0007" || p.PCIAddress != "0000:3b:00.0" || p.DriverVersion != "in-tree (kernel 6.12.57+deb13-amd64)" {
		t.Errorf("port %+v", p)
	}
	if rep.Kernel != "6.12.57+deb13-amd64" || rep.Fixture != root {
		t.Errorf("report: kernel %q, fixture %q", rep.Kernel, rep.Fixture)
	}
	want := map[string]string{
		"roce_mode": qualify.Works, "roce_tos": qualify.Works, "roce_traffic_class": qualify.NotOffered,
		"qos_pfc": qualify.InterruptsTraffic, "qos_cable_length": qualify.Works, "qos_trust": qualify.Works,
		"qos_prio_tc": qualify.Works, "qos_tc_bandwidth": qualify.Works, "qos_tc_maxrate": qualify.Works,
		"qos_prio_buffer": qualify.Works, "qos_buffer_size": qualify.Works, "qos_pause": qualify.Works,
		"qos_pfc_storm_timeout": qualify.NoNotification, "qos_ecn": qualify.NotOffered,
		"qos_cnp_dscp": qualify.NotOffered, "qos_cnp_priority": qualify.NotOffered,
	}
	for setting, w := range want {
		r := resultOf(t, p, setting)
		if r.Result != w || !r.Restored || r.RestoreError != "" {
			t.Errorf("%s: %+v, want %s and restored", setting, r, w)
		}
	}
	if len(seen) != len(want) {
		t.Errorf("progress told %v", seen)
	}
	pfc := resultOf(t, p, "qos_pfc")
	if !pfc.LinkToggled || !pfc.Notified || pfc.Notice != "dcb" || pfc.Was != "[]" || pfc.Tried != "[3]" || pfc.ReadBack != "[3]" {
		t.Errorf("PFC: %+v", pfc)
	}
	if r := resultOf(t, p, "roce_tos"); !r.Notified || r.Notice != "inotify" || r.LinkToggled || r.Was != "0" || r.Tried != "106" {
		t.Errorf("TOS: %+v", r)
	}
	if r := resultOf(t, p, "qos_pause"); !r.Notified || r.Notice != "ethtool" {
		t.Errorf("pause: %+v", r)
	}
	if r := resultOf(t, p, "qos_cable_length"); r.LinkToggled {
		t.Errorf("a new cable length toggled the link: %+v", r)
	}
	if after := digest(t, root); after != before {
		t.Errorf("the fixture differs after qualify:\n%s", diff(before, after))
	}
}

func diff(a, b string) string {
	return strings.Join(hosttest.TreeDiff(strings.Split(a, "\n"), strings.Split(b, "\n")), "\n")
}

// A port whose device carries queue pairs other than the kernel's own
// management ones (a process's, IPoIB's) is refused, and nothing of the
// fixture changes; its GSI queue pairs alone are not traffic; --force
// qualifies it all the same.
func TestQualifyRefusesAPortInUse(t *testing.T) {
	root := hosttest.Copy(t, "mlx5")
	gsi := `  {"device": "mlx5_0", "port": 1, "lqpn": 1, "type": "GSI", "state": "RTS", "kernel": "ib_core"},
  {"device": "mlx5_0", "port": 1, "lqpn": 2, "type": "UD", "state": "RTS", "kernel": "mlx5_ib"}`
	hosttest.Write(t, root, fixturekernel.QPFile, "{\"qp\": [\n"+gsi+",\n"+
		`  {"device": "mlx5_0", "port": 1, "lqpn": 300, "type": "RC", "state": "RTS", "pid": 4242},`+"\n"+
		`  {"device": "mlx5_0", "lqpn": 301, "type": "UD", "state": "RESET", "kernel": "ib_ipoib"}`+"\n]}\n")
	before := digest(t, root)
	k := qualify.FixtureKernel(root)
	rep, err := qualify.Run(t.Context(), qualify.Options{Kernel: k, Targets: []string{"mlx5_0/1"}, Wait: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	p := rep.Ports[0]
	if !strings.Contains(p.Refused, "RC queue pair 300 of pid 4242") || !strings.Contains(p.Refused, "UD queue pair 301 of kernel ib_ipoib") ||
		strings.Contains(p.Refused, "queue pair 1 ") || len(p.Results) != 0 || len(p.QueuePairs) != 2 {
		t.Errorf("a port in use: %+v", p)
	}
	if after := digest(t, root); after != before {
		t.Errorf("a refused port changed the fixture:\n%s", diff(before, after))
	}
	rep, err = qualify.Run(t.Context(), qualify.Options{Kernel: k, Targets: []string{"mlx5_0/1"}, Wait: 100 * time.Millisecond, Force: true})
	if err != nil || rep.Ports[0].Refused != "" || len(rep.Ports[0].Results) == 0 {
		t.Errorf("--force: %v %+v", err, rep.Ports)
	}
	hosttest.Write(t, root, fixturekernel.QPFile, "{\"qp\": [\n"+gsi+"\n]}\n")
	rep, err = qualify.Run(t.Context(), qualify.Options{Kernel: k, Targets: []string{"mlx5_0/1"}, Wait: 100 * time.Millisecond})
	if err != nil || rep.Ports[0].Refused != "" {
		t.Errorf("the GSI queue pairs alone: %v %+v", err, rep.Ports)
	}
}

// A qualification stopped half way (SIGINT, SIGTERM: its context ends)
// puts back the setting under way, tries no other, and leaves the fixture
// as it was.
func TestQualifyStoppedPutsBack(t *testing.T) {
	root := hosttest.Copy(t, "mlx5")
	before := digest(t, root)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var once sync.Once
	// The context ends while qos_pfc's wait runs: cancel from the
	// progress of the setting before it, and the wait is long.
	rep, err := qualify.Run(ctx, qualify.Options{Kernel: qualify.FixtureKernel(root), Targets: []string{"mlx5_0/1"}, Wait: 2 * time.Second,
		Progress: func(_ qualify.Port, r qualify.Result) {
			if r.Setting == "roce_traffic_class" {
				once.Do(func() { time.AfterFunc(300*time.Millisecond, cancel) })
			}
		}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v", err)
	}
	p := rep.Ports[0]
	if r := resultOf(t, p, "qos_pfc"); !r.Restored {
		t.Errorf("PFC under way when stopped: %+v", r)
	}
	if r := resultOf(t, p, "qos_trust"); r.Result != qualify.NotTried || !strings.Contains(r.Detail, "stopped") {
		t.Errorf("the setting after: %+v", r)
	}
	if after := digest(t, root); after != before {
		t.Errorf("the fixture differs after a stopped qualify:\n%s", diff(before, after))
	}
}

// What qualify refuses to start: outside the initial PID namespace, no
// target, a name that is nothing, an InfiniBand port.
func TestQualifyRefusals(t *testing.T) {
	k := qualify.FixtureKernel(hosttest.Copy(t, "mlx4"))
	for _, tc := range []struct {
		o    qualify.Options
		want string
	}{
		{qualify.Options{}, "name a device"},
		{qualify.Options{Targets: []string{"mlx9_0"}}, `"mlx9_0" is no RDMA device`},
		{qualify.Options{Targets: []string{"mlx4_0/1"}}, "mlx4_0/1 is infiniband, not RoCE"},
		{qualify.Options{Targets: []string{"mlx4_0"}, All: true}, "name no device with it"},
	} {
		tc.o.Kernel = k
		_, err := qualify.Run(t.Context(), tc.o)
		var ae *qualify.ArgError
		if !errors.As(err, &ae) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want a usage error with %q", tc.o.Targets, err, tc.want)
		}
	}
	outside := *k
	outside.InitialPIDNamespace = func() (bool, error) { return false, nil }
	_, err := qualify.Run(t.Context(), qualify.Options{Kernel: &outside, Targets: []string{"mlx4_0/2"}})
	var ref *qualify.Refusal
	if !errors.As(err, &ref) || !strings.Contains(err.Error(), "initial PID namespace") {
		t.Errorf("outside the initial PID namespace: %v", err)
	}
}

// Every setting qualify tries is one rdmad keeps on a port, by the same
// name: a hold names them, and the tables are looked up by them.
func TestQualifiedSettingsAreRdmads(t *testing.T) {
	root := hosttest.Copy(t, "mlx5")
	rep, err := qualify.Run(t.Context(), qualify.Options{Kernel: qualify.FixtureKernel(root), Targets: []string{"mlx5_0/1"}, Wait: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	kept := map[string]bool{}
	for _, s := range append((*roce.Part)(nil).Settings(), (*qos.Part)(nil).Settings()...) {
		kept[s.Name] = true
	}
	for _, r := range rep.Ports[0].Results {
		if !kept[r.Setting] {
			t.Errorf("qualify tries %q, which is no setting rdmad keeps on a port", r.Setting)
		}
		if n, ok := reconcile.NotificationOf(append(roce.Notifications, qos.Notifications...), "mlx5_core", settingNamed(r.Setting)); !ok || n.Notice.String() != r.Notice {
			t.Errorf("%s: qualify watches for %q, rdmad's table says %+v", r.Setting, r.Notice, n)
		}
	}
}

func settingNamed(name string) *reconcile.Setting {
	for _, s := range append((*roce.Part)(nil).Settings(), (*qos.Part)(nil).Settings()...) {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// A result that disagrees with rdmad's tables says so, naming the row.
func TestCompareNamesTheRow(t *testing.T) {
	rep := &qualify.Report{Ports: []qualify.Port{{Device: "mlx5_0", Port: 1, Driver: "mlx5_core", Results: []qualify.Result{
		{Setting: "qos_pfc", Result: qualify.Works, Notice: "dcb", Notified: true},
		{Setting: "qos_cable_length", Result: qualify.InterruptsTraffic, Notice: "dcb", Notified: true, LinkToggled: true, LinkDownMS: 900},
		{Setting: "qos_pause", Result: qualify.NoNotification, Notice: "ethtool"},
		{Setting: "qos_pfc_storm_timeout", Result: qualify.NoNotification, Notice: "none"},
		{Setting: "qos_ecn", Result: qualify.NotOffered, Notice: "inotify"},
	}}}}
	tables := qualify.Tables{
		Notifications: []qualify.NoticeRow{{Setting: "qos_pfc", Notice: "dcb"}, {Setting: "qos_cable_length", Notice: "dcb"},
			{Setting: "qos_pause", Notice: "ethtool"}, {Setting: "qos_pfc_storm_timeout", Notice: "none"}},
		Disruptions: []qualify.DisruptionRow{{Driver: "mlx5_core", Setting: "qos_pfc", Effect: "link-toggle"},
			{Driver: "mlx5_core", Setting: "qos_cable_length", Effect: "none"}},
	}
	notes := qualify.Compare(rep, tables, 2*time.Second)
	if len(notes) != 0 {
		t.Errorf("notes %q", notes)
	}
	got := map[string][]string{}
	for _, r := range rep.Ports[0].Results {
		got[r.Setting] = r.Disagrees
	}
	want := map[string][]string{
		"qos_pfc":          {`disruption table row "mlx5_core qos_pfc link-toggle": the link stayed up`},
		"qos_cable_length": {`disruption table row "mlx5_core qos_cable_length none": the link went down for 900 ms`},
		"qos_pause":        {`notification table row "every driver qos_pause ethtool": no ethtool notification came within 2s; rdmad sees such a change only at its verify read-back`},
	}
	for s, w := range want {
		if !slices.Equal(got[s], w) {
			t.Errorf("%s disagrees %q, want %q", s, got[s], w)
		}
	}
	for _, s := range []string{"qos_pfc_storm_timeout", "qos_ecn"} {
		if len(got[s]) != 0 {
			t.Errorf("%s disagrees %q", s, got[s])
		}
	}
	if notes := qualify.Compare(&qualify.Report{}, qualify.Tables{NotificationsMissing: "rdmad does not run", DisruptionsMissing: "no table"}, time.Second); len(notes) != 2 {
		t.Errorf("notes without tables: %q", notes)
	}
}
